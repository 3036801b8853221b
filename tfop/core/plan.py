"""What one reconcile decided: the objects to create, delete and patch, the new status, the Events."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

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
    def of(cls, obj: Mapping[str, Any], plural: str) -> "Ref":
        meta = obj["metadata"]
        return cls(obj["apiVersion"], obj["kind"], plural, meta["namespace"], meta["name"])


@dataclass(frozen=True)
class Event:
    type: str  # Normal | Warning
    reason: str
    message: str


def slow_start(items: list, first: int = 1):
    """Batches of 1, 2, 4, ... of `items`, as the Job controller creates pods: a template the apiserver
    refuses costs one request, not one per pod (the caller stops at a batch with a failure)."""
    start, size = 0, first
    while start < len(items):
        yield items[start:start + size]
        start, size = start + size, size * 2


@dataclass
class Plan:
    # The gang's group object goes first, alone: the scheduler must know the gang before any pod.
    create_group: dict | None = None
    create: list[dict] = field(default_factory=list)  # pods and services, in slow_start() batches
    delete: list[Ref] = field(default_factory=list)
    patch: list[tuple[Ref, dict]] = field(default_factory=list)
    status: dict | None = None  # the whole new status when it changed
    events: list[Event] = field(default_factory=list)
    requeue_after: float | None = None
    delete_job: bool = False
    # Learned from a refusal: an admission webhook refuses pods of groups not admitted yet, so from
    # now on every gang's pods wait for admission (Context.pods_before_admission turns False).
    pods_wait_for_admission: bool = False

    def requeue(self, seconds: float) -> None:
        seconds = max(seconds, 0.0)
        self.requeue_after = seconds if self.requeue_after is None else min(self.requeue_after, seconds)

    @property
    def writes(self) -> int:
        return (self.create_group is not None) + len(self.create) + len(self.delete) + len(self.patch) + (
            self.status is not None) + self.delete_job
