"""`tfop doctor`'s vocabulary: a check's outcome, the report and exit code, and reading API times."""
from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# A Lease renewed within its duration plus this is taken as held by a running process: the
# holder's clock and ours are different machines' clocks.
LEASE_GRACE = dt.timedelta(seconds=30)


@dataclass(frozen=True)
class Check:
    title: str
    ok: bool | None  # None: could not be checked (says why in detail); not a failure
    detail: str = ""
    fix: str = ""


def format_report(checks: list[Check]) -> str:
    marks = {True: "PASS", False: "FAIL", None: "SKIP"}
    lines = []
    for c in checks:
        lines.append(f"[{marks[c.ok]}] {c.title}")
        if c.detail:
            lines += [f"       {line}" for line in c.detail.splitlines()]
        if c.fix and c.ok is False:
            lines += [f"       {line}" for line in c.fix.splitlines()]
    failed = sum(1 for c in checks if c.ok is False)
    lines.append(f"{len(checks) - failed} ok, {failed} failed" if failed else "all checks passed")
    return "\n".join(lines)


def exit_code(checks: list[Check]) -> int:
    return 1 if any(c.ok is False for c in checks) else 0


def parse_time(value: Any) -> dt.datetime | None:
    """An API timestamp (RFC 3339 text, or a datetime from the official client) as an aware datetime."""
    if isinstance(value, dt.datetime):
        return value if value.tzinfo else value.replace(tzinfo=dt.UTC)
    if isinstance(value, str) and value:
        return dt.datetime.fromisoformat(value)
    return None


def lease_age(lease: Mapping[str, Any], now: dt.datetime) -> dt.timedelta | None:
    """How long ago the Lease was renewed, or None when nobody holds it."""
    spec = lease.get("spec") or {}
    renewed = parse_time(spec.get("renewTime"))
    if not spec.get("holderIdentity") or renewed is None:
        return None
    return now - renewed


def lease_is_live(lease: Mapping[str, Any], now: dt.datetime) -> bool:
    """Held and renewed within its duration (plus grace): the holder is running now."""
    age = lease_age(lease, now)
    duration = dt.timedelta(seconds=(lease.get("spec") or {}).get("leaseDurationSeconds") or 15)
    return age is not None and age <= duration + LEASE_GRACE
