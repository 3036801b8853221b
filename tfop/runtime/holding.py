"""Which status changes may wait, and how long, so a starting burst costs two status writes a job.

A change that only reports a starting job's progress (Created, Running, replica
counts, the gang's phase and pending reason) waits until the job's status has
been quiet for a moment, so a burst of pod and PodGroup events becomes one
write. While a gang merely waits its turn (its reason is one of the scheduler's
ordinary steps towards starting, nothing the user can act on), the details
change at every scheduler cycle: those wait much longer. While some of a
starting job's pods are ready and the rest are on their way (created in a
later batch, or bound a scheduling cycle later), its progress waits for them
all, up to PARTLY_READY_HOLD: one write for the start instead of one for the
first pods and one for the rest. (A whole gang's status leaves out its group's
later phases: tfop/core/gang_step.py.) Every other change
(finished, failed, restarting, suspended, restart counts, startTime, a reason
the scheduler gives for not placing the gang) is written at once or within
seconds.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tfop.api import conditions
from tfop.api.conditions import STARTING_GANG_REASONS

# (quiet, maximum delay) in seconds: written once unchanged for `quiet`, or `maximum delay` after
# the first change that was held, whichever comes first.
PROGRESS_HOLD = (1.0, 5.0)
# A gang on its ordinary way (its details change at every scheduler cycle, and a waiting gang is
# looked at every 30 s) is written at most every 3 min: a burst of a thousand gangs takes Volcano
# that long to start, and its actionable reasons are written at once anyway (e2e/BENCHMARK.md).
STARTING_HOLD = (60.0, 180.0)
# No quiet: the rest of the pods come seconds later, when their scheduler or kubelet get to them.
PARTLY_READY_HOLD = (15.0, 15.0)
# startTime is not among them: activeDeadlineSeconds counts from it, and a crash must not reset it.
PROGRESS_FIELDS = {"conditions", "replicaStatuses", "tfReplicaStatuses", "ready", "lastReconcileTime",
                   "observedGeneration", "gang", "message"}
PROGRESS_CONDITIONS = {conditions.CREATED, conditions.RUNNING}


def progress_only(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """True when `new` differs from `old` only by a starting job's progress."""
    if any(old.get(k) != new.get(k) for k in (old.keys() | new.keys()) - PROGRESS_FIELDS):
        return False
    before = {c.get("type"): c.get("status") for c in old.get("conditions") or []}
    after = {c.get("type"): c.get("status") for c in new.get("conditions") or []}
    return all(before.get(t) == after.get(t) for t in (before.keys() | after.keys()) - PROGRESS_CONDITIONS)


def gang_starting(status: Mapping[str, Any]) -> bool:
    """A gang on its way: also while some members run and the rest are still being started (the
    kubelets report them one by one), which is not worth a write per member."""
    return (status.get("gang") or {}).get("reason") in STARTING_GANG_REASONS


def partly_ready(status: Mapping[str, Any]) -> bool:
    """A job on its way up: some pods ready, not all, and none finished yet (a job whose workers
    end one by one is not starting)."""
    ready, _, total = str(status.get("ready") or "").partition("/")
    if not (ready.isdigit() and total.isdigit() and 0 < int(ready) < int(total)):
        return False
    counts = (status.get("replicaStatuses") or {}).values()
    return not any(c.get("succeeded") or c.get("failed") for c in counts if isinstance(c, Mapping))


def hold_limits(written: Mapping[str, Any], new: Mapping[str, Any]) -> tuple[float, float] | None:
    """How long `new` may wait before it replaces the `written` status; None: write it now."""
    if not progress_only(written, new):
        return None
    if gang_starting(new) and gang_starting(written):
        return STARTING_HOLD
    if partly_ready(new):
        return PARTLY_READY_HOLD
    return PROGRESS_HOLD
