"""Kubernetes' own gang scheduling (the Workload API, KEP-4671): kube-scheduler places a
`scheduling.k8s.io/v1beta1` PodGroup's pods all together or not at all, from Kubernetes 1.37 with
the GenericWorkload feature gate on. No other scheduler runs.

- The PodGroup alone carries the gang: kube-scheduler 1.37 never reads a Workload, so none is made
  (a Workload holds PodGroup templates for controllers that stamp out many groups; a TFJob has one).
- Each pod names its group in `spec.schedulingGroup.podGroupName`. kube-scheduler refuses a gang
  whose members' priority differs from the group's, so the gang's PriorityClass goes on the group
  and on every pod.
- `disruptionMode: all`: a TFJob that loses one member restarts its whole gang anyway, so
  preemption that must take a member takes the whole gang, and frees all of its room at once.
- The group's condition `PodGroupInitiallyScheduled` never returns to False once True, so a group
  that placed a gang judges no later one: after a whole-gang restart the group is spent, and it is
  deleted and created anew (same name, a new object) before the new pods.
- Until minCount member pods exist, kube-scheduler holds them (PreEnqueue) and writes nothing:
  `waits_for_every_member` makes tfop's sentence say so.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tfop.api.conditions import GANG_NOT_ADMITTED
from tfop.api.model import ReplicaSpec, TFJob
from tfop.gang.base import GangBackend, GangShape, GangState, GroupResource, PodMarkings
from tfop.gang.common import base_object, group_rules, with_pods

PODGROUP = GroupResource("scheduling.k8s.io", "v1beta1", "podgroups", "PodGroup")
SCHEDULED = "PodGroupInitiallyScheduled"


class KubernetesBackend(GangBackend):
    name = "kubernetes"
    default_scheduler_name = None  # kube-scheduler, the cluster's default
    group_resource = PODGROUP
    builtin_api = True
    rbac_rules = group_rules(PODGROUP)
    group_status_fields = ("conditions",)
    waits_for_every_member = True

    def group_object(self, job: TFJob, shape: GangShape) -> dict | None:
        return base_object(PODGROUP, job, shape, {
            "schedulingPolicy": {"gang": {"minCount": shape.min_member}},
            "disruptionMode": {"all": {}},
            "priorityClassName": shape.priority_class,
        })

    def group_changes(self, observed: Mapping[str, Any], desired: Mapping[str, Any]) -> dict | None:
        # minCount is the one mutable field of a PodGroup's spec; the others wait for the next group.
        want = _min_count(desired)
        if want is None or want == _min_count(observed):
            return None
        return {"spec": {"schedulingPolicy": {"gang": {"minCount": want}}}}

    def pod_markings(self, job: TFJob, replica: ReplicaSpec, index: int, shape: GangShape) -> PodMarkings:
        spec: dict[str, Any] = {"schedulingGroup": {"podGroupName": shape.group_name}}
        if shape.priority_class:
            spec["priorityClassName"] = shape.priority_class
        return PodMarkings(spec=spec)

    def state(self, group, pods) -> GangState:
        if group is None:
            return GangState(admitted=False, reason=GANG_NOT_ADMITTED, message="waiting for the PodGroup to be created")
        if (group.get("metadata") or {}).get("deletionTimestamp"):
            return GangState(admitted=False, reason=GANG_NOT_ADMITTED,
                             message="waiting for the previous PodGroup to be deleted: a gang restart needs a new one")
        cond = scheduled_condition(group)
        live = [p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")]
        if cond is not None and cond.get("status") == "True":
            if not live:
                return GangState(admitted=False, spent=True, reason=GANG_NOT_ADMITTED,
                                 message="the PodGroup placed an earlier gang and judges no other: it is made anew")
            return with_pods(True, "", "", "PodGroup scheduled", pods)
        if cond is not None and cond.get("status") == "False":
            reason = cond.get("reason") or "Unschedulable"
            said = cond.get("message") or "no reason given"
            return with_pods(True, "", reason, f"PodGroup not scheduled ({reason}): {said}", pods)
        # Also while fewer than minCount pods exist: kube-scheduler then holds them and writes nothing.
        return with_pods(True, "", "", "waiting for kube-scheduler to try the gang", pods)


def _min_count(group: Mapping[str, Any]) -> int | None:
    policy = ((group.get("spec") or {}).get("schedulingPolicy") or {})
    count = (policy.get("gang") or {}).get("minCount")
    return count if isinstance(count, int) else None


def scheduled_condition(group: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The group's PodGroupInitiallyScheduled condition, whatever its status; None before the scheduler wrote it."""
    for cond in ((group or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == SCHEDULED:
            return cond
    return None
