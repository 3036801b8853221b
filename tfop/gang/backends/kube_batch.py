"""kube-batch: a PodGroup plus the group-name annotation on each pod.

Without the annotation kube-batch puts each pod in a one-member shadow group,
which schedules fine but is no gang.
"""
from __future__ import annotations

from tfop.api.conditions import GANG_UNSCHEDULABLE
from tfop.api.model import ReplicaSpec, TFJob
from tfop.gang.base import GangBackend, GangShape, GangState, GroupResource, PodMarkings
from tfop.gang.common import base_object, condition, group_rules, phase_of, with_pods

PODGROUP = GroupResource("scheduling.incubator.k8s.io", "v1alpha1", "podgroups", "PodGroup")
GROUP_NAME_ANNOTATION = "scheduling.k8s.io/group-name"


class KubeBatchBackend(GangBackend):
    name = "kube-batch"
    default_scheduler_name = "kube-batch"
    group_resource = PODGROUP
    crds = ("podgroups.scheduling.incubator.k8s.io",)
    rbac_rules = group_rules(PODGROUP)

    def group_object(self, job: TFJob, shape: GangShape) -> dict | None:
        return base_object(PODGROUP, job, shape, {"minMember": shape.min_member, "queue": shape.queue,
                                                  "priorityClassName": shape.priority_class})

    def pod_markings(self, job: TFJob, replica: ReplicaSpec, index: int, shape: GangShape) -> PodMarkings:
        return PodMarkings(annotations={GROUP_NAME_ANNOTATION: shape.group_name})

    def state(self, group, pods) -> GangState:
        # kube-batch has no admission step: pods wait Pending until the whole gang fits.
        phase = phase_of(group)
        cond = condition(group, "Unschedulable")
        reason = (cond or {}).get("reason", "") or (GANG_UNSCHEDULABLE if cond else "")
        message = (cond or {}).get("message", "")
        return with_pods(True, phase, reason, message, pods)
