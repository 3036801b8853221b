"""A job's pods on lost nodes: which they are, what the job waits for, and what ends the wait.

Pods keep their names across restarts (TF_CONFIG names them), so a pod stuck Terminating on a dead
node, whose deletion no kubelet is left to confirm, holds its replacement back. tfop never removes
such a pod on its own by default: where the node is only cut off, its containers may still run, and
a second copy of the same TF task would start beside them. Kubernetes releases it once an admin
says the node is down (the out-of-service taint, or deleting the node); until then the job says
what it waits for and the command that ends the wait. `--force-delete-lost-pods-after` opts in to
tfop ending it after a stated time.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from tfop.api import conditions, pods
from tfop.api.nodes import OUT_OF_SERVICE, NodeLoss, node_loss, not_ready_ends, pod_says_lost
from tfop.core.context import Context
from tfop.core.plan import POD, Ref

if TYPE_CHECKING:
    from tfop.core.draft import Draft

NODE_LOSS = "nodeLoss"  # status: while any pod of the job is on a lost node
NODE_LOST = "NodeLost"  # the Event's and the Restarting condition's reason
MAX_NAMED = 10  # pods named in status.nodeLoss.pods and in a sentence
Pod = Mapping[str, Any]


@dataclass(frozen=True)
class LostPod:
    pod: Pod
    node: str
    loss: NodeLoss

    @property
    def name(self) -> str:
        return pods.name(self.pod)


def lost_pods(all_pods: Iterable[Pod], nodes: Mapping[str, Mapping[str, Any] | None] | None,
              now) -> tuple[LostPod, ...]:
    """The job's unfinished pods whose node Kubernetes says is gone (tfop/api/nodes.py)."""
    out = []
    for pod in all_pods:
        if pods.phase(pod) in ("Succeeded", "Failed"):
            continue  # finished: its deletion completes without a kubelet
        node = pods.node_name(pod)
        loss = pod_says_lost(pod)
        if loss is None and node and nodes is not None and node in nodes:
            loss = node_loss(nodes[node], now)
        if loss is not None:
            out.append(LostPod(pod, node, loss))
    return tuple(out)


def active_on_lost_nodes(draft: Draft) -> list[LostPod]:
    """Members still running (or starting) on a lost node: not deleted by anyone yet."""
    return [lp for lp in draft.view.lost if not pods.terminating(lp.pod) and lp.name not in draft.deleting]


def lost_sentence(view, lost: list[LostPod]) -> str:
    """ "lost job-worker-1 on node n1 (why)" for the first node, and how many more."""
    first = lost[0]
    here = [lp.name for lp in lost if lp.node == first.node]
    others = len(lost) - len(here)
    more = f", and {others} more pod(s) on other lost nodes" if others else ""
    return f"TFJob {view.id} lost {_names(here)} on node {first.node or '(unknown)'} ({first.loss.why}){more}"


def say_node_loss(draft: Draft, ctx: Context) -> None:
    """status.nodeLoss and, once per new lost node, a Warning Event; the force-delete opt-in; a pass
    again when a NotReady node's grace ends."""
    view = draft.view
    _look_again_when_not_ready_counts(draft)
    lost = list(view.lost)
    if not lost or draft.finished:
        draft.status.pop(NODE_LOSS, None)
        return
    stuck = [lp for lp in lost if pods.terminating(lp.pod) or lp.name in draft.deleting]
    message = _waiting(draft, ctx, stuck) if stuck else _left_to_kubernetes(view, lost)
    nodes = sorted({lp.node for lp in lost})
    before = view.job.status.get(NODE_LOSS) or {}
    since = before.get("since") if before.get("nodes") == nodes else None
    draft.status[NODE_LOSS] = {
        "node": lost[0].node, "nodes": nodes[:MAX_NAMED], "pods": sorted(lp.name for lp in lost)[:MAX_NAMED],
        "reason": lost[0].loss.reason, "message": conditions.capped(message, conditions.MAX_CONDITION_MESSAGE),
        "since": since or conditions.timestamp(view.now)}
    if set(nodes) - set(before.get("nodes") or ()) and not any(e.reason == NODE_LOST for e in draft.plan.events):
        draft.event("Warning", NODE_LOST, message)
    _force_delete(draft, ctx, stuck)


def _left_to_kubernetes(view, lost: list[LostPod]) -> str:
    """Gang off (or gang restarts off): the pod runs on until Kubernetes evicts it."""
    return (f"{lost_sentence(view, lost)}: Kubernetes evicts it after its tolerationSeconds for the node's "
            f"NoExecute taint (300 s by default), and tfop then creates it again.")


def _waiting(draft: Draft, ctx: Context, stuck: list[LostPod]) -> str:
    view = draft.view
    first = stuck[0]
    node, names = first.node, [lp.name for lp in stuck if lp.node == first.node]
    which = f"pod {names[0]}" if len(names) == 1 else f"pods {_names(names)}"
    head = (f"TFJob {view.id} waits for {which} on lost node {node} ({first.loss.why}) to be released: its "
            f"deletion cannot complete while no kubelet runs there, and its replacement takes the same name.")
    force = (f" If you know {node} is down, `kubectl delete pod -n {view.job.namespace} {' '.join(names)} "
             f"--force --grace-period=0` ends the wait now.")
    if first.loss.reason == "NodeDeleted":
        release = " The node is deleted: Kubernetes' pod garbage collector releases it within a minute."
    elif first.loss.out_of_service:
        release = f" {node} is tainted {OUT_OF_SERVICE}: Kubernetes' pod garbage collector releases it within a minute."
    else:
        release = (f" Once {node} is shut down, run `kubectl taint nodes {node} {OUT_OF_SERVICE}=nodeshutdown:"
                   f"NoExecute` (or `kubectl delete node {node}`) and Kubernetes releases it.")
    after = ctx.settings.force_delete_lost_pods_after
    opt_in = ""
    if after > 0:
        at = min(_stuck_since(draft, lp) for lp in stuck if lp.node == node) + timedelta(seconds=after)
        opt_in = (f" tfop force-deletes it at {conditions.timestamp(at)} "
                  f"(--force-delete-lost-pods-after={after:g}).")
    others = len(stuck) - len(names)
    more = f" {others} more pod(s) wait on other lost nodes." if others else ""
    return head + release + force + opt_in + more


def _stuck_since(draft: Draft, lp: LostPod):
    """From when a stuck pod's wait is measured: the later of its deletion and its node's loss."""
    view = draft.view
    deleted = conditions.parse_time(lp.pod["metadata"].get("deletionTimestamp")) or view.now
    return max(deleted, lp.loss.since or deleted)


def _force_delete(draft: Draft, ctx: Context, stuck: list[LostPod]) -> None:
    after = ctx.settings.force_delete_lost_pods_after
    if after <= 0:
        return
    view = draft.view
    for lp in stuck:
        waited = (view.now - _stuck_since(draft, lp)).total_seconds()
        if waited < after:
            draft.plan.requeue(after - waited)
            continue
        draft.plan.force_delete.append(Ref(*POD, view.job.namespace, lp.name))
        draft.event("Warning", "ForceDeleted",
                    f"TFJob {view.id} force-deleted pod {lp.name}, stuck terminating for {waited:.0f} s on lost node "
                    f"{lp.node} ({lp.loss.why}) (--force-delete-lost-pods-after={after:g}): if {lp.node} is only cut "
                    f"off, its containers may still run beside the new pod.")


def _look_again_when_not_ready_counts(draft: Draft) -> None:
    view = draft.view
    nodes = view.obs.nodes
    if not nodes:
        return
    for pod in view.all_pods:
        node = pods.node_name(pod)
        if node and node in nodes:
            ends = not_ready_ends(nodes[node], view.now)
            if ends is not None:
                draft.plan.requeue(ends + 0.5)


def _names(names: list[str]) -> str:
    shown = ", ".join(names[:MAX_NAMED])
    return shown + (f" and {len(names) - MAX_NAMED} more" if len(names) > MAX_NAMED else "")
