"""A job Kueue holds: suspended until its Workload is admitted. Why, in one sentence (status.admission).

Kueue suspends the jobs of a LocalQueue and says in the Workload's QuotaReserved condition what
keeps each out ("couldn't assign flavors to pod set worker: insufficient unused quota for
nvidia.com/gpu in flavor default-flavor, 4 more needed"); tfop says it the way a person asks it
(tfop/core/pending.py) and posts one Warning Event when the cause changes.
"""
from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from tfop.api import conditions
from tfop.api.model import TFJob
from tfop.core import pending, quota
from tfop.core.draft import Draft
from tfop.gang.shape import pod_requests

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def _condition(workload: Mapping[str, Any], ctype: str) -> Mapping[str, Any]:
    for cond in (workload.get("status") or {}).get("conditions") or []:
        if cond.get("type") == ctype:
            return cond
    return {}


def asked(job: TFJob) -> dict[str, Fraction]:
    """What the whole job asks: Kueue admits all of its pods at once."""
    total: dict[str, Fraction] = {}
    for replica in job.replicas:
        for resource, value in pod_requests(replica.template).items():
            total[resource] = total.get(resource, Fraction(0)) + value * replica.replicas
    return total


def explain(job: TFJob, workload: Mapping[str, Any], cluster_queue: str) -> tuple[pending.Waiting, str]:
    """(tfop's sentence, Kueue's words) for a Workload not admitted yet."""
    local = (workload.get("spec") or {}).get("queueName") or job.labels.get(QUEUE_LABEL, "")
    cluster_queue = ((workload.get("status") or {}).get("admission") or {}).get("clusterQueue") or cluster_queue
    reserved = _condition(workload, "QuotaReserved")
    said = reserved.get("message") or _condition(workload, "Admitted").get("message") or ""
    if reserved.get("status") == "True":
        where = f" in ClusterQueue {cluster_queue}" if cluster_queue else ""
        return pending.Waiting(f"Kueue reserved quota for the job{where}; waiting for its admission checks"), said
    if reserved.get("status") != "False" or not said:
        return pending.Waiting(f"waiting for Kueue to admit the job from queue {local}"), said
    return quota.explain_quota(quota.kueue_shortage(local, cluster_queue, said, asked(job))), said


def record_admission(draft: Draft) -> None:
    """status.admission while Kueue holds the job, with one Warning Event per change of its cause;
    removed once the job runs (or was never Kueue's)."""
    view = draft.view
    workload = view.obs.workload
    admitted = workload is not None and _condition(workload, "Admitted").get("status") == "True"
    if not view.job.run_policy.suspend or workload is None or admitted or draft.finished:
        draft.status.pop("admission", None)
        return
    previous = draft.status.get("admission") or {}
    waiting, said = explain(view.job, workload, view.obs.cluster_queue)
    admission: dict[str, Any] = {"queue": (workload.get("spec") or {}).get("queueName") or "",
                                 "message": conditions.capped(waiting.message, conditions.MAX_CONDITION_MESSAGE)}
    if view.obs.cluster_queue:
        admission["clusterQueue"] = view.obs.cluster_queue
    if waiting.cause:
        admission["reason"] = waiting.cause
    if said:
        admission["schedulerMessage"] = conditions.capped(said, conditions.MAX_CONDITION_MESSAGE)
    admission["since"] = previous.get("since") or conditions.timestamp_ceil(view.now)
    if waiting.cause and waiting.cause != previous.get("reason"):
        draft.event("Warning", waiting.cause, admission["message"])
    draft.status["admission"] = admission
