# The real-cluster fixtures (cluster, namespace, kubectl) live with the harness in e2e/.
pytest_plugins = ["e2e.pytest_plugin"]
