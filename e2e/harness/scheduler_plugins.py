"""scheduler-plugins: a second kube-scheduler with the Coscheduling plugin, and its controller,
which writes each PodGroup's phase."""
from __future__ import annotations

import yaml

from e2e import build
from e2e.harness.control_plane import install_crds
from e2e.harness.identities import component_kubeconfig
from e2e.harness.kube_scheduler import client_connection

COSCHEDULING_SCHEDULER_NAME = "scheduler-plugins-scheduler"


def start(cluster, timeout: float) -> None:
    src = build.module_dir("scheduler-plugins", "sigs.k8s.io/scheduler-plugins")
    # PodGroup CRD (Coscheduling) + ElasticQuota CRD (the controller watches both).
    install_crds(cluster, [src / "manifests/coscheduling/crd.yaml",
                           src / "manifests/capacityscheduling/crd.yaml"], timeout)
    kc, p = component_kubeconfig(cluster, "scheduler-plugins"), cluster.state["ports"]
    conf = {
        "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
        "leaderElection": {"leaderElect": False},
        "clientConnection": client_connection(cluster, kc),
        "profiles": [{
            "schedulerName": COSCHEDULING_SCHEDULER_NAME,
            "plugins": {
                "multiPoint": {"enabled": [{"name": "Coscheduling"}]},
                # Coscheduling must be the only queue sort of the profile.
                "queueSort": {"enabled": [{"name": "Coscheduling"}], "disabled": [{"name": "*"}]},
            },
        }],
    }
    (cluster.dir / "coscheduling.yaml").write_text(yaml.safe_dump(conf))
    cluster.spawn("scheduler-plugins-scheduler", [
        build.binary("scheduler-plugins-scheduler"), "--config", cluster.dir / "coscheduling.yaml",
        "--authentication-kubeconfig", kc, "--authorization-kubeconfig", kc,
        "--bind-address", "127.0.0.1", "--secure-port", p["cosched"]],
        health=f"https://127.0.0.1:{p['cosched']}/healthz")
    # Scheduler defaults left as shipped: Coscheduling re-tries a rejected gang only when its
    # PodGroup changes (or after 5 min), which tfop's gang-retry touch must handle, as in production.
    cluster.wait_healthy("scheduler-plugins-scheduler", timeout)
    cluster.spawn("scheduler-plugins-controller", [
        build.binary("scheduler-plugins-controller"),
        "--metricsAddr", f"127.0.0.1:{p['cosched_ctrl_metrics']}",
        "--probeAddr", f"127.0.0.1:{p['cosched_ctrl_probe']}", *_controller_client_flags(cluster)],
        env={"KUBECONFIG": str(kc)}, health=f"http://127.0.0.1:{p['cosched_ctrl_probe']}/healthz")
    cluster.wait_healthy("scheduler-plugins-controller", timeout)


def _controller_client_flags(cluster) -> list[str]:
    """The scheduler-plugins controller writes each PodGroup's phase (Pending, Scheduling,
    Running) at client QPS 5, burst 10 by default: 400 gangs' phases then trail their pods by
    tens of seconds, and every job's status with them. Raised with the schedulers'."""
    qps = cluster.state.get("scheduler_qps")
    return ["--qps", str(qps), "--burst", str(2 * qps)] if qps else []
