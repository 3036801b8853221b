"""Apache YuniKorn's standalone scheduler (k8shim). Its web port is fixed: one YuniKorn cluster a machine."""
from __future__ import annotations

from e2e import build
from e2e.harness.identities import component_kubeconfig

YUNIKORN_SCHEDULER_NAME = "yunikorn"
YUNIKORN_NAMESPACE = "yunikorn"
YUNIKORN_WEB_PORT = 9080  # hard-coded in yunikorn-core: one YuniKorn cluster per machine


def start(cluster, timeout: float) -> None:
    # The standalone shim reads KUBECONFIG and keeps its configmaps
    # (yunikorn-configs, optional) in $NAMESPACE.
    cluster.kubectl("create", "namespace", YUNIKORN_NAMESPACE)
    cluster.spawn("yunikorn-scheduler", [build.binary("yunikorn-scheduler")], env={
        "KUBECONFIG": str(component_kubeconfig(cluster, "yunikorn")),
        "NAMESPACE": YUNIKORN_NAMESPACE},
        health=f"http://127.0.0.1:{YUNIKORN_WEB_PORT}/ws/v1/scheduler/healthcheck")
    cluster.wait_healthy("yunikorn-scheduler", timeout)
