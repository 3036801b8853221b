"""Why Kueue holds a job, read from its Workload: which queue, and how much of what its quota lacks."""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction

from tfop.api.quantity import parse_quantity
from tfop.core.pending import QUEUE_NOT_FOUND, QUOTA_EXCEEDED, Waiting, quantity
from tfop.core.room import resource_order


@dataclass(frozen=True)
class QuotaShortage:
    """What holds a job Kueue suspended: its LocalQueue and ClusterQueue, and per resource how much
    the job asks, how much its quota has left (None: unknown) and, when the job asks more than the
    quota could ever hold, that most; or else Kueue's own words."""

    local_queue: str
    cluster_queue: str = ""
    needs: Mapping[str, tuple[Fraction, Fraction | None]] = field(default_factory=dict)  # resource -> (asked, left)
    message: str = ""  # Kueue's own words, kept when no amount could be read from them
    most: Mapping[str, Fraction] = field(default_factory=dict)  # resource -> the most the quota holds


# Kueue's words (sigs.k8s.io/kueue flavorassigner, workload controller), read for their numbers.
_UNUSED = re.compile(r"insufficient unused quota for (\S+) in flavor \S+, (\S+) more needed")
_MAXIMUM = re.compile(r"insufficient quota for (\S+) in flavor \S+, request > maximum capacity \((\S+) > (\S+)\)")
# Kueue v0.15+: the pod sets before this one and this one's, against the quota's most.
_MAXIMUM_SO_FAR = re.compile(r"insufficient quota for (\S+) in flavor \S+, previously considered podsets requests "
                             r"\((\S+)\) \+ current podset request \((\S+)\) > maximum capacity \((\S+)\)")
_NO_LOCAL_QUEUE = re.compile(r"LocalQueue (\S+) doesn't exist")


def kueue_shortage(local_queue: str, cluster_queue: str, said: str, asked: Mapping[str, Fraction]) -> QuotaShortage:
    """From the message of a Workload's QuotaReserved=False condition and what the whole job asks."""
    needs: dict[str, tuple[Fraction, Fraction | None]] = {}
    most: dict[str, Fraction] = {}
    for resource, more in _UNUSED.findall(said):
        try:
            total = asked.get(resource) or Fraction(0)
            needs[resource] = (total, max(Fraction(0), total - parse_quantity(more)))
        except ValueError:
            continue
    for resource, request, maximum in _MAXIMUM.findall(said):
        try:
            needs[resource] = (parse_quantity(request), None)
            most[resource] = parse_quantity(maximum)
        except ValueError:
            continue
    for resource, before, current, maximum in _MAXIMUM_SO_FAR.findall(said):
        try:  # the whole job asks at least what Kueue had counted when the quota ran out
            counted = parse_quantity(before) + parse_quantity(current)
            needs[resource] = (max(asked.get(resource) or Fraction(0), counted), None)
            most[resource] = parse_quantity(maximum)
        except ValueError:
            continue
    return QuotaShortage(local_queue, cluster_queue, needs, "" if needs else said, most)


def explain_quota(shortage: QuotaShortage) -> Waiting:
    """"queue team-a (ClusterQueue gpus) holds the job: it needs 8 nvidia.com/gpu, 4 are left in its quota"."""
    if _NO_LOCAL_QUEUE.search(shortage.message):
        return Waiting(f"queue {shortage.local_queue} does not exist", QUEUE_NOT_FOUND)
    holder = f"queue {shortage.local_queue}"
    if shortage.cluster_queue:
        holder += f" (ClusterQueue {shortage.cluster_queue})"
    parts = []
    for r in sorted(shortage.needs, key=resource_order):
        asked, left = shortage.needs[r]
        part = f"it needs {quantity(asked, r)} {r}"
        if r in shortage.most:
            part += f", more than its quota of {quantity(shortage.most[r], r)} ever holds"
        elif left is not None:
            part += f", {quantity(left, r)} {'is' if left == 1 else 'are'} left in its quota"
        parts.append(part)
    if parts:
        return Waiting(f"{holder} holds the job: " + "; ".join(parts), QUOTA_EXCEEDED)
    why = f": {shortage.message}" if shortage.message else ""
    return Waiting(f"{holder} holds the job{why}", QUOTA_EXCEEDED)
