"""The TFJob API: constants, the one internal model, conditions, quantities, normalize and validation.

Imports nothing else of tfop: every other layer builds on it."""
