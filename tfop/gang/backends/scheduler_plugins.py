"""scheduler-plugins Coscheduling, CRD form (v0.25+): PodGroup + pod label.

Pods may be created at once: Coscheduling's PreFilter/Permit hold them until
minMember siblings fit, and its controller reports progress in the status.
"""
from __future__ import annotations

from tfop.api.model import ReplicaSpec, TFJob
from tfop.gang.base import GangBackend, GangShape, GangState, GroupResource, PodMarkings
from tfop.gang.common import base_object, group_rules, phase_of, with_pods

PODGROUP = GroupResource("scheduling.x-k8s.io", "v1alpha1", "podgroups", "PodGroup")
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
_COUNTS = ("scheduled", "running", "succeeded", "failed")
# What Coscheduling writes on the members it rejects because a sibling did not fit
# (waitingPod.Reject in PostFilter and Unreserve): the sibling's message says why.
REJECTION_ECHOES = ("rejection in PostFilter", "rejection in Unreserve")
# What its PreFilter writes on a member while it knows fewer of the gang's pods than minMember. Once
# every member exists, its cache has yet to catch up (it retries the member when the next sibling
# arrives): an ordinary step, which waits with the gang's progress instead of being written at once.
SIBLINGS_ARRIVING = "cannot find enough sibling pods"


class SchedulerPluginsBackend(GangBackend):
    """Also the fallback for any unknown --gang-scheduler-name, which then becomes
    the pods' schedulerName (upstream v1.7+ behaviour)."""

    name = "scheduler-plugins"
    default_scheduler_name = "scheduler-plugins-scheduler"  # the Helm chart's profile
    group_resource = PODGROUP
    crds = ("podgroups.scheduling.x-k8s.io",)
    rbac_rules = group_rules(PODGROUP)
    # Coscheduling requeues pods it rejected on a PodGroup add/update or a new pod only, not
    # when nodes join or other jobs' pods go away; without a touch such a gang waits for the
    # scheduler's flush of unschedulable pods (5 minutes) after room appeared.
    retry_touch_seconds = 30
    group_status_fields = ("phase", *_COUNTS)

    def group_object(self, job: TFJob, shape: GangShape) -> dict | None:
        return base_object(PODGROUP, job, shape, {"minMember": shape.min_member,
                                                  "minResources": dict(shape.min_resources),
                                                  "scheduleTimeoutSeconds": shape.schedule_timeout_seconds})

    def pod_markings(self, job: TFJob, replica: ReplicaSpec, index: int, shape: GangShape) -> PodMarkings:
        return PodMarkings(labels={POD_GROUP_LABEL: shape.group_name})

    def state(self, group, pods) -> GangState:
        phase = phase_of(group)
        status = (group or {}).get("status", {}) or {}
        message = f"PodGroup is {phase}" if phase else ""
        counts = [f"{status[k]} {k}" for k in _COUNTS if status.get(k)]
        if message and counts:
            message += f" ({', '.join(counts)})"
        arriving = (SIBLINGS_ARRIVING,) if _every_member_exists(group, pods) else ()
        return with_pods(True, phase, "", message, pods, REJECTION_ECHOES, steps=arriving)


def _every_member_exists(group, pods) -> bool:
    min_member = ((group or {}).get("spec") or {}).get("minMember")
    live = sum(1 for pod in pods if not (pod.get("metadata") or {}).get("deletionTimestamp"))
    return isinstance(min_member, int) and live >= min_member
