"""The one small interface every gang backend implements.

A backend is pure: it turns a job and its computed `GangShape` into the group
object to create (if any) and the markings each pod carries, and reads the
scheduler's verdict back from the observed group object and pods. The
operator does all API calls; backends never talk to Kubernetes.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from tfop.api.model import ReplicaSpec, TFJob


@dataclass(frozen=True)
class GroupResource:
    """Where a backend's group object lives in the API."""

    group: str  # "" for the core group
    version: str
    plural: str
    kind: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


@dataclass(frozen=True)
class GangShape:
    """What the gang needs, computed once per reconcile from the job (see shape.py)."""

    group_name: str
    min_member: int
    # Per replica type (canonical name, e.g. "Worker"): members of that type in the gang.
    min_task_member: Mapping[str, int]
    # Summed requests of the first min_member pods, or schedulingPolicy.minResources.
    min_resources: Mapping[str, str]
    # Requests of one pod of each replica type (YuniKorn task groups need them).
    pod_resources: Mapping[str, Mapping[str, str]]
    queue: str | None = None
    priority_class: str | None = None
    schedule_timeout_seconds: int | None = None


@dataclass(frozen=True)
class PodMarkings:
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    # Pod spec fields the scheduler reads (Kubernetes' own gang: spec.schedulingGroup); they win over
    # the template's, since a member the scheduler cannot match to its group breaks the gang.
    spec: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class GangState:
    """The scheduler's verdict on a gang, as far as the observed objects tell."""

    admitted: bool  # may the operator create the pods now?
    phase: str = ""  # the group's phase, or "" when the backend has no group object
    reason: str = ""
    message: str = ""
    # False when the pods only echo that a sibling was rejected: the reason why is elsewhere,
    # so the operator keeps the message it last had for this reason.
    explained: bool = True
    # The group has served its turn (a scheduler that judges each group once already placed it, and
    # its pods are gone): the operator deletes it and creates it anew before any pod.
    spent: bool = False


class GangBackend(ABC):
    """Subclasses are registered under the `tfop.gang_backends` entry-point group."""

    name: ClassVar[str]
    # schedulerName stamped on pods unless --scheduler-name overrides it; None = cluster default.
    default_scheduler_name: ClassVar[str | None]
    # The group object's API, or None for backends that only mark pods.
    group_resource: ClassVar[GroupResource | None] = None
    # CRDs (plural.group) whose presence means this scheduler is installed (doctor, auto).
    crds: ClassVar[tuple[str, ...]] = ()
    # For a scheduler built into Kubernetes: its group_resource is a built-in API, served once enabled,
    # which discovery finds (doctor, auto): no CRD is installed.
    builtin_api: ClassVar[bool] = False
    # The scheduler looks at none of a gang's pods until minMember of them exist, and says nothing
    # meanwhile: tfop's sentence says it waits for pods.
    waits_for_every_member: ClassVar[bool] = False
    # The scheduler's queue objects (cluster-scoped), whose state explains a gang that waits in one.
    queue_resource: ClassVar[GroupResource | None] = None
    # Extra ClusterRole rules the operator needs for this backend.
    rbac_rules: ClassVar[tuple[Mapping[str, Any], ...]] = ()
    # For schedulers that retry a rejected gang only when its group object changes: touch
    # (annotate) the group this often while the gang is unschedulable. None: never touch.
    retry_touch_seconds: ClassVar[float | None] = None
    # What state() reads of the group's status; the rest (counters, condition timestamps: a scheduler
    # updates them as pods start) is not kept, so changes to it wake no reconcile.
    group_status_fields: ClassVar[tuple[str, ...]] = ("phase", "conditions")

    def admission_probe(self, namespace: str) -> dict | None:
        """For a backend whose state() holds pods back until the group is admitted: a pod that
        the scheduler's admission webhook, when installed, refuses even as a dry run (it names a
        group that does not exist). Accepted means no such webhook: pods may go first. None: no
        probe, pods wait for admission."""
        return None

    def __init__(self, scheduler_name: str | None = None):
        self.scheduler_name = scheduler_name or self.default_scheduler_name

    def group_plural(self) -> str:
        """The plural of this backend's group objects: asked only where a group object exists."""
        if self.group_resource is None:
            raise TypeError(f"the {self.name} backend has no group objects")
        return self.group_resource.plural

    def group_object(self, job: TFJob, shape: GangShape) -> dict | None:
        """The group object to create (name = shape.group_name, owned by the job), or None."""
        return None

    @abstractmethod
    def pod_markings(
        self, job: TFJob, replica: ReplicaSpec, index: int, shape: GangShape
    ) -> PodMarkings:
        """Labels, annotations and spec fields that make one pod a member of the gang."""

    def group_changes(self, observed: Mapping[str, Any], desired: Mapping[str, Any]) -> dict | None:
        """A merge patch bringing the observed group's spec to the desired one, or None."""
        want = desired.get("spec", {})
        have = observed.get("spec", {})
        diff = {k: v for k, v in want.items() if have.get(k) != v}
        return {"spec": diff} if diff else None

    def state(self, group: Mapping[str, Any] | None, pods: list[Mapping[str, Any]]) -> GangState:
        """Read the scheduler's verdict; default: pods may always be created."""
        return GangState(admitted=True)
