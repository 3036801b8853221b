"""What one reconcile decided: the objects to create, delete and patch, the new status, the Events."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tfop.api.constants import LABEL_TYPE

POD = ("v1", "Pod", "pods")
SERVICE = ("v1", "Service", "services")


@dataclass(frozen=True)
class Ref:
    api_version: str
    kind: str
    plural: str
    namespace: str
    name: str

    @classmethod
    def of(cls, obj: Mapping[str, Any], plural: str) -> Ref:
        meta = obj["metadata"]
        return cls(obj["apiVersion"], obj["kind"], plural, meta["namespace"], meta["name"])


@dataclass(frozen=True)
class Event:
    type: str  # Normal | Warning
    reason: str
    message: str


def create_batches(objects: list[dict], first_rest: int = 16, together: bool = False):
    """The order creates go in: one object of each kind and replica type first (each made from another
    template), then the rest in batches of 16, 32, 64, ... A template the apiserver refuses costs one
    request, not one per replica, and a quota that runs out part way costs a batch (the caller stops at
    a batch with a failure), as with the Job controller's slow start 1, 2, 4, ...; but a job whose
    templates are accepted is created in two round trips, not log2(n).

    A gang's members go `together`, in one batch: a gang scheduler that sees some members before the
    rest turns the gang away (Coscheduling: not enough sibling pods) and backs it off. So do a few
    objects (no more than a batch): the first try saves little there, and costs a round trip."""
    if together or len(objects) <= first_rest:
        if objects:
            yield objects
        return
    seen: set[tuple] = set()
    probe: list[dict] = []
    rest: list[dict] = []
    for obj in objects:
        key = (obj.get("kind"), (obj.get("metadata", {}).get("labels") or {}).get(LABEL_TYPE))
        (rest if key in seen else probe).append(obj)
        seen.add(key)
    if probe:
        yield probe
    start, size = 0, first_rest
    while start < len(rest):
        yield rest[start:start + size]
        start, size = start + size, size * 2


@dataclass
class Plan:
    # The gang's group object goes first, alone: the scheduler must know the gang before any pod.
    create_group: dict | None = None
    create: list[dict] = field(default_factory=list)  # pods and services, in create_batches()
    delete: list[Ref] = field(default_factory=list)
    # Pods stuck terminating on a lost node, deleted with gracePeriodSeconds 0 (tfop/core/nodes.py)
    force_delete: list[Ref] = field(default_factory=list)
    patch: list[tuple[Ref, dict]] = field(default_factory=list)
    status: dict | None = None  # the whole new status when it changed
    events: list[Event] = field(default_factory=list)
    requeue_after: float | None = None
    delete_job: bool = False
    create_together: bool = False  # a gang's: see create_batches()
    # Learned from a refusal: an admission webhook refuses pods of groups not admitted yet, so from
    # now on every gang's pods wait for admission (Context.pods_before_admission turns False).
    pods_wait_for_admission: bool = False
    # Whether the scheduler's status of the gang's group bears on this job's passes: while the gang
    # waits (why, for how long) or its pods wait for the group's admission. Once the gang is whole,
    # a change to that status alone (a scheduler counting members as they start) changes nothing a
    # pass decides; the group's spec, owner and deletion, and the pods, still do.
    reads_group_status: bool = False
    # Whether news of mere progress from the group (gang_step.only_progress) bears on this job: not
    # while its gang waits one of the ordinary steps to starting with no pod waiting for admission,
    # for then such news changes only the gang's phase and words in a status held for a minute as
    # progress (runtime/holding.py), which the next pass, for its pods or its timer, reads anyway.
    reads_group_progress: bool = True

    def requeue(self, seconds: float) -> None:
        seconds = max(seconds, 0.0)
        self.requeue_after = seconds if self.requeue_after is None else min(self.requeue_after, seconds)

    @property
    def writes(self) -> int:
        return (self.create_group is not None) + len(self.create) + len(self.delete) + len(self.force_delete) + \
            len(self.patch) + (
            self.status is not None) + self.delete_job
