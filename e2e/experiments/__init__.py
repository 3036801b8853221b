"""One-off measurements behind a design decision, kept to be run again: not benchmarks, not tests."""
