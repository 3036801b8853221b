"""Turn a TFJob of any served version into the one internal model.

Returns the model, notes worth an Event (things tfop interpreted for the user)
and problems (things that make the job invalid, each naming field and fix).
Whatever the object holds, normalize returns: a value of the wrong type is a
problem (tfop.api.wellformed), never an exception.
"""
from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from tfop.api import rules, wellformed
from tfop.api.constants import (
    CLEAN_POD_POLICIES,
    DEFAULT_CONTAINER,
    GROUP,
    LAST_APPLIED,
    REPLICA_TYPES,
    RESTART_POLICIES,
    SERVED_VERSIONS,
    SUCCESS_POLICIES,
)
from tfop.api.model import ReplicaSpec, RunPolicy, SchedulingPolicy, TFJob
from tfop.api.rules import REPLICA_SPECS, canonical_type, is_dns1035_label
from tfop.api.validation import Problem, is_whole_number, template_quantity_problems

RUN_POLICY_FIELDS = {
    "cleanPodPolicy": "clean_pod_policy",
    "ttlSecondsAfterFinished": "ttl_seconds_after_finished",
    "activeDeadlineSeconds": "active_deadline_seconds",
    "backoffLimit": "backoff_limit",
}
_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
# The cleanPodPolicy each version defaulted to upstream (None since v1.6 for v1).
DEFAULT_CLEAN_POD_POLICY = {"v1": "None", "v1beta1": "Running", "v1alpha2": "Running"}



@dataclass(frozen=True)
class Normalized:
    job: TFJob
    notes: tuple[str, ...]
    problems: tuple[Problem, ...]


@dataclass(frozen=True)
class Unstated:
    """A job normalized but for its status (with_status adds it): a pass runs for every event of the
    job's children and each brings a new status, while the rest of the job rarely changes."""
    job: TFJob  # its status empty
    notes: tuple[str, ...]
    mistyped: tuple[Problem, ...]  # wellformed's, of metadata and spec
    problems: tuple[Problem, ...]  # the others


def authored_version(obj: Mapping[str, Any], operator_manager: str = "tfop") -> str:
    """The API version the user wrote the job in.

    Every served version shares one stored object (conversion None), so a watch
    at v1 shows apiVersion v1 even for v1beta1 YAML; the managedFields (or
    kubectl's last-applied annotation) still say what the author used.
    """
    for entry in (obj.get("metadata", {}).get("managedFields") or []):
        if entry.get("manager") == operator_manager or entry.get("subresource"):
            continue
        version = str(entry.get("apiVersion", "")).rpartition("/")[2]
        if version in SERVED_VERSIONS:
            return version
    last = (obj.get("metadata", {}).get("annotations") or {}).get(LAST_APPLIED)
    if last:
        try:
            version = str(json.loads(last).get("apiVersion", "")).rpartition("/")[2]
            if version in SERVED_VERSIONS:
                return version
        except (ValueError, AttributeError, RecursionError):  # not JSON, not an object, nested too deep
            pass
    version = str(obj.get("apiVersion", "")).rpartition("/")[2]
    return version if version in SERVED_VERSIONS else "v1"

def normalize(obj: Mapping[str, Any]) -> Normalized:
    return with_status(normalize_unstated(obj), obj.get("status"))


def with_status(unstated: Unstated, status: Any) -> Normalized:
    """The job with its status, whose mistyped values are problems as the rest's are (in the same order)."""
    status, mistyped = wellformed.checked_status(status)
    job = replace(unstated.job, status=status or {})
    return Normalized(job, unstated.notes, unstated.mistyped + tuple(mistyped) + unstated.problems)


def normalize_unstated(obj: Mapping[str, Any]) -> Unstated:
    """Everything normalize reads but the status (ignored here)."""
    obj, mistyped = wellformed.checked({k: v for k, v in obj.items() if k != "status"})
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    version = authored_version(obj)
    notes: list[str] = []
    problems: list[Problem] = []

    name = meta.get("name", "")
    if not is_dns1035_label(name or ""):  # unlike the CRD's rule, a missing name is a problem too
        problems.append(Problem(
            "metadata.name",
            f"{name!r} is not a DNS-1035 label: use lower-case letters, digits and '-', "
            "starting with a letter, at most 63 characters",
        ))

    namespace = meta.get("namespace")
    if namespace and not _DNS1123_LABEL.fullmatch(namespace):  # only a file can hold one: render, validate
        problems.append(Problem(
            "metadata.namespace",
            f"{namespace!r} is not a namespace name (a DNS-1123 label): use lower-case letters, digits and "
            "'-', starting and ending with a letter or digit, at most 63 characters",
        ))

    replicas = _replica_specs(spec, notes, problems)
    run_policy = _run_policy(spec, version, notes, problems)
    success_policy = spec.get("successPolicy") or ""
    if success_policy not in SUCCESS_POLICIES:
        problems.append(Problem("spec.successPolicy", f"{success_policy!r} is unknown: use \"\" or AllWorkers"))
        success_policy = ""

    job = TFJob(
        name=name,
        namespace=meta.get("namespace") or "default",
        uid=meta.get("uid", ""),
        api_version=version,
        replicas=replicas,
        run_policy=run_policy,
        success_policy=success_policy,
        dynamic_worker=bool(spec.get("enableDynamicWorker", False)),
        generation=int(meta.get("generation") or 0),
        labels=dict(meta.get("labels") or {}),
        annotations=dict(meta.get("annotations") or {}),
        creation_timestamp=meta.get("creationTimestamp"),
    )
    # A mistyped value was dropped: what its absence means below it is no news.
    problems = [p for p in problems if not _under(p.field, mistyped)]
    return Unstated(job, tuple(notes), tuple(mistyped), tuple(problems))


def _under(field: str, problems: list[Problem]) -> bool:
    return any(field == p.field or field.startswith((p.field + ".", p.field + "[")) for p in problems)


def _replica_specs(spec, notes, problems) -> tuple[ReplicaSpec, ...]:
    raw = spec.get("tfReplicaSpecs") or {}
    if not rules.NOT_EMPTY.holds(raw):
        problems.append(Problem(REPLICA_SPECS, "no replica types: add at least one of Chief, PS, Worker, Evaluator"))
        return ()
    found: dict[str, ReplicaSpec] = {}
    keys: dict[str, str] = {}  # canonical type -> the key as written, for field paths
    for key, rspec in raw.items():
        field = f"{REPLICA_SPECS}.{key}"
        # Any case is read, as the CRD's rules do: an unknown key is one of no type, and a
        # duplicate one whose type is already taken.
        rtype = canonical_type(key)
        if rtype is None:
            problems.append(Problem(field, f"unknown replica type {key!r}: use one of {', '.join(REPLICA_TYPES)}"))
            continue
        if rtype in found:
            problems.append(Problem(field, f"replica type {rtype} is given twice (keys differ only in case): keep one"))
            continue
        rspec = rspec or {}
        count = rspec.get("replicas", 1)
        if not is_whole_number(count):
            problems.append(Problem(f"{field}.replicas", f"{count!r} is not a whole number >= 0"))
            count = 0
        elif count > rules.MAX_REPLICAS_PER_TYPE:  # stored under a CRD without this maximum
            problems.append(Problem(f"{field}.replicas", f"{count} is more than the {rules.MAX_REPLICAS_PER_TYPE} "
                                    "replicas a type may have: lower replicas or split the job"))
            count = 0  # the job fails for it; its pods are never listed
        template = rspec.get("template") or {}
        policy = _restart_policy(rtype, field, rspec, template, notes, problems)
        _check_template(field, template, problems)
        found[rtype] = ReplicaSpec(type=rtype, replicas=count, restart_policy=policy, template=template)
        keys[rtype] = key
    ordered = {t: found[t] for t in REPLICA_TYPES if t in found}
    _singleton_problems(ordered, keys, problems)
    total = sum(r.replicas for r in ordered.values())
    if not rules.TOTAL_REPLICAS.holds({t: {"replicas": r.replicas} for t, r in ordered.items()}):
        problems.append(Problem(REPLICA_SPECS, f"the job asks for {total} pods, more than the "
                                f"{rules.MAX_JOB_REPLICAS} a job may have: lower replicas or split the job"))
    return tuple(ordered.values())


def _singleton_problems(found: dict[str, ReplicaSpec], keys: dict[str, str], problems) -> None:
    """The CRD's one-chief and one-replica rules, applied to the types as read in any case."""
    if not rules.ONE_CHIEF.holds(found):
        problems.append(Problem(REPLICA_SPECS, "both Chief and Master are given: keep only one"))
    for rtype, rspec in found.items():
        counted = {rtype: {"replicas": rspec.replicas}}
        if not all(rule.holds(counted) for rule in (rules.ONE_CHIEF_REPLICA, rules.ONE_EVALUATOR_REPLICA)):
            problems.append(Problem(f"{REPLICA_SPECS}.{keys[rtype]}.replicas", f"{rtype} must have at most 1 replica"))


def _restart_policy(rtype, field, rspec, template, notes, problems) -> str:
    policy = rspec.get("restartPolicy")
    in_template = (template.get("spec") or {}).get("restartPolicy")
    if policy is None and in_template:
        # The seeds set it only in the pod template; honour it rather than default to Never.
        policy = in_template
        notes.append(f"{rtype}: restartPolicy {in_template} taken from the pod template; "
                     f"set spec.tfReplicaSpecs.{rtype}.restartPolicy instead")
    elif policy and in_template and in_template != policy:
        notes.append(f"{rtype}: pod template restartPolicy {in_template} ignored in favour of "
                     f"the replica's restartPolicy {policy}")
    policy = policy or "Never"
    if policy not in RESTART_POLICIES:
        problems.append(Problem(f"{field}.restartPolicy",
                                f"{policy!r} is unknown: use one of {', '.join(RESTART_POLICIES)}"))
        policy = "Never"
    return policy


def _check_template(field, template, problems) -> None:
    containers = (template.get("spec") or {}).get("containers") or []
    named = [c for c in containers if c.get("name") == DEFAULT_CONTAINER]
    if len(named) != 1:
        problems.append(Problem(
            f"{field}.template.spec.containers",
            f"needs exactly one container named {DEFAULT_CONTAINER!r} (found {len(named)}): "
            "TF_CONFIG and the tfjob-port go to that container",
        ))
    for kind in ("containers", "initContainers"):
        for i, container in enumerate((template.get("spec") or {}).get(kind) or []):
            if not container.get("image"):
                problems.append(Problem(f"{field}.template.spec.{kind}[{i}].image",
                                        "is empty: every container needs an image"))
    problems.extend(template_quantity_problems(f"{field}.template", template, examples=True))


def _run_policy(spec, version, notes, problems) -> RunPolicy:
    nested = spec.get("runPolicy") or {}
    values: dict[str, Any] = {}
    where: dict[str, str] = {}  # attr -> the field the value came from, for problems
    for key, attr in RUN_POLICY_FIELDS.items():
        top, inner = spec.get(key), nested.get(key)
        if inner is not None:
            if top is not None and top != inner:
                notes.append(f"spec.{key}={top} ignored: spec.runPolicy.{key}={inner} takes precedence")
            values[attr] = inner
            where[attr] = f"spec.runPolicy.{key}"
        elif top is not None:
            # Legacy location (v1alpha2/v1beta1, and an old habit in v1: upstream #1241 ignored it).
            values[attr] = top
            where[attr] = f"spec.{key}"
    clean = values.get("clean_pod_policy") or DEFAULT_CLEAN_POD_POLICY.get(version, "None")
    if clean not in CLEAN_POD_POLICIES:
        problems.append(Problem(where.get("clean_pod_policy", "spec.runPolicy.cleanPodPolicy"),
                                f"{clean!r} is unknown: use None, Running or All"))
        clean = "None"
    values["clean_pod_policy"] = clean
    for attr in RUN_POLICY_FIELDS.values():
        value = values.get(attr)
        if attr != "clean_pod_policy" and value is not None and not is_whole_number(value):
            problems.append(Problem(where[attr], f"{value!r} is not a whole number >= 0"))
            values[attr] = None

    sp = nested.get("schedulingPolicy") or {}
    scheduling = SchedulingPolicy(
        min_available=sp.get("minAvailable"),
        queue=sp.get("queue") or None,
        min_resources=sp.get("minResources") or None,
        priority_class=sp.get("priorityClass") or None,
        schedule_timeout_seconds=sp.get("scheduleTimeoutSeconds"),
    )
    return RunPolicy(
        suspend=bool(nested.get("suspend", False)),
        managed_by=nested.get("managedBy") or None,
        scheduling=scheduling,
        **values,
    )


def is_tfjob(obj: Mapping[str, Any]) -> bool:
    return obj.get("kind") == "TFJob" and str(obj.get("apiVersion", "")).startswith(GROUP + "/")
