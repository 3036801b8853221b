"""kube-arbitrator (2018): a PodDisruptionBudget marks the gang.

kube-arbitrator groups pods by their controller ownerReference and reads the
gang size from the PDB that selects them, so pods need no markings.
"""
from __future__ import annotations

from tfop.api.constants import LABEL_JOB
from tfop.api.model import ReplicaSpec, TFJob
from tfop.gang.base import GangBackend, GangShape, GroupResource, PodMarkings
from tfop.gang.common import base_object, group_rules, with_pods

PDB = GroupResource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget")


class PdbBackend(GangBackend):
    name = "kube-arbitrator"
    default_scheduler_name = "kube-batchd"
    group_resource = PDB
    # PodDisruptionBudget is built in: its presence says nothing, so `auto` never picks this.
    crds = ()
    rbac_rules = group_rules(PDB)
    group_status_fields = ()  # state() reads the pods, not the budget

    def group_object(self, job: TFJob, shape: GangShape) -> dict | None:
        if job.total_replicas < 2:  # a single pod is its own gang
            return None
        return base_object(PDB, job, shape, {
            "minAvailable": shape.min_member,
            "selector": {"matchLabels": {LABEL_JOB: job.name}},
        })

    def pod_markings(self, job: TFJob, replica: ReplicaSpec, index: int, shape: GangShape) -> PodMarkings:
        return PodMarkings()

    def state(self, group, pods):
        return with_pods(True, "", "", "", pods)
