"""The job's status as upstream clients read it, and whether it changed in this pass."""
from __future__ import annotations

from tfop.api import conditions
from tfop.children.labels import replica_selector
from tfop.core.draft import Draft
from tfop.core.summary import summary_event

UNCOMPARED = "lastReconcileTime"  # changes every pass; a write for it alone would be a wasted write


def finalize(draft: Draft) -> None:
    """Replica statuses and readiness, the summary Event; plan.status only when the status changed."""
    view = draft.view
    replica_statuses = {}
    for replica in view.job.replicas:
        selector = replica_selector(view.job.name, replica)
        replica_statuses[replica.type] = {
            **view.counts[replica.type],
            "labelSelector": {"matchLabels": selector},
            "selector": ",".join(f"{k}={v}" for k, v in sorted(selector.items())),
        }
    status = draft.status
    status["conditions"] = draft.conditions
    status["replicaStatuses"] = replica_statuses
    status["tfReplicaStatuses"] = replica_statuses
    status["ready"] = f"{view.ready()}/{view.job.total_replicas}"
    if view.job.generation:
        status["observedGeneration"] = view.job.generation
    summary = summary_event(draft.plan)
    if summary is not None:
        draft.plan.events.insert(0, summary)
    if _without(status) != _without(view.job.status):
        status["lastReconcileTime"] = conditions.timestamp(view.now)
        draft.plan.status = status


def _without(status) -> dict:
    return {k: v for k, v in status.items() if k != UNCOMPARED}
