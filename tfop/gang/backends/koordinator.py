"""Koordinator: gang annotations on each pod, no group object.

Strict mode: if the gang is not complete within waiting-time, koord-scheduler
releases all its reservations, which is what an all-or-nothing job wants.
"""
from __future__ import annotations

from tfop.api.model import ReplicaSpec, TFJob
from tfop.gang.base import GangBackend, GangShape, GangState, PodMarkings
from tfop.gang.common import with_pods

PREFIX = "gang.scheduling.koordinator.sh/"
NAME = PREFIX + "name"
MIN_AVAILABLE = PREFIX + "min-available"
WAITING_TIME = PREFIX + "waiting-time"
MODE = PREFIX + "mode"


class KoordinatorBackend(GangBackend):
    name = "koordinator"
    default_scheduler_name = "koord-scheduler"
    # Installed with every Koordinator release; the gang annotations need no CRD of their own.
    crds = ("reservations.scheduling.koordinator.sh",)
    rbac_rules = ()

    def pod_markings(self, job: TFJob, replica: ReplicaSpec, index: int, shape: GangShape) -> PodMarkings:
        annotations = {NAME: shape.group_name, MIN_AVAILABLE: str(shape.min_member),
                       MODE: "Strict"}
        if shape.schedule_timeout_seconds is not None:
            # Unset: Koordinator's own default (600s) applies.
            annotations[WAITING_TIME] = f"{shape.schedule_timeout_seconds}s"
        return PodMarkings(annotations=annotations)

    def state(self, group, pods) -> GangState:
        return with_pods(True, "", "", "", pods)
