"""Why a gang waits, in one plain sentence computed from what tfop knows.

The scheduler's own words ("0/6 nodes are available: 4 Insufficient nvidia.com/gpu ... (and 4
other reasons)") stay in status.gang.schedulerMessage; this module says the same thing the way
a person asks it: what the gang needs, and what the cluster has free. Inputs are data only: the
gang's shape and its pods, a snapshot of the nodes (tfop/core/room.py: whether the pods fit), the
queues and PriorityClasses. Kueue's hold is read in tfop/core/quota.py.

The cause (a CamelCase word) is the "reason" a Warning Event is posted for, once per change:
numbers in the sentence (how many GPUs are free) change with every other job, the cause does not.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from tfop.api import conditions, pods
from tfop.api.constants import LABEL_TYPE
from tfop.api.model import TFJob
from tfop.api.quantity import format_quantity, parse_quantity
from tfop.core.room import Capacity, milli, pack, resource_order, tightest
from tfop.gang.base import GangShape

# Causes the user can act on (tfop/api/conditions.py): each posts one Warning Event when it becomes the reason.
NOT_ENOUGH_RESOURCES = conditions.INSUFFICIENT_RESOURCES
NO_NODE_FITS = conditions.NO_NODE_FITS_POD
QUEUE_CLOSED = conditions.QUEUE_CLOSED
QUEUE_NOT_FOUND = conditions.QUEUE_NOT_FOUND
PRIORITY_CLASS_NOT_FOUND = conditions.PRIORITY_CLASS_NOT_FOUND
QUOTA_EXCEEDED = conditions.QUEUE_QUOTA_EXCEEDED
ADMISSION_HELD = conditions.ADMISSION_HELD
CAUSES = conditions.WAIT_CAUSES
MAX_LISTED = 3  # resources named in a sentence without capacity


@dataclass(frozen=True)
class Waiting:
    """Why a gang waits: `cause` is one of CAUSES, or "" when it is only on its way."""

    message: str
    cause: str = ""
    fits: bool = False  # the free capacity fits every unplaced member: it is the scheduler's turn
    placed: bool = False  # every member is bound to a node: only their start is left


# -- what the gang still needs ---------------------------------------------------------------
def _requests(shape: GangShape, rtype: str) -> dict[str, Fraction]:
    out = {}
    for name, value in (shape.pod_resources.get(rtype) or {}).items():
        try:
            out[name] = parse_quantity(value)
        except ValueError:
            continue
    return {k: v for k, v in out.items() if v > 0}


def placed(pod: Mapping[str, Any]) -> bool:
    """Bound to a node: counted in that node's requests already."""
    if pods.phase(pod) in ("Running", "Succeeded", "Failed"):
        return True
    return any(c.get("type") == "PodScheduled" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def unplaced(shape: GangShape, members: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Replica type -> gang members of that type not bound to a node yet."""
    bound: dict[str, int] = {}
    for pod in members:
        if placed(pod):
            rtype = ((pod.get("metadata") or {}).get("labels") or {}).get(LABEL_TYPE, "")
            bound[rtype] = bound.get(rtype, 0) + 1
    left = {t: n - bound.get(t.lower(), 0) for t, n in shape.min_task_member.items()}
    return {t: n for t, n in left.items() if n > 0}


def quantity(value: Fraction, resource: str) -> str:
    return format_quantity(value, resource)


def _pods(n: int) -> str:
    return f"{n} pod{'s' if n != 1 else ''}"


def _nodes(n: int) -> str:
    return f"{n} node{'s' if n != 1 else ''}"


def _pod_spec(job: TFJob, rtype: str) -> Mapping[str, Any]:
    replica = job.replica(rtype)
    return (replica.template.get("spec") if replica else None) or {}


# -- the sentence ----------------------------------------------------------------------------
def explain_gang(job: TFJob, shape: GangShape, members: Sequence[Mapping[str, Any]], scheduler: str,
                 capacity: Capacity | None, queues: Mapping[str, str] | None,
                 priority_values: Mapping[str, int] | None, default_queue: str = "default",
                 long_unadmitted: bool = False, awaited: int | None = None) -> Waiting:
    """The first of: a missing PriorityClass, a missing or closed queue, pods of the gang that cannot be
    created yet (awaited: how many the gang lacks beyond those this pass creates, for a scheduler that
    looks at none of its pods until all exist; None for others), too little free in the cluster, no
    nodes with room for the pods, the scheduler holding back a gang the free capacity fits
    (long_unadmitted: its group not admitted for a while); else the gang is on its way."""
    missing = missing_priority_class(job, shape, priority_values)
    if missing:
        return Waiting(f"priority class {missing} does not exist", PRIORITY_CLASS_NOT_FOUND)
    if queues is not None:
        queue = shape.queue or default_queue
        if queue not in queues:
            return Waiting(f"queue {queue} does not exist", QUEUE_NOT_FOUND)
        state = queues[queue]
        if state != "Open":
            return Waiting(f"queue {queue} is {state.lower() if state else 'not open'}", QUEUE_CLOSED)
    if awaited:
        return Waiting(f"waiting for pods: {len(members)} of the gang's {shape.min_member} exist, and {scheduler} "
                       f"places none of them until all do")
    left = unplaced(shape, members)
    if not left:
        return Waiting(f"all {_pods(shape.min_member)} of the gang are placed; waiting for them to start", placed=True)
    per_pod = {t: _requests(shape, t) for t in left}
    if capacity is None:
        return Waiting(_without_capacity(left, per_pod, scheduler))
    return resource_wait(job, left, per_pod, capacity, scheduler, long_unadmitted)


def missing_priority_class(job: TFJob, shape: GangShape, priority_values: Mapping[str, int] | None) -> str:
    if priority_values is None:
        return ""
    names = [shape.priority_class] + [(r.template.get("spec") or {}).get("priorityClassName") for r in job.replicas
                                      if r.replicas > 0]
    return next((n for n in names if n and n not in priority_values), "")


def _total(left: Mapping[str, int], per_pod: Mapping[str, Mapping[str, Fraction]]) -> dict[str, Fraction]:
    total: dict[str, Fraction] = {}
    for rtype, n in left.items():
        for r, q in per_pod[rtype].items():
            total[r] = total.get(r, Fraction(0)) + q * n
    return total


def _without_capacity(left, per_pod, scheduler: str) -> str:
    n = sum(left.values())
    total = _total(left, per_pod)
    listed = sorted(total, key=resource_order)[:MAX_LISTED]
    need = ", ".join(f"{quantity(total[r], r)} {r}" for r in listed)
    return f"waiting for {scheduler} to place {_pods(n)} as one gang" + (f" ({need})" if need else "")


def resource_wait(job: TFJob, left: Mapping[str, int], per_pod: Mapping[str, Mapping[str, Fraction]],
                  capacity: Capacity, scheduler: str, long_unadmitted: bool = False) -> Waiting:
    n = sum(left.values())
    need = {t: {r: milli(q, up=True) for r, q in per_pod[t].items()} for t in left}
    usable_for = {t: capacity.usable(_pod_spec(job, t)) for t in left}
    total = _total(left, per_pod)
    for r in sorted(total, key=resource_order):
        nodes = {node.name: node for t in left if r in need[t] for node in usable_for[t]}
        free = [node.room.get(r, 0) for node in nodes.values()]
        if sum(free) < milli(total[r], up=True):
            return Waiting(f"waiting for {quantity(total[r], r)} {r} for {_pods(n)} as one gang; "
                           + _free_on(free, r), NOT_ENOUGH_RESOURCES)
    short = pack(left, need, usable_for)
    if short is None and long_unadmitted:
        # What else holds it: Volcano admits a gang only if it fits what is idle minus what gangs
        # admitted earlier reserve, cluster-wide, however few nodes those can use.
        return Waiting(f"waiting for {scheduler} to admit {_pods(n)} as one gang; the cluster's free "
                       f"capacity fits them, but {scheduler} keeps it for gangs it admitted earlier "
                       "that have not started", ADMISSION_HELD, fits=True)
    if short is None:
        return Waiting(f"waiting for {scheduler} to place {_pods(n)} as one gang; "
                       "the cluster's free capacity fits them", fits=True)
    rtype, fitted = short
    if not need[rtype]:  # it requests nothing: only no node at all keeps it off
        return Waiting(f"waiting for {scheduler} to place {_pods(n)} as one gang; no node takes a "
                       f"{rtype.lower()} pod (Ready, schedulable, and matching its nodeSelector, "
                       "affinity and tolerations)", NO_NODE_FITS)
    r = tightest(need[rtype], usable_for[rtype])
    free = [node.room.get(r, 0) for node in usable_for[rtype]]
    head = f"waiting for {quantity(total[r], r)} {r} for {_pods(n)} as one gang; {_free_on(free, r)}"
    one = quantity(per_pod[rtype][r], r)
    if fitted == 0:
        return Waiting(f"{head}, but no node has {one} free for one {rtype.lower()} pod", NO_NODE_FITS)
    return Waiting(f"{head}, but only {fitted} of {left[rtype]} {rtype.lower()} pods fit "
                   f"({one} {r} each on one node)", NO_NODE_FITS)


def _free_on(free: Sequence[int], r: str) -> str:
    holding = [f for f in free if f > 0]
    if not holding:
        return "none are free"
    have = sum(holding)
    text = f"{quantity(Fraction(have, 1000), r)} {'is' if have == 1000 else 'are'} free on {_nodes(len(holding))}"
    return text + (f" (at most {quantity(Fraction(max(holding), 1000), r)} on one node)" if len(holding) > 1 else "")


# -- what `kubectl get tfjob -o wide` shows ----------------------------------------------------
def headline(status: Mapping[str, Any]) -> str:
    """status.message, the Message column: while the gang waits, or Kueue holds the job, why (tfop's
    sentence); otherwise the latest condition's message, as upstream's column showed."""
    if (status.get("nodeLoss") or {}).get("message"):  # pods on a lost node: what ends the wait
        return status["nodeLoss"]["message"]
    gang = status.get("gang") or {}
    if "reason" in gang and gang.get("message"):
        return gang["message"]
    if (status.get("admission") or {}).get("message"):
        return status["admission"]["message"]
    latest = (status.get("conditions") or [{}])[-1]
    return latest.get("message") or ""


def with_headline(status: dict | None) -> dict | None:
    if status is not None:
        status["message"] = headline(status)
    return status
