"""Apache YuniKorn: application labels, task groups and gang policy on every pod.

YuniKorn reads the task groups and the gang policy only from the pod that creates
the application in its cache: whichever pod of the job its informer delivers
first, not the first one the operator created (k8shim v1.8.0 `pkg/cache`
`ensureAppAndTaskCreated` -> `getAppMetadata`). Pods created within the same
instant arrive in any order, so every pod carries them, or the gang is lost.

applicationId is `<namespace>-<job>-<first 8 hex digits of the job's uid>`,
cut to the 63-character label limit from the left of the name part: unique
per job object (a deleted and re-created job of the same name is a new
application, not the remains of the old one) and the same on every reconcile.
"""
from __future__ import annotations

import json

from tfop.api.model import ReplicaSpec, TFJob
from tfop.gang.base import GangBackend, GangShape, GangState, PodMarkings
from tfop.gang.common import with_pods

APP_ID_LABEL = "applicationId"
QUEUE_LABEL = "queue"
TASK_GROUP_NAME = "yunikorn.apache.org/task-group-name"
TASK_GROUPS = "yunikorn.apache.org/task-groups"
POLICY_PARAMETERS = "yunikorn.apache.org/schedulingPolicyParameters"
DEFAULT_QUEUE = "root.default"
_LABEL_MAX = 63


def application_id(job: TFJob) -> str:
    base = f"{job.namespace}-{job.name}"
    suffix = job.uid.replace("-", "")[:8]
    if not suffix:
        return base[:_LABEL_MAX].rstrip("-._")
    return f"{base[:_LABEL_MAX - len(suffix) - 1]}-{suffix}"


def task_groups(job: TFJob, shape: GangShape) -> list[dict]:
    """One task group per replica type in the gang; placement fields only when set,
    so placeholders land where the real pods could."""
    groups = []
    for rtype, members in shape.min_task_member.items():
        replica = job.replica(rtype)
        spec = (replica.template.get("spec", {}) if replica else {}) or {}
        group = {"name": rtype.lower(), "minMember": members,
                 "minResource": dict(shape.pod_resources.get(rtype, {}))}
        for key in ("nodeSelector", "tolerations", "affinity"):
            if spec.get(key):
                group[key] = spec[key]
        groups.append(group)
    return groups


def policy_parameters(shape: GangShape) -> str:
    # Always Hard: YuniKorn's default (Soft) quietly drops the gang guarantee
    # when placeholders time out, which is the deadlock-prone behaviour gangs avoid.
    params = []
    if shape.schedule_timeout_seconds is not None:
        params.append(f"placeholderTimeoutInSeconds={shape.schedule_timeout_seconds}")
    params.append("gangSchedulingStyle=Hard")
    return " ".join(params)


class YunikornBackend(GangBackend):
    name = "yunikorn"
    default_scheduler_name = "yunikorn"
    crds = ()  # YuniKorn ships no CRD to detect it by
    rbac_rules = ()

    def pod_markings(self, job: TFJob, replica: ReplicaSpec, index: int, shape: GangShape) -> PodMarkings:
        labels = {APP_ID_LABEL: application_id(job), QUEUE_LABEL: shape.queue or DEFAULT_QUEUE}
        annotations = {}
        # Types outside the gang (minAvailable < total) run as ordinary app pods.
        if replica.type in shape.min_task_member:
            annotations[TASK_GROUP_NAME] = replica.lower
        annotations[TASK_GROUPS] = json.dumps(task_groups(job, shape), separators=(",", ":"))
        annotations[POLICY_PARAMETERS] = policy_parameters(shape)
        return PodMarkings(labels=labels, annotations=annotations)

    def state(self, group, pods) -> GangState:
        return with_pods(True, "", "", "", pods)
