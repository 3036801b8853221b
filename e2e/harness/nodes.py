"""Node objects as the node lifecycle controller leaves them: Ready, lost (Unknown and tainted
unreachable), recovered; and waits for one of those."""
from __future__ import annotations

import json

from e2e.harness.errors import ClusterError

# The taint the node lifecycle controller puts on a node it stopped hearing from (NoSchedule and
# NoExecute), and the one an admin puts on a node known to be down (PodGC then force-deletes its
# terminating pods).
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
OUT_OF_SERVICE_TAINT = "node.kubernetes.io/out-of-service"


def node(cluster, name: str) -> dict:
    return json.loads(cluster.kubectl("get", "node", name, "-o", "json").stdout)


def node_ready(cluster, name: str) -> bool:
    return ready_status(node(cluster, name)) == "True"


def wait_node(cluster, name: str, what: str, pred, timeout: float) -> dict:
    """Wait until pred(node) holds; on timeout the error shows the node's Ready condition and taints."""
    seen: dict = {}

    def holds() -> bool:
        seen["node"] = node(cluster, name)
        return pred(seen["node"])
    try:
        cluster.wait(f"node {name} {what}", holds, timeout, "kube-controller-manager")
    except ClusterError as e:
        last = seen.get("node") or {}
        raise ClusterError(f"{e}\nnode {name} last seen: Ready {ready_status(last)}, taints "
                           f"{last.get('spec', {}).get('taints')}") from None
    return seen["node"]


def wait_recovered(cluster, name: str, timeout: float) -> dict:
    return wait_node(cluster, name, f"Ready again, without the {UNREACHABLE_TAINT} taint", recovered, timeout)


def wait_lost(cluster, name: str, timeout: float | None = None) -> dict:
    """Wait until the node lifecycle controller has marked node `name` Ready Unknown and
    tainted it unreachable (NoSchedule and NoExecute); returns the node. Default timeout: the
    grace period (the cluster's, or 50 s) plus 30 s."""
    grace = cluster.state.get("node_monitor_grace_period") or 50
    return wait_node(cluster, name, f"Ready Unknown and tainted {UNREACHABLE_TAINT}", lost,
                     timeout if timeout is not None else grace + 30)


def ready_status(node: dict) -> str | None:
    return next((c["status"] for c in node.get("status", {}).get("conditions", []) if c["type"] == "Ready"), None)


def lost(node: dict) -> bool:
    """As the node lifecycle controller leaves a node it stopped hearing from."""
    return ready_status(node) == "Unknown" and _unreachable_effects(node) >= {"NoSchedule", "NoExecute"}


def recovered(node: dict) -> bool:
    return ready_status(node) == "True" and not _unreachable_effects(node)


def _unreachable_effects(node: dict) -> set[str]:
    return {t.get("effect") for t in node.get("spec", {}).get("taints") or [] if t.get("key") == UNREACHABLE_TAINT}
