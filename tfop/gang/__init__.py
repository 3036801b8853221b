"""Gang scheduling backends: one module per batch scheduler, chosen by registry.py."""
