"""Volcano: a PodGroup that must be admitted (Inqueue) before pods are created.

Volcano identifies a pod's task by its `volcano.sh/task-spec` annotation and
looks that value up in the PodGroup's minTaskMember, so both use the same key:
the lower-case replica type ("worker"), as the upstream operator writes it.
"""
from __future__ import annotations

from tfop.gang.base import GangBackend, GangShape, GangState, GroupResource, PodMarkings
from tfop.gang.common import base_object, condition, group_rules, phase_of, with_pods
from tfop.model import ReplicaSpec, TFJob

PODGROUP = GroupResource("scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup")
GROUP_NAME_ANNOTATION = "scheduling.k8s.io/group-name"
TASK_SPEC_ANNOTATION = "volcano.sh/task-spec"
DEFAULT_QUEUE = "default"
# Phases in which Volcano has not yet admitted the group ("" = not yet seen by it).
WAITING_PHASES = ("", "Pending")


class VolcanoBackend(GangBackend):
    name = "volcano"
    default_scheduler_name = "volcano"
    group_resource = PODGROUP
    crds = ("podgroups.scheduling.volcano.sh", "queues.scheduling.volcano.sh")
    rbac_rules = group_rules(PODGROUP)

    def group_object(self, job: TFJob, shape: GangShape) -> dict | None:
        if shape.min_member < 1:  # no pods (all replicas 0): nothing to gang
            return None
        spec: dict = {
            "minMember": shape.min_member,
            "minTaskMember": {rtype.lower(): n for rtype, n in shape.min_task_member.items()},
            "queue": shape.queue or DEFAULT_QUEUE,
        }
        if shape.priority_class:
            spec["priorityClassName"] = shape.priority_class
        if shape.min_resources:
            spec["minResources"] = dict(shape.min_resources)
        return base_object(PODGROUP, job, shape, spec)

    def pod_markings(self, job: TFJob, replica: ReplicaSpec, index: int,
                     shape: GangShape) -> PodMarkings:
        return PodMarkings(annotations={GROUP_NAME_ANNOTATION: shape.group_name,
                                        TASK_SPEC_ANNOTATION: replica.lower})

    def admission_probe(self, namespace: str) -> dict | None:
        # Volcano's pod webhook refuses a pod whose group it cannot get, as it refuses pods of a
        # Pending group; without the webhook the dry run is accepted.
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "tfop-admission-probe", "namespace": namespace,
                             "annotations": {GROUP_NAME_ANNOTATION: "tfop-admission-probe-no-such-group"}},
                "spec": {"schedulerName": self.scheduler_name,
                         "containers": [{"name": "probe", "image": "registry.k8s.io/pause:3.10"}]}}

    def state(self, group, pods) -> GangState:
        # Pods of a Pending group are refused by Volcano's admission webhook, so by default they
        # wait until the group leaves Pending (the operator creates them earlier when its
        # admission_probe shows no webhook: Context.pods_before_admission).
        phase = phase_of(group)
        admitted = group is not None and phase not in WAITING_PHASES
        cond = condition(group, "Unschedulable")
        if group is None:
            message = "waiting for the PodGroup to be created"
        elif not phase:
            message = "waiting for Volcano to pick up the PodGroup"
        else:
            message = f"PodGroup is {phase}"
        if cond and cond.get("message"):
            message += f": {cond['message']}"
        return with_pods(admitted, phase, (cond or {}).get("reason", ""), message, pods,
                         fallback="" if admitted else "PodGroupPending")
