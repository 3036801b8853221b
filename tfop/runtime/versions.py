"""Which of two copies of an object is newer, by their resourceVersions."""
from __future__ import annotations

from typing import Any, Mapping


def version_of(obj: Mapping[str, Any]) -> str:
    return (obj.get("metadata") or {}).get("resourceVersion") or ""


def newer(candidate: Mapping[str, Any], current: Mapping[str, Any] | None) -> bool:
    """Whether `candidate` is at least as new as `current`. resourceVersions are opaque, but etcd's
    are integers: compared when they are. A copy without one is never newer than a known object: the
    apiserver answers a DELETE that someone else finished first with such a copy (the pod as it was
    before the deletion), which would otherwise bring a deleted pod back."""
    if current is None:
        return True
    a, b = version_of(candidate), version_of(current)
    if not a:
        return False
    if a.isdigit() and b.isdigit():
        return int(a) >= int(b)
    return True


def later(candidate: Mapping[str, Any], current: Mapping[str, Any] | None) -> bool:
    """newer(), and not the same version again (e.g. our create's answer, then its watch event)."""
    return newer(candidate, current) and (current is None or version_of(candidate) != version_of(current))
