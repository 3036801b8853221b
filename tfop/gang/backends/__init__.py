"""One module per batch scheduler; each registers under the tfop.gang_backends entry point."""
