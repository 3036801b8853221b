"""The asyncio Kubernetes client, kubeconfig loading and trimmed object copies."""
