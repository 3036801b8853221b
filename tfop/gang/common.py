"""Helpers every backend shares: group metadata, RBAC rules, why pods wait."""
from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from tfop.api.conditions import GANG_UNSCHEDULABLE
from tfop.api.constants import LABEL_JOB, LABEL_OPERATOR, LAST_APPLIED, OPERATOR_NAME
from tfop.api.model import TFJob
from tfop.gang.base import GangShape, GangState, GroupResource

# Exactly what the operator does with a group object: create it; list and watch
# it (an informer: its phase gates pod creation); merge-patch it when the job is
# edited, to nudge the scheduler or to adopt it; delete it when the job finishes
# or is suspended; get it only when its create answers 409 (whose is the name?).
# Never an update.
GROUP_VERBS = ("create", "delete", "get", "list", "patch", "watch")


def group_rules(resource: GroupResource) -> tuple[dict, ...]:
    return ({"apiGroups": [resource.group], "resources": [resource.plural],
             "verbs": list(GROUP_VERBS)},)


def group_crd(backend: Any) -> str | None:
    """The CRD (plural.group) of the backend's group objects, when it is one of the CRDs the backend
    declares; None for a backend without group objects or whose group is a built-in kind (a
    PodDisruptionBudget, Kubernetes' own PodGroup), which no CRD check may call missing. Duck-typed:
    a third-party backend may lack either attribute."""
    resource = getattr(backend, "group_resource", None)
    if resource is None:
        return None
    crd = f"{resource.plural}.{resource.group}"
    return crd if crd in getattr(backend, "crds", ()) else None


def group_metadata(job: TFJob, shape: GangShape) -> dict:
    return {
        "name": shape.group_name,
        "namespace": job.namespace,
        "labels": {LABEL_JOB: job.name, LABEL_OPERATOR: OPERATOR_NAME},
        "annotations": {k: v for k, v in job.annotations.items() if k != LAST_APPLIED},
        "ownerReferences": [job.owner_reference()],
    }


def base_object(resource: GroupResource, job: TFJob, shape: GangShape, spec: dict) -> dict | None:
    """The group object, or None for a gang of no pods (all replicas 0); spec fields that are None
    or empty are left out (the scheduler's defaults)."""
    if shape.min_member < 1:
        return None
    spec = {k: v for k, v in spec.items() if v is not None and v != {}}
    return {"apiVersion": resource.api_version, "kind": resource.kind,
            "metadata": group_metadata(job, shape), "spec": spec}


def _unschedulable(pod: Mapping[str, Any]) -> str | None:
    for cond in (pod.get("status", {}) or {}).get("conditions") or []:
        if (cond.get("type") == "PodScheduled" and cond.get("status") == "False"
                and cond.get("reason") == "Unschedulable"):
            return cond.get("message") or "no reason given"
    return None


def pending_reason(pods: list[Mapping[str, Any]], echoes: tuple[str, ...] = ()) -> tuple[str, str]:
    """("Unschedulable", "N/M pods unschedulable: <scheduler's message>") or ("", "").

    Gang schedulers write the same verdict on every member, so the most common
    message is the gang's; others are counted, not listed, to keep it one line.
    Messages containing one of `echoes` only repeat that a sibling was rejected
    (Coscheduling's "optimistic rejection in PostFilter"): any other message,
    the one saying why, goes first.
    """
    messages = [m for m in (_unschedulable(p) for p in pods) if m is not None]
    if not messages:
        return "", ""
    counts = Counter(messages)
    top = max(counts, key=lambda m: (not any(e in m for e in echoes), counts[m], -messages.index(m)))
    text = f"{len(messages)}/{len(pods)} pods unschedulable: {top}"
    if len(counts) > 1:
        text += f" (and {len(counts) - 1} other reason{'s' if len(counts) > 2 else ''})"
    return GANG_UNSCHEDULABLE, text


def condition(group: Mapping[str, Any] | None, ctype: str) -> Mapping[str, Any] | None:
    for cond in ((group or {}).get("status", {}) or {}).get("conditions") or []:
        if cond.get("type") == ctype and cond.get("status", "True") == "True":
            return cond
    return None


def phase_of(group: Mapping[str, Any] | None) -> str:
    return ((group or {}).get("status", {}) or {}).get("phase") or ""


def with_pods(admitted: bool, phase: str, reason: str, message: str, pods: list[Mapping[str, Any]],
              echoes: tuple[str, ...] = (), fallback: str = "", echoes_are_progress: bool = False,
              steps: tuple[str, ...] = ()) -> GangState:
    """Join the group's own verdict with the pods' PodScheduled messages; `fallback` is the reason
    when neither says anything (a scheduler's complaint about the pods outranks it). With
    `echoes_are_progress`, pods that only echo the group's state give no reason of their own; nor do
    pods whose message is one of `steps` (an ordinary step towards starting), unless a sibling's
    message says something else."""
    pod_reason, pod_message = pending_reason(pods, echoes + steps)
    messages = [m for m in (message, pod_message) if m]
    said = pod_message.split(": ", 1)[-1]
    echoed = bool(pod_message) and any(e in said for e in echoes)
    if (echoed and echoes_are_progress) or any(step in said for step in steps):
        pod_reason = ""
    return GangState(admitted=admitted, phase=phase, reason=reason or pod_reason or fallback, explained=not echoed,
                     message="; ".join(messages))
