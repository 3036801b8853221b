"""The job's status as upstream clients read it, and whether it changed in this pass."""
from __future__ import annotations

from tfop.api import conditions
from tfop.api.model import pod_name
from tfop.children.labels import replica_selector
from tfop.core.draft import Draft
from tfop.core.indexes import format_indexes
from tfop.core.pending import with_headline
from tfop.core.summary import summary_event
from tfop.core.view import SUCCEEDED_INDEXES, JobView

COUNTERS = ("active", "succeeded", "failed")
LEGACY_STATUSES = "tfReplicaStatuses"
UNCOMPARED = "lastReconcileTime"  # changes every pass; a write for it alone would be a wasted write


def finalize(draft: Draft) -> None:
    """Replica statuses and readiness, the summary Event; plan.status only when the status changed."""
    view = draft.view
    replica_statuses = {}
    for replica in view.job.replicas:
        selector = replica_selector(view.job.name, replica)
        replica_statuses[replica.type] = {
            **_counters(draft, replica.type),
            "labelSelector": {"matchLabels": selector},
            "selector": ",".join(f"{k}={v}" for k, v in sorted(selector.items())),
        }
    status = draft.status
    status["conditions"] = draft.conditions
    status["replicaStatuses"] = replica_statuses
    status[LEGACY_STATUSES] = _legacy_statuses(view, replica_statuses)
    status["ready"] = f"{view.ready()}/{view.job.total_replicas}"
    with_headline(status)
    _remember_succeeded(draft)
    if view.job.generation:
        status["observedGeneration"] = view.job.generation
    summary = summary_event(draft.plan)
    if summary is not None:
        draft.plan.events.insert(0, summary)
    if _without(status) != _without(view.job.status):
        status["lastReconcileTime"] = conditions.timestamp(view.now)
        draft.plan.status = status


def _remember_succeeded(draft: Draft) -> None:
    """status.succeededIndexes: what a succeeded pod deleted later leaves of it. Forgotten when the
    whole gang restarts (failures.py sets it empty) and while the job is suspended: then every
    replica runs again; so is a succeeded pod this pass deletes itself (a gang requeued after its
    scheduleTimeoutSeconds), which is to run again."""
    view = draft.view
    status = draft.status
    if conditions.is_finished(list(view.job.status.get("conditions") or [])):
        return  # kept as the job finished (an operator restart writes nothing to finished jobs)
    texts = {}
    if status.get(SUCCEEDED_INDEXES) != {} and not view.job.run_policy.suspend:
        for replica in view.job.replicas:
            kept = {i for i in view.done[replica.type]
                    if draft.finished or pod_name(view.job.name, replica.type, i) not in draft.deleting}
            if kept:
                texts[replica.type] = format_indexes(kept)
    if texts:
        status[SUCCEEDED_INDEXES] = texts
    else:
        status.pop(SUCCEEDED_INDEXES, None)


def _counters(draft: Draft, rtype: str) -> dict[str, int]:
    """Counted from the pods while the job runs. A finished job's stay as they were when it finished
    (cleanPodPolicy may delete its pods since), and on success the replicas still active count as
    succeeded: what upstream reports, and what the Training SDK and dashboards read."""
    view = draft.view
    recorded = (view.job.status.get("replicaStatuses") or {}).get(rtype)
    if recorded is not None and conditions.is_finished(list(view.job.status.get("conditions") or [])):
        return {k: int(recorded.get(k) or 0) for k in COUNTERS}
    counts = dict(view.counts[rtype])
    if draft.is_true(conditions.SUCCEEDED):
        counts["succeeded"], counts["active"] = counts["succeeded"] + counts["active"], 0
    return counts


def _legacy_statuses(view: JobView, replica_statuses: dict) -> dict:
    """v1alpha2's name for replicaStatuses, with the three counters its clients read: the selectors
    repeated there would add a third to the stored job and to each of its watch events. A recorded copy
    holding the selectors too (an older tfop's) stays while its counters are right: an upgrade alone
    writes no job."""
    fresh = {rtype: {k: counts[k] for k in COUNTERS} for rtype, counts in replica_statuses.items()}
    recorded = view.job.status.get(LEGACY_STATUSES) or {}
    recorded_counts = {rtype: {k: (kept or {}).get(k) for k in COUNTERS} for rtype, kept in recorded.items()}
    return recorded if recorded_counts == fresh else fresh


def _without(status) -> dict:
    return {k: v for k, v in status.items() if k != UNCOMPARED}
