"""Which of two copies of an object is newer, by their resourceVersions."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def version_of(obj: Mapping[str, Any]) -> str:
    return (obj.get("metadata") or {}).get("resourceVersion") or ""


def newer(candidate: Mapping[str, Any], current: Mapping[str, Any] | None) -> bool:
    """Whether `candidate` is at least as new as `current`. resourceVersions are opaque, but etcd's
    are integers: compared when they are. A copy without one is never newer than a known object: the
    apiserver answers a DELETE that someone else finished first with such a copy (the pod as it was
    before the deletion), which would otherwise bring a deleted pod back."""
    return current is None or _at_least(version_of(candidate), version_of(current))


def later(candidate: Mapping[str, Any], current: Mapping[str, Any] | None) -> bool:
    """newer(), and not the same version again (e.g. our create's answer, then its watch event).
    Read for every watch event: each version is looked up once."""
    if current is None:
        return True
    a, b = version_of(candidate), version_of(current)
    return a != b and _at_least(a, b)


def _at_least(a: str, b: str) -> bool:
    if not a:
        return False
    if a.isdigit() and b.isdigit():
        return int(a) >= int(b)
    return True
