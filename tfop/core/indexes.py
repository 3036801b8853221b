"""Sets of replica indices as compact text, "0-3,7" (as a Kubernetes Job's status.completedIndexes).

The job's status keeps, per replica type, the indices whose pod succeeded
(`status.succeededIndexes`), so that a succeeded pod deleted later (garbage
collection of completed pods, an eviction, a user) is neither created again
nor taken for a lost gang member. Its size grows with the ranges, never with
time: at most one entry per replica the spec asks for.
"""
from __future__ import annotations

from collections.abc import Iterable


def format_indexes(indices: Iterable[int]) -> str:
    """Sorted, runs joined: {0, 1, 2, 3, 7} -> "0-3,7"."""
    parts: list[str] = []
    run: list[int] = []
    for i in sorted(set(indices)):
        if run and i == run[-1] + 1:
            run[-1] = i
            continue
        if run:
            parts.append(_run(run))
        run = [i, i]
    if run:
        parts.append(_run(run))
    return ",".join(parts)


def _run(run: list[int]) -> str:
    first, last = run
    return str(first) if first == last else f"{first}-{last}"


def parse_indexes(text: object, below: int) -> frozenset[int]:
    """The indices in `text` that are < `below` (the replicas the spec asks for now). Anything
    malformed is skipped: the status is the operator's own, but people can edit it."""
    if not isinstance(text, str) or below <= 0:
        return frozenset()
    found: set[int] = set()
    for part in text.split(","):
        first, dash, last = part.strip().partition("-")
        if not first.isdecimal() or (dash and not last.isdecimal()):  # isdigit() admits "²", which int() refuses
            continue
        low, high = int(first), int(last or first)
        found.update(range(low, min(high, below - 1) + 1))  # bounded by `below`, whatever the text says
    return frozenset(found)
