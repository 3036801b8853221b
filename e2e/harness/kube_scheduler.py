"""kube-scheduler: the default scheduler, of the cluster's Kubernetes version."""
from __future__ import annotations

from pathlib import Path

import yaml

from e2e.harness import control_plane
from e2e.harness.identities import component_kubeconfig


def client_connection(cluster, kubeconfig: Path) -> dict:
    """A KubeSchedulerConfiguration's clientConnection: the scheduler's client QPS (default 50,
    burst 100) bounds how fast it binds pods (a pods/binding request each), so a benchmark
    that measures the rest of the control plane raises it."""
    qps = cluster.state.get("scheduler_qps")
    return {"kubeconfig": str(kubeconfig), **({"qps": qps, "burst": 2 * qps} if qps else {})}


def start(cluster, timeout: float) -> None:
    kc, p = component_kubeconfig(cluster, "kube-scheduler"), cluster.state["ports"]
    auth = ["--authentication-kubeconfig", kc, "--authorization-kubeconfig", kc,
            "--bind-address", "127.0.0.1", "--secure-port", p["scheduler"]]
    binary = control_plane.binary(cluster, "kube-scheduler")
    if cluster.state.get("scheduler_qps") or cluster.state.get("kubernetes"):
        # The client QPS and the backoffs have no flag of their own (only in the configuration
        # file), and the deprecated --kubeconfig/--leader-elect flags are not mixed with a file.
        conf = {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
                "leaderElection": {"leaderElect": False}, "clientConnection": client_connection(cluster, kc)}
        if cluster.state.get("kubernetes"):
            # A gang found unschedulable waits out its backoff (default up to 10 s) before the
            # next try, even once capacity is free: keep tests from waiting on that.
            conf.update(podInitialBackoffSeconds=1, podMaxBackoffSeconds=1)
        (cluster.dir / "kube-scheduler.yaml").write_text(yaml.safe_dump(conf))
        cmd = [binary, *control_plane.version_flags(cluster, "kube-scheduler"),
               "--config", cluster.dir / "kube-scheduler.yaml", *auth]
    else:
        cmd = [binary, "--kubeconfig", kc, *auth, "--leader-elect=false"]
    cluster.spawn("kube-scheduler", cmd, health=f"https://127.0.0.1:{p['scheduler']}/healthz")
    cluster.wait_healthy("kube-scheduler", timeout)
