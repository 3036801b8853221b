"""Failed, disrupted and vanished replicas: restart them (one pod, or the whole gang), or fail the job.

A failure is the program's: it counts against backoffLimit (status.restartCount) and follows each
replica's restartPolicy. A disruption is the cluster's (a DisruptionTarget condition: preemption,
eviction, the taint manager, PodGC, the kubelet under node pressure; or a gang member on a lost
node): it is retried under every restartPolicy and counted apart (status.disruptionCount), as a
batch/v1 Job's podFailurePolicy with action Ignore does, up to --max-disruptions-per-job.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tfop.api import pods
from tfop.api.conditions import REASON, RESTARTING, RUNNING
from tfop.api.constants import ANNOTATION_GANG_GENERATION, ANNOTATION_GANG_RESTART, DEFAULT_CONTAINER
from tfop.api.nodes import disruption
from tfop.core.context import Context
from tfop.core.draft import Draft
from tfop.core.nodes import NODE_LOST, LostPod, active_on_lost_nodes, lost_sentence
from tfop.core.view import SUCCEEDED_INDEXES, JobView
from tfop.gang.base import GangShape

# Exit codes >= 128 are signals (OOM kill 137, SIGTERM 143, Ctrl-C 130): worth a retry.
RETRYABLE_EXIT_CODE = 128
DISRUPTIONS = "disruptionCount"  # status: restarts the cluster caused, never counted against backoffLimit
CONTAINER_RESTARTS = "containerRestarts"  # status: restarts the kubelet made in place in the current pods
DISRUPTED = "Disrupted"  # the Event's and the Restarting condition's reason for a disruption
Pod = Mapping[str, Any]


def gang_generation(status: Mapping[str, Any]) -> int:
    """Which incarnation of the gang is current: every restart, failure or disruption, starts one."""
    return int(status.get("restartCount") or 0) + int(status.get(DISRUPTIONS) or 0)


def handle_failures(draft: Draft, ctx: Context, shape: GangShape | None) -> bool:
    """Restart what may be restarted; False when the job failed."""
    view = draft.view
    if view.succeeded:
        return True  # the deciding replica succeeded: later failures of the others do not count
    _say_in_place_restarts(draft)
    restartable, disrupted, fatal = _failed_pods(draft)
    if fatal:
        kinds = sorted({r.type for r in (view.replica_of(p) for p in fatal) if r is not None})
        detail = ", ".join(failure_text(view, p) for p in fatal)
        draft.fail(f"TFJob {view.id} has failed because {len(fatal)} {'/'.join(kinds)} replica(s) failed: {detail}.")
        return False
    if not _budget_left(draft, 0):
        return _out_of_budget(draft, "its containers restarted")
    whole_gang = shape is not None and ctx.settings.gang_restart and \
        view.job.annotations.get(ANNOTATION_GANG_RESTART, "true").lower() != "false"
    vanished = _vanished_members(draft) if shape is not None else []
    failed_away = [n for n in vanished if n not in view.obs.disrupted]
    disrupted_away = [n for n in vanished if n in view.obs.disrupted]
    on_lost = active_on_lost_nodes(draft) if whole_gang else []
    evicted = _evicted_members(draft) if whole_gang else []
    if whole_gang:
        return _restart_gang(draft, ctx, restartable, failed_away, disrupted + evicted, disrupted_away, on_lost)
    if shape is None:  # without a gang a pod deleted by the cluster is created again; counted here
        disrupted_away = [name for (replica, index), name in zip(view.expected, view.expected_names())
                          if name in view.obs.disrupted and name not in view.pods and not view.is_done(replica, index)]
    return _restart_pods(draft, ctx, restartable, disrupted, disrupted_away, failed_away)


def failure_text(view: JobView, pod: Pod) -> str:
    replica = view.replica_of(pod)
    limit = None
    if replica is not None and pods.oom_killed(pod):
        limit = _memory_limit(replica.template)
    return pods.failure_summary(pod, limit, replica.type if replica is not None else "")


def _memory_limit(template: Mapping[str, Any]) -> str | None:
    containers = (template.get("spec") or {}).get("containers") or []
    chosen = next((c for c in containers if c.get("name") == DEFAULT_CONTAINER), containers[0] if containers else {})
    limit = ((chosen.get("resources") or {}).get("limits") or {}).get("memory")
    return str(limit) if limit is not None else None


def _failed_pods(draft: Draft) -> tuple[list[Pod], list[Pod], list[Pod]]:
    """(restartable, disrupted, fatal) failed pods: the cluster's disruptions apart, the rest as each
    replica's restartPolicy says."""
    view = draft.view
    restartable, disrupted, fatal = [], [], []
    for pod in view.members:
        replica = view.replica_of(pod)
        if replica is None or pods.phase(pod) != "Failed":
            continue
        code = pods.exit_code(pod)
        if disruption(pod):
            disrupted.append(pod)
        elif replica.restart_policy in ("Always", "OnFailure") or (
                replica.restart_policy == "ExitCode" and (code is None or code >= RETRYABLE_EXIT_CODE)):
            restartable.append(pod)
        elif view.job.dynamic_worker and replica.type == "Worker" and replica.restart_policy == "Never":
            continue  # elastic workers may come and go; retryable ones restart, ExitCode's others fail the job
        else:
            fatal.append(pod)
    return restartable, disrupted, fatal


def _restart_gang(draft: Draft, ctx: Context, restartable: list[Pod], failed_away: list[str],
                  disrupted: list[Pod], disrupted_away: list[str], on_lost: list[LostPod]) -> bool:
    """One restart of the whole gang for everything that broke it: a failure if any member failed,
    else a disruption."""
    view = draft.view
    if not (restartable or failed_away or disrupted or disrupted_away or on_lost):
        return True
    if restartable or failed_away:
        if not _budget_left(draft, 1):
            return _out_of_budget(draft, "a replica failed again")
        why = _why(restartable, failed_away + disrupted_away, view, disrupted)
        draft.status["restartCount"] = int(draft.status.get("restartCount") or 0) + 1
        message = f"TFJob {view.id} restarts its whole gang because {why}."
        reason, event = REASON[RESTARTING], "GangRestart"
    else:
        if not _disruptions_left(draft, ctx, 1):
            return _out_of_disruptions(draft, ctx)
        count = _count_disruption(draft, 1)
        tail = (f"; disruption {count} of at most {ctx.settings.max_disruptions_per_job}, not counted against "
                "backoffLimit")
        if on_lost:
            message = (f"{lost_sentence(view, on_lost)}: its whole gang restarts, and the other members are deleted "
                       f"so their resources return to the pool{tail}.")
            reason = event = NODE_LOST
        else:
            message = (f"TFJob {view.id} restarts its whole gang because of a disruption: "
                       f"{_disrupted_text(disrupted, disrupted_away, view.obs.disrupted)}{tail}.")
            reason, event = DISRUPTED, "GangRestart"
    draft.delete_pods(lambda pod: True)
    draft.status[SUCCEEDED_INDEXES] = {}  # the gang starts again whole: every member runs again
    draft.event("Warning", event, message)
    draft.condition(RESTARTING, True, reason, message)
    return True


def _restart_pods(draft: Draft, ctx: Context, restartable: list[Pod], disrupted: list[Pod],
                  disrupted_away: list[str], failed_away: list[str]) -> bool:
    """Each failed or disrupted pod on its own (no gang, or gang restarts turned off); a pod gone is
    created again by the pass (replicas.py), said here."""
    view = draft.view
    if restartable:
        if not _budget_left(draft, len(restartable)):
            return _out_of_budget(draft, "a replica failed again")
        draft.status["restartCount"] = int(draft.status.get("restartCount") or 0) + len(restartable)
    wanted = len(disrupted) + len(disrupted_away)
    if wanted and not _disruptions_left(draft, ctx, wanted):
        return _out_of_disruptions(draft, ctx)
    for pod in restartable + disrupted:
        draft.delete_pod(pods.name(pod))
    if restartable or failed_away:
        message = f"TFJob {view.id} is restarting because {_why(restartable, failed_away, view)}."
        draft.event("Warning", REASON[RESTARTING], message)
        draft.condition(RESTARTING, True, REASON[RESTARTING], message)
    if wanted:
        count = _count_disruption(draft, wanted)
        which = _disrupted_text(disrupted, disrupted_away, view.obs.disrupted)
        message = (f"TFJob {view.id} restarts {which}: disruption {count} of at "
                   f"most {ctx.settings.max_disruptions_per_job}, not counted against backoffLimit.")
        draft.event("Warning", DISRUPTED, message)
        if not (restartable or failed_away):
            draft.condition(RESTARTING, True, DISRUPTED, message)
    return True


def _disrupted_text(disrupted: list[Pod], away: list[str], reasons: Mapping[str, str]) -> str:
    said = [f"{pods.name(p)} (ended by the cluster: DisruptionTarget {disruption(p)})" for p in disrupted]
    said += [f"{name} (deleted by the cluster: DisruptionTarget {reasons.get(name)})" for name in away]
    return ", ".join(said)


def _evicted_members(draft: Draft) -> list[Pod]:
    """Members of the current gang being deleted by the cluster (a DisruptionTarget, not tfop's delete):
    the gang cannot progress, so it restarts now rather than when the pod is gone."""
    view = draft.view
    current = str(gang_generation(draft.status))
    return [p for p in view.all_pods if pods.terminating(p) and disruption(p) and pods.phase(p) not in (
        "Succeeded", "Failed") and (p["metadata"].get("annotations") or {}).get(ANNOTATION_GANG_GENERATION) == current]


def _say_in_place_restarts(draft: Draft) -> None:
    """Restarts the kubelet made inside pods (OnFailure, Always): neither the pod nor the gang restarts
    (a PS job's workers rejoin), but people are told, and they count against backoffLimit."""
    view = draft.view
    seen, now = int(draft.status.get(CONTAINER_RESTARTS) or 0), view.kubelet_restarts
    if now == seen:
        return
    if now:
        draft.status[CONTAINER_RESTARTS] = now
    else:
        draft.status.pop(CONTAINER_RESTARTS, None)
    if now < seen:
        return  # pods made anew since: their restarts start at 0
    limit = view.job.run_policy.backoff_limit
    used = int(draft.status.get("restartCount") or 0) + now
    budget = f"{used} of backoffLimit={limit} used" if limit is not None else "no backoffLimit"
    draft.event("Warning", "ContainerRestarted",
                f"TFJob {view.id}: the kubelet restarted {now - seen} container(s) in place (restartPolicy "
                f"OnFailure or Always): the pods and the gang keep running; {budget}.")


def _budget_left(draft: Draft, wanted: int) -> bool:
    limit = draft.view.job.run_policy.backoff_limit
    if limit is None:
        return True
    used = int(draft.status.get("restartCount") or 0) + draft.view.kubelet_restarts
    return used + wanted <= limit


def _out_of_budget(draft: Draft, what: str) -> bool:
    limit = draft.view.job.run_policy.backoff_limit
    draft.fail(f"TFJob {draft.view.id} has failed because {what} after reaching backoffLimit={limit}.",
               reason="BackoffLimitExceeded")
    draft.delete_pods(pods.is_active)
    return False


def _count_disruption(draft: Draft, n: int) -> int:
    count = int(draft.status.get(DISRUPTIONS) or 0) + n
    draft.status[DISRUPTIONS] = count
    return count


def _disruptions_left(draft: Draft, ctx: Context, wanted: int) -> bool:
    return int(draft.status.get(DISRUPTIONS) or 0) + wanted <= ctx.settings.max_disruptions_per_job


def _out_of_disruptions(draft: Draft, ctx: Context) -> bool:
    view = draft.view
    limit = ctx.settings.max_disruptions_per_job
    draft.fail(f"TFJob {view.id} has failed because it was disrupted more than {limit} times (preempted, "
               f"evicted or on lost nodes; tfop run --max-disruptions-per-job={limit}): find what keeps ending "
               "its pods, or raise the limit.", reason="DisruptionLimitExceeded")
    draft.delete_pods(pods.is_active)
    return False


def _why(restartable: list[Pod], lost: list[str], view: JobView, disrupted: list[Pod] | None = None) -> str:
    if lost and not restartable and not any(pods.is_active(p) for p in view.all_pods):
        # A gang preempted whole (disruptionMode all), or all its pods deleted by someone else.
        return f"all {len(lost)} of its members still running disappeared at once (deleted by someone else: " \
               "preemption of the whole gang, an eviction or a user)"
    return ", ".join([failure_text(view, p) for p in restartable] + [f"{n} disappeared" for n in lost]
                     + [f"{pods.name(p)} was disrupted ({disruption(p)})" for p in disrupted or ()])


def _vanished_members(draft: Draft) -> list[str]:
    """Pods of a running gang deleted by someone else (a user, an eviction, a lost node, preemption
    of one member or of the whole gang).

    Only pods seen vanishing count: a pod that was never created (quota, a
    create error) must not restart the whole gang again and again. A pod that
    succeeded before it was deleted finished its part: not lost.
    """
    view = draft.view
    if not draft.is_true(RUNNING):
        return []
    return [name for (replica, index), name in zip(view.expected, view.expected_names())
            if name not in view.pods and name in view.obs.vanished and not view.is_done(replica, index)]
