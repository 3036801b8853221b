"""End-to-end harness: a real local control plane built from Go modules."""
