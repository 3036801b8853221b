"""The I/O layer: kopf registration, informers, the work queue, applying Plans."""
