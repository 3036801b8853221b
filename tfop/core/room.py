"""The cluster's room as the capacity view saw it, and whether a gang's pods fit in it.

A small model of what kube-scheduler checks before it places a pod: the node is Ready and
schedulable, matches the pod's nodeSelector and required node affinity (labels only), and has no
NoSchedule or NoExecute taint the pod does not tolerate; then the pods are packed first-fit,
largest first. It never says "fits" when nothing does; it may say "does not fit" where the
scheduler would find a cleverer placement, and then the scheduler's own words stand beside it.
Quantities are integer thousandths of their unit (ints add fast; Fractions would not).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from fractions import Fraction
from functools import cached_property
from math import ceil, floor
from typing import Any

# Taint effects that keep a pod off a node it does not tolerate (PreferNoSchedule only discourages).
KEEPING_EFFECTS = ("NoSchedule", "NoExecute")
MAX_PLACEMENTS = 64  # distinct pod placements whose usable nodes a snapshot remembers


def resource_order(name: str) -> tuple[int, str]:
    """Extended resources (GPUs) first: they are what a gang usually waits for."""
    return (0 if "/" in name else 1 if name == "cpu" else 2 if name == "memory" else 3, name)


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


def milli(value: Fraction, up: bool = False) -> int:
    """Quantities as integer thousandths: a pass over thousands of nodes adds ints, not Fractions."""
    scaled = value * 1000
    return ceil(scaled) if up else floor(scaled)


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
    key: str = requirement.get("key") or ""  # no label has an empty key
    op, values = requirement.get("operator"), requirement.get("values") or []
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


def _fits(room: Mapping[str, int], need: Mapping[str, int]) -> int:
    return min(room.get(r, 0) // q for r, q in need.items()) if need else 1 << 30


def pack(left: Mapping[str, int], need: Mapping[str, Mapping[str, int]],
          usable_for: Mapping[str, Sequence[NodeRoom]]) -> tuple[str, int] | None:
    """Place the pods greedily, the largest first, each node filled in turn: None when all fit,
    else (the replica type that did not, how many of it did). First-fit is not optimal for
    mixed pod sizes, but it never says "fits" when nothing does."""
    taken: dict[str, dict[str, int]] = {}  # node -> what the pods placed so far take of it
    resources = sorted({r for t in left for r in need[t]}, key=resource_order)
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


def tightest(need: Mapping[str, int], nodes: Sequence[NodeRoom]) -> str:
    """The resource that fits the fewest pods of this size on the nodes."""
    def pods_fitting(r: str) -> int:
        return sum(node.room.get(r, 0) // need[r] for node in nodes)
    return min(sorted(need, key=resource_order), key=pods_fitting)
