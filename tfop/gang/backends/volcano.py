"""Volcano: a PodGroup that Volcano admits (Inqueue) before it binds the pods.

tfop creates the pods once the group is admitted, or together with the group
when nothing refuses pods of a Pending group (Context.pods_before_admission).
Volcano's pod webhook refused them until volcano-sh/volcano#2078 (2022), and
refused pods whose PodGroup it cannot get until #4132 (2025). Releases since
(the e2e harness runs v1.14.1's) check only the pod's `volcano.sh/jdb-*`
annotations, and the queue check moved to the PodGroup webhook.

Volcano identifies a pod's task by its `volcano.sh/task-spec` annotation and
looks that value up in the PodGroup's minTaskMember, so both use the same key:
the lower-case replica type ("worker"), as the upstream operator writes it.
"""
from __future__ import annotations

from tfop.api.conditions import GANG_GROUP_PENDING
from tfop.api.model import ReplicaSpec, TFJob
from tfop.gang.base import GangBackend, GangShape, GangState, GroupResource, PodMarkings
from tfop.gang.common import base_object, condition, group_rules, phase_of, with_pods

PODGROUP = GroupResource("scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup")
# Queues are listed and watched (their state: Volcano allocates nothing in a queue that is not Open),
# to say why a gang waits in one (tfop/core/pending.py).
QUEUE = GroupResource("scheduling.volcano.sh", "v1beta1", "queues", "Queue")
QUEUE_RULE = {"apiGroups": [QUEUE.group], "resources": [QUEUE.plural], "verbs": ["list", "watch"]}
GROUP_NAME_ANNOTATION = "scheduling.k8s.io/group-name"
TASK_SPEC_ANNOTATION = "volcano.sh/task-spec"
DEFAULT_QUEUE = "default"
# What Volcano writes on the pods of a gang it has not placed yet, whatever the cause: the cause,
# if there is one, is in the PodGroup's Unschedulable condition.
POD_ECHOES = ("pod group is not ready",)
# Phases in which Volcano has not yet admitted the group ("" = not yet seen by it).
WAITING_PHASES = ("", "Pending")


class VolcanoBackend(GangBackend):
    name = "volcano"
    default_scheduler_name = "volcano"
    group_resource = PODGROUP
    crds = ("podgroups.scheduling.volcano.sh", "queues.scheduling.volcano.sh")
    queue_resource = QUEUE
    rbac_rules = (QUEUE_RULE, *group_rules(PODGROUP))  # cluster-scoped first, as the chart orders them

    def group_object(self, job: TFJob, shape: GangShape) -> dict | None:
        return base_object(PODGROUP, job, shape, {
            "minMember": shape.min_member,
            "minTaskMember": {rtype.lower(): n for rtype, n in shape.min_task_member.items()},
            "queue": shape.queue or DEFAULT_QUEUE,
            "priorityClassName": shape.priority_class,
            "minResources": dict(shape.min_resources),
        })

    def pod_markings(self, job: TFJob, replica: ReplicaSpec, index: int, shape: GangShape) -> PodMarkings:
        return PodMarkings(annotations={GROUP_NAME_ANNOTATION: shape.group_name,
                                        TASK_SPEC_ANNOTATION: replica.lower})

    def admission_probe(self, namespace: str) -> dict | None:
        # Refused by Volcano's pod webhooks that looked the group up (before #4132; those before
        # #2078 also refused pods of a Pending group): then pods wait for admission, which is
        # needlessly careful with 2022-2025 webhooks, but safe. Accepted by newer webhooks
        # and when none runs: pods go with the group.
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "tfop-admission-probe", "namespace": namespace,
                             "annotations": {GROUP_NAME_ANNOTATION: "tfop-admission-probe-no-such-group"}},
                "spec": {"schedulerName": self.scheduler_name,
                         "containers": [{"name": "probe", "image": "registry.k8s.io/pause:3.10"}]}}

    def state(self, group, pods) -> GangState:
        # Old Volcano webhooks refuse pods of a Pending group, so by default they wait until the
        # group leaves Pending (the operator creates them earlier when its admission_probe is
        # accepted: Context.pods_before_admission).
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
        if phase == "Pending":
            message += _admission_rule(group)
        return with_pods(admitted, phase, (cond or {}).get("reason", ""), message, pods, POD_ECHOES,
                         fallback="" if admitted else GANG_GROUP_PENDING, echoes_are_progress=True)


def _admission_rule(group) -> str:
    """Volcano's own words for a Pending group ("pod group is not ready, 5 Pending") do not say
    what it waits for: its enqueue action admits it once minResources fit what is idle."""
    spec = group.get("spec") or {}
    need = ", ".join(f"{k} {v}" for k, v in sorted((spec.get("minResources") or {}).items()))
    if not need:
        return ""
    return (f" (Volcano admits it once its minResources, {need}, fit in the idle capacity of the cluster "
            f"and of queue {spec.get('queue') or DEFAULT_QUEUE})")
