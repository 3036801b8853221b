"""What a pass changed in a job's life, for the metrics: read from the status before and after it.

Counted on transitions, not on events, so an operator restart (which reads every job again)
counts nothing twice, and a pass that writes nothing new counts nothing.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tfop.api import conditions
from tfop.api.conditions import CREATED, FAILED, SUCCEEDED


@dataclass(frozen=True)
class Transitions:
    created: bool = False
    succeeded: bool = False
    failed: bool = False
    restarts: int = 0  # members (or whole gangs) restarted in this pass
    # the same by cause: failure, disruption, node_lost; and in_place, containers the kubelet restarted
    restarts_by_reason: Mapping[str, int] = field(default_factory=dict)
    gang_waited: float | None = None  # seconds a gang waited, when all its members just started


def _became_true(old: Mapping[str, Any], new: Mapping[str, Any], ctype: str) -> bool:
    return (conditions.is_true(list(new.get("conditions") or []), ctype)
            and not conditions.is_true(list(old.get("conditions") or []), ctype))


def _parse(stamp: Any) -> datetime | None:
    if not isinstance(stamp, str):
        return None
    try:
        return datetime.fromisoformat(stamp)  # reads a trailing Z as UTC since Python 3.11
    except ValueError:
        return None


def gang_waited(old: Mapping[str, Any], new: Mapping[str, Any], created: str | None, now: datetime) -> float | None:
    """status.gang carries a `reason` while members are missing; its end is the gang starting."""
    old_gang, new_gang = old.get("gang") or {}, new.get("gang") or {}
    if not new_gang or "reason" in new_gang or (old_gang and "reason" not in old_gang):
        return None
    began = _parse(old_gang.get("since")) or _parse(created)
    return max(0.0, (now - began).total_seconds()) if began else None


def transitions(old: Mapping[str, Any], new: Mapping[str, Any], created: str | None, now: datetime) -> Transitions:
    """`old` and `new`: the job's status before and after a pass; `created`: its creationTimestamp."""
    by_reason = restarts_by_reason(old, new)
    restarts = sum(n for reason, n in by_reason.items() if reason != "in_place")
    return Transitions(created=_became_true(old, new, CREATED), succeeded=_became_true(old, new, SUCCEEDED),
                       failed=_became_true(old, new, FAILED), restarts=restarts, restarts_by_reason=by_reason,
                       gang_waited=gang_waited(old, new, created, now))


def _grew(old: Mapping[str, Any], new: Mapping[str, Any], key: str) -> int:
    return max(0, int(new.get(key) or 0) - int(old.get(key) or 0))


def restarts_by_reason(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, int]:
    """Restarts in this pass by cause (tfop/core/failures.py keeps the counts in the status)."""
    restarting = conditions.find(list(new.get("conditions") or []), conditions.RESTARTING) or {}
    disrupted = "node_lost" if restarting.get("reason") == "NodeLost" else "disruption"
    counts = {"failure": _grew(old, new, "restartCount"), disrupted: _grew(old, new, "disruptionCount"),
              "in_place": _grew(old, new, "containerRestarts")}
    return {reason: n for reason, n in counts.items() if n}
