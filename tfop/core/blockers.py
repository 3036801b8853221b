"""Blocked: what outside the job keeps it from creating its pods, said on the job, tried again on a backoff.

Two kinds of input: children the job needs a name of but another controller
holds (the view), and refusals of the last pass that tried to create something
(a ResourceQuota, an admission webhook, missing RBAC, a terminating namespace,
a name taken by an object without the job's labels). The condition stays while
the cause does, with the same message, so waiting costs no status writes.
"""
from __future__ import annotations

import re

from tfop.api import conditions
from tfop.api.conditions import BLOCKED, find
from tfop.api.quantity import format_quantity, parse_quantity
from tfop.core.draft import Draft
from tfop.core.outcomes import (
    FORBIDDEN,
    NAME_TAKEN,
    NAMED,
    NAMESPACE_TERMINATING,
    QUOTA,
    WEBHOOK_DENIED,
    FailedWrite,
    blocking,
    forbidden_message,
)
from tfop.core.ownership import describe_holder, earlier_incarnation
from tfop.core.view import JobView

REASONS = {NAME_TAKEN: "NameTaken", QUOTA: "QuotaExceeded", NAMESPACE_TERMINATING: "NamespaceTerminating",
           WEBHOOK_DENIED: "AdmissionDenied", FORBIDDEN: "Forbidden"}
MIN_RETRY, MAX_RETRY = 2.0, 60.0  # seconds between tries while blocked: doubling with the time blocked
QUOTA_WORDS = re.compile(r"exceeded quota: ([^,]+), requested: (\S+), used: (\S+), limited: (\S+)")


def check_blockers(draft: Draft) -> bool:
    """Set or clear the Blocked condition; True when the job must not try to create anything now."""
    view = draft.view
    found = _foreign_holders(view) + [(kind, describe(kind, f)) for kind, f in blocking(view.obs.refusals, view.job)]
    previous = find(draft.conditions, BLOCKED)
    if not found:
        if previous is not None:
            draft.clear_condition(BLOCKED)
        return False
    more = f"; and {len(found) - NAMED} more" if len(found) > NAMED else ""
    message = "; ".join(text for _, text in found[:NAMED]) + more
    reason = REASONS[found[0][0]]
    draft.condition(BLOCKED, True, reason, message)
    if previous is None or previous.get("message") != message:
        draft.event("Warning", reason, message)
    if any(kind == NAMESPACE_TERMINATING for kind, _ in found):
        return True  # nothing it creates can stay: stop
    return _backing_off(draft, previous)


def _backing_off(draft: Draft, previous) -> bool:
    view = draft.view
    if not view.obs.refusals or view.obs.refused_at is None:
        return False  # only foreign holders: their names are skipped, the rest goes on
    # The gap after a try is as long as the job had been blocked when it tried: 2, 2, 4, 8, ... 60 s.
    since = conditions.parse_time((previous or {}).get("lastTransitionTime"))
    blocked_at_try = (view.obs.refused_at - since).total_seconds() if since else 0.0
    wait = min(MAX_RETRY, max(MIN_RETRY, blocked_at_try))
    since_try = (view.now - view.obs.refused_at).total_seconds()
    if since_try < wait:
        draft.plan.requeue(wait - since_try)
        return True
    return False


def _foreign_holders(view: JobView) -> list[tuple[str, str]]:
    needed = set(view.expected_names())
    out = []
    for (kind, name), obj in sorted(view.foreign.items()):
        if kind in ("Pod", "Service") and name not in needed or earlier_incarnation(view.job, obj):
            continue  # not a name the job needs, or the garbage collector is removing it
        out.append((NAME_TAKEN, (f"{describe_holder(obj)}, not to this job, which needs the name: "
                                 f"delete that {kind.lower()} or rename the TFJob")))
    return out


def describe(kind: str, failure: FailedWrite) -> str:
    """The refusal in words a user can act on."""
    if kind == QUOTA:
        return quota_shortfall(failure)
    if kind == NAMESPACE_TERMINATING:
        return f"the namespace is being deleted, so {failure.kind.lower()} {failure.name} cannot be created"
    if kind == NAME_TAKEN:
        holder = describe_holder(failure.holder) if failure.holder else f"{failure.label} exists"
        return f"{holder}, not to this job, which needs the name: delete it or rename the TFJob"
    if kind == FORBIDDEN:
        return forbidden_message(failure)
    return f"{failure.label}: {failure.message}"


def quota_shortfall(failure: FailedWrite) -> str:
    """Which ResourceQuota refused, and how much of what is missing."""
    match = QUOTA_WORDS.search(failure.message)
    if match is None:
        return f"{failure.label}: {failure.message}"
    quota, requested, used, limited = match.groups()
    missing = []
    for name, want in _amounts(requested).items():
        short = want + _amounts(used).get(name, 0) - _amounts(limited).get(name, 0)
        if short > 0:
            missing.append(f"{format_quantity(short, name)} {name}")
    lacks = ", ".join(missing) or "room"
    return (f"ResourceQuota {quota} lacks {lacks} for {failure.label} (requested {requested}, used {used}, "
            f"limited {limited}); tfop tries again until it fits")


def _amounts(text: str) -> dict:
    out = {}
    for part in text.split(","):
        name, _, value = part.partition("=")
        try:
            out[name] = parse_quantity(value)
        except ValueError:
            continue
    return out
