"""The types tfop reads in a TFJob, checked before anything reads them.

The apiserver checks a stored TFJob against the CRD's schema, but a file given
to `tfop validate` or `tfop render` can hold anything (and ObjectMeta is not in
the schema at all). checked() reports every value of a field tfop reads that
has the wrong type, in the schema's words, and returns the job without those
values, so normalize and everything after it read only what they expect. A
well-formed job comes back as the same object, untouched.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tfop.api.conditions import parse_time
from tfop.api.validation import Problem, shown

STRING, INTEGER, BOOLEAN, OBJECT, ARRAY = "string", "integer", "boolean", "object", "array"
TIMESTAMP = "timestamp"  # a string as the apiserver writes times (tfop.api.conditions.parse_time)


@dataclass(frozen=True)
class Each:
    """An object whose every value has this spec (labels, tfReplicaSpecs)."""
    value: Any


@dataclass(frozen=True)
class Items:
    """An array whose every item is an object of this spec."""
    item: dict


# A spec is a type name, a dict of declared fields (others are not looked at), Each or Items.
CONTAINER = {
    "name": STRING, "image": STRING, "restartPolicy": STRING,
    "ports": Items({"name": STRING, "containerPort": INTEGER}),
    "env": Items({"name": STRING}),
    "resources": {"limits": OBJECT, "requests": OBJECT},
}
POD_TEMPLATE = {
    "metadata": {"labels": Each(STRING), "annotations": Each(STRING)},
    "spec": {
        "containers": Items(CONTAINER), "initContainers": Items(CONTAINER),
        "schedulerName": STRING, "priorityClassName": STRING, "restartPolicy": STRING, "overhead": OBJECT,
    },
}
# replicas, restartPolicy, the run policy's counts and policies, successPolicy: normalize checks
# their values itself (any type), in words of its own.
REPLICA_SPEC = {"template": POD_TEMPLATE}
RUN_POLICY = {
    "suspend": BOOLEAN, "managedBy": STRING,
    "schedulingPolicy": {"minAvailable": INTEGER, "queue": STRING, "minResources": OBJECT,
                         "priorityClass": STRING, "scheduleTimeoutSeconds": INTEGER},
}
TFJOB = {
    "metadata": {
        "name": STRING, "namespace": STRING, "uid": STRING, "generation": INTEGER,
        "labels": Each(STRING), "annotations": Each(STRING), "creationTimestamp": TIMESTAMP,
        "managedFields": Items({"manager": STRING, "apiVersion": STRING, "subresource": STRING}),
    },
    "spec": {
        "tfReplicaSpecs": Each(REPLICA_SPEC), "runPolicy": RUN_POLICY, "enableDynamicWorker": BOOLEAN,
    },
    "status": {
        "conditions": Items({"type": STRING, "status": STRING, "reason": STRING, "message": STRING,
                             "lastUpdateTime": TIMESTAMP, "lastTransitionTime": TIMESTAMP}),
        "replicaStatuses": Each(OBJECT), "startTime": TIMESTAMP, "completionTime": TIMESTAMP,
        "lastReconcileTime": TIMESTAMP, "restartCount": INTEGER, "gang": OBJECT,
        "disruptionCount": INTEGER, "containerRestarts": INTEGER, "nodeLoss": OBJECT,
    },
}


def checked(obj: Mapping[str, Any]) -> tuple[Mapping[str, Any], list[Problem]]:
    """(the job without its mistyped values, a Problem for each); the job itself when all are right."""
    problems: list[Problem] = []
    clean = _object(obj, TFJOB, "", problems)
    return clean, problems


def checked_status(status: Any) -> tuple[Any, list[Problem]]:
    """checked() of a job's status alone (None when absent or not an object)."""
    problems: list[Problem] = []
    _, clean = _check(status, TFJOB["status"], "status", problems)
    return clean, problems


def _has_type(value: Any, kind: str) -> bool:
    if kind == STRING:
        return isinstance(value, str)
    if kind == INTEGER:  # YAML's true is an int to Python, not an integer to Kubernetes
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == BOOLEAN:
        return isinstance(value, bool)
    if kind == OBJECT:
        return isinstance(value, Mapping)
    if kind == ARRAY:
        return isinstance(value, list)
    return isinstance(value, str) and _is_timestamp(value)


def _is_timestamp(value: str) -> bool:
    try:
        return parse_time(value) is not None  # "" is no time
    except ValueError:
        return False


def _kind(spec: Any) -> str:
    if isinstance(spec, (dict, Each)):
        return OBJECT
    return ARRAY if isinstance(spec, Items) else spec


def _wrong(value: Any, spec: Any, field: str, problems: list[Problem]) -> None:
    kind = _kind(spec)
    if kind == TIMESTAMP:
        message = f"Invalid value: {shown(value)}: must be a time like 2024-05-01T12:00:00Z (UTC, whole seconds)"
    else:
        message = f"Invalid value: {shown(value)}: must be of type {kind}"
    problems.append(Problem(field, message))


def _check(value: Any, spec: Any, field: str, problems: list[Problem]) -> tuple[bool, Any]:
    """(well-typed?, the value with its mistyped parts removed); a null is left as it is (absent)."""
    if value is None:
        return True, None
    if not _has_type(value, _kind(spec)):
        _wrong(value, spec, field, problems)
        return False, None
    if isinstance(spec, dict):
        return True, _object(value, spec, field, problems)
    if isinstance(spec, Each):
        return True, _each(value, spec.value, field, problems)
    if isinstance(spec, Items):
        return True, _items(value, spec.item, field, problems)
    return True, value


def _join(field: str, key: Any) -> str:
    return f"{field}.{key}" if field else str(key)


def _object(value: Mapping[str, Any], fields: dict, field: str, problems: list[Problem]) -> Mapping[str, Any]:
    out: dict | None = None  # a copy, made at the first change
    for key, spec in fields.items():
        if key not in value:
            continue
        ok, clean = _check(value[key], spec, _join(field, key), problems)
        if ok and clean is value[key]:
            continue
        out = dict(value) if out is None else out
        if ok:
            out[key] = clean
        else:
            del out[key]  # as if absent: the reader's default applies, and the Problem says why
    return value if out is None else out


def _each(value: Mapping[Any, Any], spec: Any, field: str, problems: list[Problem]) -> Mapping[Any, Any]:
    out: dict | None = None
    for key, item in value.items():
        ok, clean = _check(item, spec, _join(field, key), problems)
        if ok and clean is item:
            continue
        out = dict(value) if out is None else out
        if ok:
            out[key] = clean
        elif isinstance(spec, dict):
            out[key] = {}  # the key stays (a replica type is still given), empty: its problem says why
        else:
            del out[key]
    return value if out is None else out


def _items(value: list, spec: dict, field: str, problems: list[Problem]) -> list:
    """An array of objects (every Items of the table): a mistyped or null item becomes an empty object,
    which keeps the other items' indexes, so the problems found later name the right one."""
    out: list | None = None
    for i, item in enumerate(value):
        if item is None:
            ok, clean = False, None
            _wrong(item, spec, f"{field}[{i}]", problems)
        else:
            ok, clean = _check(item, spec, f"{field}[{i}]", problems)
        if ok and clean is item:
            continue
        out = list(value) if out is None else out
        out[i] = clean if ok else {}
    return value if out is None else out
