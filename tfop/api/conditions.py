"""Job conditions as upstream clients (Training SDK, dashboards) read them."""
from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

CREATED, RUNNING, RESTARTING, SUCCEEDED, FAILED, SUSPENDED = (
    "Created", "Running", "Restarting", "Succeeded", "Failed", "Suspended",
)
REASON = {
    CREATED: "TFJobCreated",
    RUNNING: "TFJobRunning",
    RESTARTING: "TFJobRestarting",
    SUCCEEDED: "TFJobSucceeded",
    FAILED: "TFJobFailed",
    SUSPENDED: "TFJobSuspended",
}
RESUMED = "TFJobResumed"
# tfop's own condition: True while something outside the job keeps it from creating its pods (a
# name held by another object, a ResourceQuota, an admission webhook, a terminating namespace,
# missing RBAC). Removed once that clears, so `kubectl get tfjob` never shows a stale Blocked.
BLOCKED = "Blocked"
# Longest condition and Event messages tfop writes: a status must always fit in one object, and
# people read these (a cut message says how much was left out).
MAX_CONDITION_MESSAGE = 2048
MAX_EVENT_MESSAGE = 1024


def capped(message: str, limit: int) -> str:
    if len(message) <= limit:
        return message
    note = f" ... ({len(message) - limit} more characters)"
    return message[:limit - len(note)] + note


def timestamp(now: datetime) -> str:
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def timestamp_ceil(now: datetime) -> str:
    """A whole-second stamp never earlier than `now`, for clocks a timeout is measured
    from: a floored stamp would make the timeout fire up to a second early."""
    whole = now.replace(microsecond=0)
    return timestamp(whole if whole == now else whole + timedelta(seconds=1))


_STAMP = re.compile(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)Z")


def parse_time(value: str | None) -> datetime | None:
    """A stamp as the apiserver writes them (2006-01-02T15:04:05Z); ValueError for anything else.
    Not strptime: a pass reads several per job, and strptime costs ~10x more."""
    if not value:
        return None
    match = _STAMP.fullmatch(value)
    if match is None:
        raise ValueError(f"{value!r} is not a time like 2006-01-02T15:04:05Z")
    year, month, day, hour, minute, second = map(int, match.groups())
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)  # ValueError for a 13th month


def find(conditions: list[dict], ctype: str) -> dict | None:
    for condition in conditions:
        if condition.get("type") == ctype:
            return condition
    return None


def is_true(conditions: list[dict], ctype: str) -> bool:
    condition = find(conditions, ctype)
    return condition is not None and condition.get("status") == "True"


def is_finished(conditions: list[dict]) -> bool:
    return is_true(conditions, SUCCEEDED) or is_true(conditions, FAILED)


def set_condition(conditions: list[dict], ctype: str, status: bool, reason: str, message: str,
                  now: datetime) -> list[dict]:
    """A new list with the condition set; unchanged (same object values) when nothing differs.

    Running and Restarting replace each other; a finished job's Running and Restarting turn False.
    The newest condition goes last, since `kubectl get` prints the last one.
    """
    value = "True" if status else "False"
    old = find(conditions, ctype)
    if old and old.get("status") == value and old.get("reason") == reason and old.get("message") == message:
        return conditions
    stamp = timestamp(now)
    new: dict[str, Any] = {
        "type": ctype, "status": value, "reason": reason, "message": message,
        "lastUpdateTime": stamp,
        "lastTransitionTime": old["lastTransitionTime"] if old and old.get("status") == value else stamp,
    }
    drop = {ctype}
    if status and ctype == RUNNING:
        drop.add(RESTARTING)
    if status and ctype == RESTARTING:
        drop.add(RUNNING)
    result = [c for c in conditions if c.get("type") not in drop]
    if status and ctype in (SUCCEEDED, FAILED):
        # A finished job is neither running nor restarting (the SDK's is_job_restarting reads the latter).
        ongoing = [find(result, t) for t in (RUNNING, RESTARTING)]
        ongoing = [c for c in ongoing if c and c.get("status") == "True"]
        result = [dict(c, status="False", lastUpdateTime=stamp, lastTransitionTime=stamp)
                  if any(c is o for o in ongoing) else c for c in result]
    result.append(new)
    return result

# status.gang.reason values tfop itself writes (backends add their scheduler's own, e.g. Unschedulable).
GANG_NOT_ADMITTED = "NotAdmitted"  # the scheduler has not admitted the group yet
GANG_PENDING = "Pending"  # admitted, members not all running yet
GANG_GROUP_PENDING = "PodGroupPending"  # Volcano: the PodGroup waits in its queue
GANG_UNSCHEDULABLE = "Unschedulable"  # the scheduler says why it cannot place the gang
GANG_GROUP_REFUSED = "GroupRefused"  # the apiserver refused the group object
# tfop's own causes of a wait (tfop/core/pending.py, admission.py), each the reason of one Warning Event
# when it becomes the gang's (or a Kueue-held job's) reason: things the user or an admin can act on.
INSUFFICIENT_RESOURCES = "InsufficientResources"  # less is free in the whole cluster than the gang needs
NO_NODE_FITS_POD = "NoNodeFitsPod"  # enough in total, but not on few enough nodes
QUEUE_CLOSED = "QueueClosed"
QUEUE_NOT_FOUND = "QueueNotFound"
PRIORITY_CLASS_NOT_FOUND = "PriorityClassNotFound"
QUEUE_QUOTA_EXCEEDED = "QueueQuotaExceeded"  # Kueue: the job's ClusterQueue has too little quota left
# The free capacity fits, yet the scheduler has long not admitted the group: Volcano keeps room for
# gangs it admitted earlier that have not started (their PodGroups Inqueue).
ADMISSION_HELD = "AdmissionHeld"
WAIT_CAUSES = frozenset({INSUFFICIENT_RESOURCES, NO_NODE_FITS_POD, QUEUE_CLOSED, QUEUE_NOT_FOUND,
                         PRIORITY_CLASS_NOT_FOUND, QUEUE_QUOTA_EXCEEDED, ADMISSION_HELD})
# A gang on its ordinary way to start: nothing the user can act on (see tfop/runtime/holding.py).
STARTING_GANG_REASONS = frozenset({GANG_NOT_ADMITTED, GANG_GROUP_PENDING, GANG_PENDING})
