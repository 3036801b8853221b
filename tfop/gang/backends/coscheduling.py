"""Coscheduling, label form (ACK; scheduler-plugins up to v0.18): two pod labels, no object."""
from __future__ import annotations

from tfop.api.model import ReplicaSpec, TFJob
from tfop.gang.base import GangBackend, GangShape, GangState, PodMarkings
from tfop.gang.common import with_pods

NAME_LABEL = "pod-group.scheduling.sigs.k8s.io/name"
MIN_AVAILABLE_LABEL = "pod-group.scheduling.sigs.k8s.io/min-available"


class CoschedulingLabelsBackend(GangBackend):
    name = "coscheduling"
    # ACK enables Coscheduling in the default scheduler; elsewhere pass --scheduler-name.
    default_scheduler_name = None
    crds = ()  # label form: nothing in the API to detect
    rbac_rules = ()

    def pod_markings(self, job: TFJob, replica: ReplicaSpec, index: int, shape: GangShape) -> PodMarkings:
        return PodMarkings(labels={NAME_LABEL: shape.group_name,
                                   MIN_AVAILABLE_LABEL: str(shape.min_member)})

    def state(self, group, pods) -> GangState:
        return with_pods(True, "", "", "", pods)
