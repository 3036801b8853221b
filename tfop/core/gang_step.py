"""The gang: its group object, why it waits (status.gang, tfop/core/pending.py), scheduleTimeoutSeconds, nudging
the scheduler."""
from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from tfop.api import conditions, pods
from tfop.api.conditions import (
    GANG_GROUP_REFUSED,
    GANG_NOT_ADMITTED,
    GANG_PENDING,
    GANG_UNSCHEDULABLE,
    STARTING_GANG_REASONS,
)
from tfop.api.constants import ANNOTATION_GANG_RETRY, ANNOTATION_ON_SCHEDULE_TIMEOUT
from tfop.core import pending
from tfop.core.context import Context
from tfop.core.draft import Draft
from tfop.core.plan import Ref
from tfop.gang.base import GangBackend, GangShape, GangState
from tfop.gang.shape import gang_of

NO_GANG = (None, GangState(admitted=True))
# A group the scheduler has seen (given a phase) but not admitted for this long, while the free
# capacity fits the gang, is held back (pending.ADMISSION_HELD); before, it may only await a cycle.
# A group without a phase has not been seen at all (Volcano behind a burst of new groups): no blame.
ADMISSION_GRACE_SECONDS = 10
# A gang's group is touched at most this often for room freed (each touch is a write and a new try).
TOUCH_GAP_SECONDS = 1.0
# A waiting gang's sentence is read from the nodes, queues and PriorityClasses, whose changes send
# this job no event: it is looked at again after as long as it has waited, within these bounds. Room
# freed and new nodes wake it at once anyway; what is left changes slowly, so a look every 30 s at a
# burst of gangs that wait for minutes would mostly be for nothing.
WAITING_RECHECK_SECONDS, WAITING_RECHECK_LONGEST = 30.0, 240.0


def gang_step(draft: Draft, ctx: Context) -> tuple[GangShape | None, GangState] | None:
    """(shape, the scheduler's verdict), or None when the gang itself failed the job."""
    backend, view = ctx.backend, draft.view
    if backend is None:
        return NO_GANG
    problems, shape = gang_of(view.job, view.obs.priority_values)
    if shape is None:  # a problem blocks the gang
        blocking = [p for p in problems if p.blocking]
        draft.fail("the gang cannot be formed: " + "; ".join(str(p) for p in blocking), reason="InvalidGang")
        return None
    warnings = [p for p in problems if not p.blocking]
    if warnings and not conditions.find(list(view.job.status.get("conditions") or []), conditions.CREATED):
        draft.event("Warning", "GangSpecWarning", "; ".join(str(p) for p in warnings))  # once, on the first pass
    _ensure_group(draft, backend, shape)
    # A group this pass creates is read as created (the scheduler has not seen it yet), so that the
    # pass after its create settles on it (tests/core_fixtures.assert_settles): its answer starts none.
    state = backend.state(view.group or draft.plan.create_group, list(view.all_pods))
    if state.spent:
        draft.delete_group(backend.group_plural())  # created anew once gone, before the pods
    if not _record_wait(draft, backend, shape, state):
        return None
    return shape, state


def _ensure_group(draft: Draft, backend: GangBackend, shape: GangShape) -> None:
    desired = backend.group_object(draft.view.job, shape)
    observed = draft.view.group
    if desired is None:
        return
    if observed is None:
        if (desired["kind"], desired["metadata"]["name"]) not in draft.view.foreign:
            draft.plan.create_group = desired
        return
    change = backend.group_changes(observed, desired)
    if change:
        draft.plan.patch.append((Ref.of(observed, backend.group_plural()), change))


def wait_status(draft: Draft, backend: GangBackend, shape: GangShape, state: GangState) -> tuple[dict, bool]:
    """status.gang: the backend and group, and while members are missing the group's phase and why, in
    tfop's words (message, reason: a cause from tfop/core/pending.py when there is one) and in the
    scheduler's (schedulerMessage); and whether the free capacity fits the members still unplaced."""
    view = draft.view
    # succeeded members count, also when deleted since (status.succeededIndexes)
    running = sum(pods.phase(p) == "Running" for p in view.members) + view.succeeded_total()
    gang: dict[str, Any] = {"backend": backend.name, "group": shape.group_name}
    if running >= shape.min_member:
        # The gang is whole: its group's later phases (Scheduling, Running: each scheduler's controller
        # writes them seconds after the pods) explain nothing the conditions do not, and a status
        # write each would cost more than the job's start (with scheduler-plugins: e2e/BENCHMARK.md).
        return gang, False
    if state.phase:
        gang["phase"] = state.phase
    previous = draft.status.get("gang") or {}
    since = previous.get("since") or conditions.timestamp_ceil(view.now)
    waited = view.elapsed_since(since)
    # seconds the scheduler has left the group it knows of unadmitted; None when it has not
    unadmitted_for = waited if view.group is not None and not state.admitted and state.phase else None
    if unadmitted_for is not None and unadmitted_for < ADMISSION_GRACE_SECONDS:
        draft.plan.requeue(ADMISSION_GRACE_SECONDS - unadmitted_for)  # then say whether the scheduler holds it back
    long_unadmitted = unadmitted_for is not None and unadmitted_for >= ADMISSION_GRACE_SECONDS
    waiting = pending.explain_gang(view.job, shape, view.members, backend.name, view.obs.capacity, view.obs.queues,
                                   view.obs.priority_values, long_unadmitted=long_unadmitted,
                                   awaited=_awaited(view, shape) if backend.waits_for_every_member else None)
    # A placed gang only starts: what the scheduler said before it bound the pods is behind it.
    gang["reason"] = GANG_PENDING if waiting.placed else waiting.cause or scheduler_reason(state)
    gang["message"] = conditions.capped(waiting.message, conditions.MAX_CONDITION_MESSAGE)
    said = state.message or f"{running}/{shape.min_member} gang members running"
    if not state.explained and previous.get("phase") == gang.get("phase") and previous.get("schedulerMessage"):
        said = previous["schedulerMessage"]  # the scheduler's reason, not the echo after it
    gang["schedulerMessage"] = conditions.capped(said, conditions.MAX_CONDITION_MESSAGE)
    gang["since"] = since
    return gang, waiting.fits


def _awaited(view, shape: GangShape) -> int:
    """Members the gang lacks that this pass will not create: their names are still held by pods going
    away (the last gang's, after a restart), or their creates were refused (a quota, a webhook: the
    Blocked condition says which). Other absent names are created in this pass."""
    creatable = 0 if view.obs.refusals else sum(1 for name in view.expected_names() if name not in view.pods)
    return max(0, shape.min_member - len(view.members) - creatable)


def only_progress(backend: GangBackend, group: Mapping[str, Any]) -> bool:
    """Whether the group, by itself, says no more than that its gang moves on: admitted, not spent,
    and no reason of the scheduler's (Plan.reads_group_progress)."""
    state = backend.state(group, [])
    return state.admitted and not state.spent and not state.reason


def scheduler_reason(state: GangState) -> str:
    return state.reason or (GANG_PENDING if state.admitted else GANG_NOT_ADMITTED)


def _record_wait(draft: Draft, backend: GangBackend, shape: GangShape, state: GangState) -> bool:
    """Write status.gang, with one Warning Event when its cause changes; enforce scheduleTimeoutSeconds.
    False when the job failed."""
    before = (draft.status.get("gang") or {}).get("reason")
    gang, fits = wait_status(draft, backend, shape, state)
    draft.status["gang"] = gang
    waiting = "reason" in gang
    draft.plan.reads_group_status = waiting
    draft.plan.reads_group_progress = not waiting or gang["reason"] not in STARTING_GANG_REASONS
    waited = draft.view.elapsed_since(gang.get("since"))
    if waiting:
        draft.plan.requeue(recheck_after(waited))
    cause = gang.get("reason") if gang.get("reason") != scheduler_reason(state) else None
    # Not after GroupRefused: a refused group says so itself (GangGroupRefused), every retry.
    if cause in pending.CAUSES and cause != before and before != GANG_GROUP_REFUSED:
        draft.event("Warning", cause, gang["message"])
    if waiting and scheduler_reason(state) == GANG_UNSCHEDULABLE:
        _touch_group(draft, backend, gang["since"], fits, echoed=not state.explained)
    timeout = shape.schedule_timeout_seconds
    if not waiting or not timeout or waited is None:
        return True
    if waited < timeout:
        draft.plan.requeue(timeout - waited)
        return True
    return _timed_out(draft, gang, timeout)


def recheck_after(waited: float | None) -> float:
    return min(WAITING_RECHECK_LONGEST, max(WAITING_RECHECK_SECONDS, waited or 0.0))


def _timed_out(draft: Draft, gang: dict, timeout: int) -> bool:
    view = draft.view
    why = f"the gang was not scheduled within scheduleTimeoutSeconds={timeout}: {gang['message']}"
    if view.job.annotations.get(ANNOTATION_ON_SCHEDULE_TIMEOUT, "Fail").lower() == "requeue":
        draft.delete_pods(lambda pod: not pods.terminating(pod))
        gang["since"] = conditions.timestamp_ceil(view.now)
        draft.event("Warning", "GangRequeued", why + "; its pods are recreated to queue again.")
        draft.plan.requeue(min(timeout, recheck_after(0.0)))  # the wait starts over
        return True
    draft.fail(f"TFJob {view.id} failed: {why}", reason="GangScheduleTimeout")
    draft.delete_pods(pods.is_active)
    return False


def _touch_group(draft: Draft, backend: GangBackend, since: str, fits: bool, echoed: bool) -> None:
    """Annotate the group of an unschedulable gang, for schedulers that look at a rejected gang again
    only when its group changes: when room the gang fits was freed after the last touch (at most every
    TOUCH_GAP_SECONDS); while its pods only echo a sibling's rejection, 1, 2, 4 ... s into the wait
    (Coscheduling overwrites the failing pod's reason with the echo within a millisecond and then
    parks the gang until its group changes: each retry is a new chance to read why); else every
    retry_touch_seconds."""
    group: Mapping[str, Any] | None = draft.view.group
    every = backend.retry_touch_seconds
    if not every or group is None or group["metadata"].get("deletionTimestamp"):
        return
    last = (group["metadata"].get("annotations") or {}).get(ANNOTATION_GANG_RETRY)
    try:
        waited = draft.view.elapsed_since(last or since)
        touched_at, started = conditions.parse_time(last), conditions.parse_time(since)
    except ValueError:  # someone wrote a malformed stamp: touch again
        waited = touched_at = started = None
    capacity = draft.view.obs.capacity
    grew_at = capacity.grew_at if fits and capacity is not None else None
    room_since = grew_at is not None and (touched_at is None or touched_at < grew_at)
    due = min(every, TOUCH_GAP_SECONDS) if room_since else every
    if echoed and not room_since:
        due = min(every, _doubling_gap(touched_at, started))
    if waited is not None and waited < due:
        draft.plan.requeue(due - waited)
        return
    stamp = {"metadata": {"annotations": {ANNOTATION_GANG_RETRY: conditions.timestamp(draft.view.now)}}}
    draft.plan.patch.append((Ref.of(group, backend.group_plural()), stamp))
    now_at = draft.view.now.replace(microsecond=0)
    draft.plan.requeue(min(every, _doubling_gap(now_at, started)) if echoed else every)


def _doubling_gap(touched_at: datetime | None, started: datetime | None) -> float:
    """The wait before the next touch of a gang whose pods only echo: as long as the last touch came
    after the wait began, at least TOUCH_GAP_SECONDS (so touches come 1, 2, 4, 8 ... s into it)."""
    if touched_at is None or started is None:
        return TOUCH_GAP_SECONDS
    return max(TOUCH_GAP_SECONDS, (touched_at - started).total_seconds())
