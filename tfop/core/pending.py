"""Why a gang waits, in one plain sentence computed from what tfop knows.

The scheduler's own words ("0/6 nodes are available: 4 Insufficient nvidia.com/gpu ... (and 4
other reasons)") stay in status.gang.schedulerMessage; this module says the same thing the way
a person asks it: what the gang needs, and what the cluster has free. Inputs are data only: the
gang's shape and its pods, a snapshot of the nodes (allocatable, and the requests of the pods
bound to them, from the runtime's capacity informers), the queues and PriorityClasses.

The cause (a CamelCase word) is the "reason" a Warning Event is posted for, once per change:
numbers in the sentence (how many GPUs are free) change with every other job, the cause does not.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from fractions import Fraction
from functools import cached_property
from math import ceil, floor
from typing import Any, Iterable, Mapping, Sequence

from tfop.api import conditions, pods
from tfop.api.constants import LABEL_TYPE
from tfop.api.model import TFJob
from tfop.api.quantity import format_quantity, parse_quantity
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
# Taint effects that keep a pod off a node it does not tolerate (PreferNoSchedule only discourages).
KEEPING_EFFECTS = ("NoSchedule", "NoExecute")
MAX_LISTED = 3  # resources named in a sentence without capacity
MAX_PLACEMENTS = 64  # distinct pod placements whose usable nodes a snapshot remembers


@dataclass(frozen=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"


@dataclass(frozen=True)
class NodeRoom:
    """One node as the capacity snapshot saw it, quantities in thousandths of their unit (millicores,
    millibytes: a pass over thousands of nodes adds ints, not Fractions); requested: the summed
    requests of the non-terminal pods bound to it."""

    name: str
    allocatable: Mapping[str, int]
    requested: Mapping[str, int] = field(default_factory=dict)
    ready: bool = True
    unschedulable: bool = False
    taints: tuple[Taint, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)

    def free(self, resource: str) -> Fraction:
        return Fraction(self.room.get(resource, 0), 1000)

    @cached_property
    def room(self) -> dict[str, int]:
        """What is free, in thousandths (computed once per snapshot)."""
        return {r: max(0, a - self.requested.get(r, 0)) for r, a in self.allocatable.items()}


@dataclass(frozen=True)
class Capacity:
    nodes: tuple[NodeRoom, ...] = ()
    grew_at: datetime | None = None  # when room was last freed (a bound pod gone, a node new or changed)
    # Pod placement (nodeSelector, affinity, tolerations) -> the nodes that accept it: gangs of the same
    # placement share one pass over the nodes per snapshot. Bounded: a snapshot lives seconds.
    _usable: dict = field(default_factory=dict, compare=False, repr=False)

    def usable(self, pod_spec: Mapping[str, Any]) -> list[NodeRoom]:
        key = repr([pod_spec.get(k) for k in ("nodeSelector", "affinity", "tolerations")])
        if key not in self._usable:
            if len(self._usable) >= MAX_PLACEMENTS:
                self._usable.clear()
            self._usable[key] = [node for node in self.nodes if usable(node, pod_spec)]
        return self._usable[key]


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


def _resource_order(name: str) -> tuple[int, str]:
    """Extended resources (GPUs) first: they are what a gang usually waits for."""
    return (0 if "/" in name else 1 if name == "cpu" else 2 if name == "memory" else 3, name)


def _qty(value: Fraction, resource: str) -> str:
    return format_quantity(value, resource)


def _pods(n: int) -> str:
    return f"{n} pod{'s' if n != 1 else ''}"


def _nodes(n: int) -> str:
    return f"{n} node{'s' if n != 1 else ''}"


# -- nodes -----------------------------------------------------------------------------------
def tolerates(tolerations: Sequence[Mapping[str, Any]], taint: Taint) -> bool:
    for t in tolerations:
        if t.get("effect") and t.get("effect") != taint.effect:
            continue
        if not t.get("key"):
            if t.get("operator") == "Exists":
                return True
            continue
        if t.get("key") != taint.key:
            continue
        if t.get("operator") == "Exists" or (t.get("value") or "") == taint.value:
            return True
    return False


def _matches(labels: Mapping[str, str], requirement: Mapping[str, Any]) -> bool:
    key, op, values = requirement.get("key"), requirement.get("operator"), requirement.get("values") or []
    if op == "In":
        return labels.get(key) in values
    if op == "NotIn":
        return labels.get(key) not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    return True  # Gt, Lt: not judged here; the scheduler's words say more


def selects(pod_spec: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """The pod's nodeSelector and required node affinity (its labels part) accept the node."""
    if any(labels.get(k) != v for k, v in (pod_spec.get("nodeSelector") or {}).items()):
        return False
    required = (((pod_spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = required.get("nodeSelectorTerms") or []
    return not terms or any(all(_matches(labels, r) for r in term.get("matchExpressions") or []) for term in terms)


def usable(node: NodeRoom, pod_spec: Mapping[str, Any]) -> bool:
    if not node.ready or node.unschedulable or not selects(pod_spec, node.labels):
        return False
    tolerations = pod_spec.get("tolerations") or []
    return all(tolerates(tolerations, t) for t in node.taints if t.effect in KEEPING_EFFECTS)


def _pod_spec(job: TFJob, rtype: str) -> Mapping[str, Any]:
    replica = job.replica(rtype)
    return (replica.template.get("spec") if replica else None) or {}


# -- the sentence ----------------------------------------------------------------------------
def explain_gang(job: TFJob, shape: GangShape, members: Sequence[Mapping[str, Any]], scheduler: str,
                 capacity: Capacity | None, queues: Mapping[str, str] | None,
                 priority_values: Mapping[str, int] | None, default_queue: str = "default",
                 long_unadmitted: bool = False) -> Waiting:
    """The first of: a missing PriorityClass, a missing or closed queue, too little free in the
    cluster, no nodes with room for the pods, the scheduler holding back a gang the free capacity
    fits (long_unadmitted: its group not admitted for a while); else the gang is on its way."""
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
    listed = sorted(total, key=_resource_order)[:MAX_LISTED]
    need = ", ".join(f"{_qty(total[r], r)} {r}" for r in listed)
    return f"waiting for {scheduler} to place {_pods(n)} as one gang" + (f" ({need})" if need else "")


def _milli(value: Fraction, up: bool = False) -> int:
    """Quantities as integer thousandths: a pass over thousands of nodes adds ints, not Fractions."""
    scaled = value * 1000
    return ceil(scaled) if up else floor(scaled)


def resource_wait(job: TFJob, left: Mapping[str, int], per_pod: Mapping[str, Mapping[str, Fraction]],
                  capacity: Capacity, scheduler: str, long_unadmitted: bool = False) -> Waiting:
    n = sum(left.values())
    need = {t: {r: _milli(q, up=True) for r, q in per_pod[t].items()} for t in left}
    usable_for = {t: capacity.usable(_pod_spec(job, t)) for t in left}
    total = _total(left, per_pod)
    for r in sorted(total, key=_resource_order):
        nodes = {node.name: node for t in left if r in need[t] for node in usable_for[t]}
        free = [node.room.get(r, 0) for node in nodes.values()]
        if sum(free) < _milli(total[r], up=True):
            return Waiting(f"waiting for {_qty(total[r], r)} {r} for {_pods(n)} as one gang; "
                           + _free_on(free, r), NOT_ENOUGH_RESOURCES)
    short = _pack(left, need, usable_for)
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
    r = _tightest(need[rtype], usable_for[rtype])
    free = [node.room.get(r, 0) for node in usable_for[rtype]]
    head = f"waiting for {_qty(total[r], r)} {r} for {_pods(n)} as one gang; {_free_on(free, r)}"
    one = _qty(per_pod[rtype][r], r)
    if fitted == 0:
        return Waiting(f"{head}, but no node has {one} free for one {rtype.lower()} pod", NO_NODE_FITS)
    return Waiting(f"{head}, but only {fitted} of {left[rtype]} {rtype.lower()} pods fit "
                   f"({one} {r} each on one node)", NO_NODE_FITS)


def _free_on(free: Sequence[int], r: str) -> str:
    holding = [f for f in free if f > 0]
    if not holding:
        return "none are free"
    have = sum(holding)
    text = f"{_qty(Fraction(have, 1000), r)} {'is' if have == 1000 else 'are'} free on {_nodes(len(holding))}"
    return text + (f" (at most {_qty(Fraction(max(holding), 1000), r)} on one node)" if len(holding) > 1 else "")


def _fits(room: Mapping[str, int], need: Mapping[str, int]) -> int:
    return min(room.get(r, 0) // q for r, q in need.items()) if need else 1 << 30


def _pack(left: Mapping[str, int], need: Mapping[str, Mapping[str, int]],
          usable_for: Mapping[str, Sequence[NodeRoom]]) -> tuple[str, int] | None:
    """Place the pods greedily, the largest first, each node filled in turn: None when all fit,
    else (the replica type that did not, how many of it did). First-fit is not optimal for
    mixed pod sizes, but it never says "fits" when nothing does."""
    taken: dict[str, dict[str, int]] = {}  # node -> what the pods placed so far take of it
    resources = sorted({r for t in left for r in need[t]}, key=_resource_order)
    for rtype in sorted(left, key=lambda t: [-need[t].get(r, 0) for r in resources]):
        want, fitted = left[rtype], 0
        for node in usable_for[rtype]:
            used = taken.get(node.name) or {}
            room = {r: node.room.get(r, 0) - used.get(r, 0) for r in need[rtype]} if used else node.room
            take = min(_fits(room, need[rtype]), want - fitted)
            if take <= 0:
                continue
            used = taken.setdefault(node.name, {})
            for r, q in need[rtype].items():
                used[r] = used.get(r, 0) + q * take
            fitted += take
            if fitted == want:
                break
        if fitted < want:
            return rtype, fitted
    return None


def _tightest(need: Mapping[str, int], nodes: Sequence[NodeRoom]) -> str:
    """The resource that fits the fewest pods of this size on the nodes."""
    def pods_fitting(r: str) -> int:
        return sum(node.room.get(r, 0) // need[r] for node in nodes)
    return min(sorted(need, key=_resource_order), key=pods_fitting)


# -- Kueue -----------------------------------------------------------------------------------
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
    return QuotaShortage(local_queue, cluster_queue, needs, "" if needs else said, most)


def explain_quota(shortage: QuotaShortage) -> Waiting:
    """"queue team-a (ClusterQueue gpus) holds the job: it needs 8 nvidia.com/gpu, 4 are left in its quota"."""
    if _NO_LOCAL_QUEUE.search(shortage.message):
        return Waiting(f"queue {shortage.local_queue} does not exist", QUEUE_NOT_FOUND)
    holder = f"queue {shortage.local_queue}"
    if shortage.cluster_queue:
        holder += f" (ClusterQueue {shortage.cluster_queue})"
    parts = []
    for r in sorted(shortage.needs, key=_resource_order):
        asked, left = shortage.needs[r]
        part = f"it needs {_qty(asked, r)} {r}"
        if r in shortage.most:
            part += f", more than its quota of {_qty(shortage.most[r], r)} ever holds"
        elif left is not None:
            part += f", {_qty(left, r)} {'is' if left == 1 else 'are'} left in its quota"
        parts.append(part)
    if parts:
        return Waiting(f"{holder} holds the job: " + "; ".join(parts), QUOTA_EXCEEDED)
    why = f": {shortage.message}" if shortage.message else ""
    return Waiting(f"{holder} holds the job{why}", QUOTA_EXCEEDED)


# -- what `kubectl get tfjob -o wide` shows ----------------------------------------------------
def headline(status: Mapping[str, Any]) -> str:
    """status.message, the Message column: while the gang waits, or Kueue holds the job, why (tfop's
    sentence); otherwise the latest condition's message, as upstream's column showed."""
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
