"""The real-cluster harness: a local Kubernetes control plane as plain processes (cluster.py), one
module a component (control plane, kwok nodes, each batch scheduler, Kueue, the real node), the
certificates, the container images and tfop run beside it as a process.

    python -m e2e.harness up|status|down|restart ...   (cluster.py's docstring)
"""
