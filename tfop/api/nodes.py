"""Whether Kubernetes says a pod's node is gone, read from the node as the operator keeps it
(tfop/runtime/trim.py trim_node) and from the pod's own conditions.

A node is lost when its Ready condition is Unknown (the node lifecycle controller heard nothing from
its kubelet for --node-monitor-grace-period) or False, when it carries the unreachable or not-ready
taint while not Ready, when the node object is deleted, or when the taint manager is evicting the
pod. Ready False counts only once it has lasted NOT_READY_GRACE_SECONDS: a kubelet that restarts
reports NotReady for the few seconds its runtime takes to answer, and its pods keep running
meanwhile. A node Ready again keeps its taint for a few seconds, until the controller lifts it (longer
while it deems the zone disrupted): the gang made anew on it then is not lost again.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tfop.api import conditions

UNREACHABLE = "node.kubernetes.io/unreachable"
NOT_READY = "node.kubernetes.io/not-ready"
# Non-graceful node shutdown: an admin says the node is down; PodGC then force-deletes its terminating
# pods, and only then may a pod of the same name start elsewhere.
OUT_OF_SERVICE = "node.kubernetes.io/out-of-service"
NOT_READY_GRACE_SECONDS = 20.0
DISRUPTION_TARGET = "DisruptionTarget"
BY_TAINT_MANAGER = "DeletionByTaintManager"

Node = Mapping[str, Any]
Pod = Mapping[str, Any]


@dataclass(frozen=True)
class NodeLoss:
    reason: str  # NodeUnreachable, NodeNotReady, NodeDeleted or DeletionByTaintManager
    why: str  # "its Ready condition is Unknown since ...: the kubelet stopped posting status"
    since: datetime | None = None  # when Kubernetes first said so, where it says
    out_of_service: bool = False  # tainted out-of-service: Kubernetes releases its pods itself


def _taint_keys(node: Node) -> set[str]:
    return {t[0] for t in node.get("taints") or ()}


def _since(node: Node) -> datetime | None:
    try:
        return conditions.parse_time(node.get("readySince"))
    except ValueError:
        return None


def node_loss(node: Node | None, now: datetime) -> NodeLoss | None:
    """The loss of a node as kept by trim_node, None while it is not lost; `node` None: deleted."""
    if node is None:
        return NodeLoss("NodeDeleted", "the node was deleted")
    status, since, taints = node.get("readyStatus"), _since(node), _taint_keys(node)
    out = OUT_OF_SERVICE in taints
    stamp = f" since {conditions.timestamp(since)}" if since else ""
    if status == "Unknown":
        return NodeLoss("NodeUnreachable", f"its Ready condition is Unknown{stamp}: its kubelet stopped posting "
                        "status", since, out)
    if status == "True" and not out:
        return None  # a node back: the controller lifts its unreachable or not-ready taint seconds later
    if UNREACHABLE in taints:
        return NodeLoss("NodeUnreachable", f"it is tainted {UNREACHABLE}", since, out)
    if status == "False" or NOT_READY in taints:
        lasted = (now - since).total_seconds() if since else None
        if lasted is not None and lasted < NOT_READY_GRACE_SECONDS and not out:
            return None  # not yet: see not_ready_ends
        said = node.get("readyMessage") or ""
        return NodeLoss("NodeNotReady", f"its Ready condition is False{stamp}" + (f" ({said})" if said else ""),
                        since, out)
    if out:
        return NodeLoss("NodeOutOfService", f"it is tainted {OUT_OF_SERVICE}", since, out)
    return None


def not_ready_ends(node: Node | None, now: datetime) -> float | None:
    """Seconds until a NotReady node counts as lost (NOT_READY_GRACE_SECONDS), None if it will not."""
    if node is None or node_loss(node, now) is not None:
        return None
    if node.get("readyStatus") != "False" and NOT_READY not in _taint_keys(node):
        return None
    since = _since(node)
    if since is None:
        return None
    return max(0.0, NOT_READY_GRACE_SECONDS - (now - since).total_seconds())


def disruption(pod: Pod) -> str | None:
    """The reason of the pod's DisruptionTarget condition when True: the cluster, not the program,
    ended it (PreemptionByScheduler, EvictionByEvictionAPI, DeletionByTaintManager, DeletionByPodGC,
    TerminationByKubelet)."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == DISRUPTION_TARGET and condition.get("status") == "True":
            return condition.get("reason") or DISRUPTION_TARGET
    return None


def pod_says_lost(pod: Pod) -> NodeLoss | None:
    """The taint manager is deleting the pod: its node carries a NoExecute taint it does not tolerate
    (unreachable, not-ready: a lost node; or out-of-service)."""
    if disruption(pod) == BY_TAINT_MANAGER:
        return NodeLoss(BY_TAINT_MANAGER, "the taint manager is evicting its pods (DisruptionTarget "
                        f"{BY_TAINT_MANAGER})")
    return None
