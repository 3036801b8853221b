"""A job's life: created, invalid, suspended and resumed, past its deadline, succeeded, finished."""
from __future__ import annotations

from collections.abc import Sequence

from tfop.api import conditions, pods
from tfop.api.conditions import CREATED, REASON, RUNNING, SUCCEEDED, SUSPENDED
from tfop.api.rules import MAX_JOB_REPLICAS
from tfop.api.validation import Problem
from tfop.core.context import Context
from tfop.core.draft import Draft
from tfop.core.settings import Settings


def begin(draft: Draft, problems: Sequence[Problem], notes: Sequence[str]) -> None:
    """The Created condition, what tfop interpreted for the user, and a spec that cannot run."""
    view = draft.view
    if not conditions.find(draft.conditions, CREATED):
        draft.condition(CREATED, True, REASON[CREATED], f"TFJob {view.id} is created.")
        if notes:  # one Event for all of them: Events cost API writes too
            draft.event("Normal", "SpecInterpreted", "; ".join(notes))
    blocking = [p for p in problems if p.blocking]
    if blocking and not draft.finished:
        draft.fail("invalid spec: " + "; ".join(str(p) for p in blocking), reason="InvalidSpec")


def fail_if_too_many_pods(draft: Draft, settings: Settings) -> None:
    """A job asking for more pods than this operator runs per job fails before anything is built:
    one such job must not hold the operator (its memory, its event loop) from every other job."""
    view = draft.view
    limit, asked = settings.max_pods_per_job, view.job.total_replicas
    if asked <= limit or draft.finished:
        return
    draft.fail(f"TFJob {view.id} asks for {asked} pods, more than the {limit} this operator runs per job "
               f"(--max-pods-per-job={limit}): lower its replicas or split it into smaller jobs, or raise the "
               f"operator's `tfop run --max-pods-per-job` (at most {MAX_JOB_REPLICAS})", reason="TooManyPods")


def finish(draft: Draft, ctx: Context) -> None:
    """A finished job: release the gang, clean pods as cleanPodPolicy says, delete it after its TTL."""
    view = draft.view
    if ctx.backend is not None and ctx.backend.group_resource is not None:
        draft.delete_group(ctx.backend.group_resource.plural)
    policy = view.job.run_policy.clean_pod_policy
    if policy == "All":
        draft.delete_pods(lambda pod: True, with_services=True)
    elif policy == "Running":
        draft.delete_pods(pods.is_active, with_services=True)
    draft.status.pop("gang", None)
    ttl = view.job.run_policy.ttl_seconds_after_finished
    done = view.elapsed_since(draft.status.get("completionTime"))
    if ttl is not None and done is not None:
        if done >= ttl:
            draft.plan.delete_job = True
        else:
            draft.plan.requeue(ttl - done)


def suspend(draft: Draft, ctx: Context) -> None:
    view = draft.view
    draft.delete_pods(lambda pod: True, with_services=True)
    if ctx.backend is not None and ctx.backend.group_resource is not None:
        draft.delete_group(ctx.backend.group_resource.plural)
    if not draft.is_true(SUSPENDED):
        draft.condition(RUNNING, False, REASON[SUSPENDED], f"TFJob {view.id} is suspended.")
        draft.condition(SUSPENDED, True, REASON[SUSPENDED], f"TFJob {view.id} is suspended.")
        draft.event("Normal", REASON[SUSPENDED], f"TFJob {view.id} is suspended; its pods are deleted.")
    draft.status.pop("gang", None)


def start(draft: Draft) -> None:
    """An active job: resumed if it was suspended; its startTime set once."""
    view = draft.view
    stamp = conditions.timestamp(view.now)
    if draft.is_true(SUSPENDED):
        draft.condition(SUSPENDED, False, conditions.RESUMED, f"TFJob {view.id} is resumed.")
        draft.status["startTime"] = stamp
        draft.event("Normal", conditions.RESUMED, f"TFJob {view.id} is resumed.")
    draft.status.setdefault("startTime", stamp)


def past_deadline(draft: Draft) -> bool:
    """activeDeadlineSeconds: True when it has passed (the job failed and its pods stop)."""
    view = draft.view
    deadline = view.job.run_policy.active_deadline_seconds
    ran = view.elapsed_since(draft.status.get("startTime"))
    if deadline is None or ran is None:
        return False
    if ran < deadline:
        draft.plan.requeue(deadline - ran)
        return False
    draft.fail(f"TFJob {view.id} has run longer than activeDeadlineSeconds={deadline}; its pods are stopped.",
               reason="DeadlineExceeded")
    draft.delete_pods(pods.is_active)  # released whatever cleanPodPolicy says: they hold GPUs
    return True


def record_progress(draft: Draft) -> bool:
    """Running, or Succeeded as the chief (else the workers) tell; True when the job just finished."""
    view = draft.view
    if view.succeeded:
        message = f"TFJob {view.id} successfully completed."
        draft.condition(SUCCEEDED, True, REASON[SUCCEEDED], message)
        draft.status.setdefault("completionTime", conditions.timestamp(view.now))
        draft.event("Normal", REASON[SUCCEEDED], message)
        return True
    if view.running and not draft.deleting:
        draft.condition(RUNNING, True, REASON[RUNNING], f"TFJob {view.id} is running.")
    return False
