"""Failed and vanished replicas: restart them (one pod, or the whole gang), or fail the job."""
from __future__ import annotations

from typing import Any, Mapping

from tfop.api import pods
from tfop.api.conditions import REASON, RESTARTING, RUNNING
from tfop.api.constants import ANNOTATION_GANG_RESTART
from tfop.core.context import Context
from tfop.core.draft import Draft
from tfop.core.view import SUCCEEDED_INDEXES, JobView
from tfop.gang.base import GangShape

# Exit codes >= 128 are signals (OOM kill 137, SIGTERM 143, Ctrl-C 130): worth a retry.
RETRYABLE_EXIT_CODE = 128
Pod = Mapping[str, Any]


def handle_failures(draft: Draft, ctx: Context, shape: GangShape | None) -> bool:
    """Restart what may be restarted; False when the job failed."""
    view = draft.view
    if view.succeeded:
        return True  # the deciding replica succeeded: later failures of the others do not count
    restartable, fatal = _failed_pods(draft)
    if fatal:
        kinds = sorted({view.replica_of(p).type for p in fatal})
        detail = ", ".join(pods.failure_summary(p) for p in fatal)
        draft.fail(f"TFJob {view.id} has failed because {len(fatal)} {'/'.join(kinds)} replica(s) failed: {detail}.")
        return False
    if not _budget_left(draft, 0):
        return _out_of_budget(draft, "its containers restarted")
    lost = _lost_members(draft) if shape is not None else []
    if not restartable and not lost:
        return True
    whole_gang = shape is not None and ctx.settings.gang_restart and \
        view.job.annotations.get(ANNOTATION_GANG_RESTART, "true").lower() != "false"
    if not _budget_left(draft, 1 if whole_gang else len(restartable)):
        return _out_of_budget(draft, "a replica failed again")
    why = _why(restartable, lost, draft.view)
    _restart(draft, restartable, whole_gang, why)
    return True


def _failed_pods(draft: Draft) -> tuple[list[Pod], list[Pod]]:
    """(restartable, fatal) failed pods, as each replica's restartPolicy says."""
    view = draft.view
    restartable, fatal = [], []
    for pod in view.members:
        replica = view.replica_of(pod)
        if replica is None or pods.phase(pod) != "Failed":
            continue
        code = pods.exit_code(pod)
        if replica.restart_policy in ("Always", "OnFailure") or (
                replica.restart_policy == "ExitCode" and (code is None or code >= RETRYABLE_EXIT_CODE)):
            restartable.append(pod)
        elif view.job.dynamic_worker and replica.type == "Worker" and replica.restart_policy == "Never":
            continue  # elastic workers may come and go; retryable ones restart, ExitCode's others fail the job
        else:
            fatal.append(pod)
    return restartable, fatal


def _restart(draft: Draft, restartable: list[Pod], whole_gang: bool, why: str) -> None:
    view = draft.view
    count = int(draft.status.get("restartCount") or 0)
    if whole_gang:
        draft.delete_pods(lambda pod: True)
        draft.status["restartCount"] = count + 1
        draft.status[SUCCEEDED_INDEXES] = {}  # the gang starts again whole: every member runs again
        message = f"TFJob {view.id} restarts its whole gang because {why}."
        draft.event("Warning", "GangRestart", message)
    else:
        for pod in restartable:
            draft.delete_pod(pods.name(pod))
        draft.status["restartCount"] = count + len(restartable)
        message = f"TFJob {view.id} is restarting because {why}."
        draft.event("Warning", REASON[RESTARTING], message)
    draft.condition(RESTARTING, True, REASON[RESTARTING], message)


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


def _why(restartable: list[Pod], lost: list[str], view: JobView) -> str:
    if lost and not restartable and not any(pods.is_active(p) for p in view.all_pods):
        # A gang preempted whole (disruptionMode all), or all its pods deleted by someone else.
        return f"all {len(lost)} of its members still running disappeared at once (deleted by someone else: " \
               "preemption of the whole gang, an eviction or a user)"
    return ", ".join([pods.failure_summary(p) for p in restartable] + [f"{n} disappeared" for n in lost])


def _lost_members(draft: Draft) -> list[str]:
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
