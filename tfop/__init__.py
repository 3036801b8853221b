"""tfop: a Kubernetes operator for Kubeflow TFJobs, with gang scheduling."""

__version__ = "0.1.0"
