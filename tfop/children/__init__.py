"""What a job becomes: its pods, services and TF_CONFIG, rendered from templates/ (pure)."""
