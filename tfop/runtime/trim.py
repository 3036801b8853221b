"""The small copies of API objects the operator keeps in memory.

A reconcile reads little of each object: pods' phase, conditions and exit codes
(tfop/api/pods.py), the job's spec and status. Keeping only that, as fresh dicts
with interned strings (every pod repeats the same label keys, namespace and job
name), is what keeps a cache of thousands of jobs' pods small: the parsed JSON
of one pod is ~30 dicts and lists, its trimmed copy a handful.
"""
from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from fractions import Fraction
from sys import intern
from typing import Any

from tfop.api import codec
from tfop.api.constants import LAST_APPLIED, LEGACY_GROUP_LABEL, LEGACY_LABELS
from tfop.api.quantity import parse_quantity

KEEP_META = ("name", "namespace", "uid", "resourceVersion", "labels", "annotations", "deletionTimestamp",
             "ownerReferences", "creationTimestamp")
KEEP_CONDITION = ("type", "status", "reason", "message")
MAX_NODE_MESSAGE = 256  # a node's Ready message, quoted in a job's sentence about its lost node
# Upstream's older label keys, written on every child for clients that select by them and never
# read back: 8 of a child's 12 labels, a fifth of a cached service.
UNREAD_LABELS = frozenset({LEGACY_GROUP_LABEL, *(key for keys in LEGACY_LABELS.values() for key in keys)})


class SharedParts:
    """One copy of the equal parts many cached children carry: a job's ownerReferences on each of its
    pods and services, the conditions and container states every running pod has alike. Cached
    objects are never changed in place (an informer replaces a whole object), so sharing is safe;
    the table starts over when full, and what was shared meanwhile stays shared."""

    def __init__(self, limit: int = 16384):
        self.limit = limit
        self._kept: dict[Any, Any] = {}

    def one(self, value: Any) -> Any:
        key = codec.dumps(value).decode()  # JSON's equality (true is not 1); orjson's bytes keep a 4 KiB buffer
        kept = self._kept.get(key)
        if kept is None:
            if len(self._kept) >= self.limit:
                self._kept.clear()
            kept = self._kept[key] = value
        return kept


def _no_sharing(value: Any) -> Any:
    return value


def _strings(mapping: Mapping[str, Any] | None) -> dict:
    return {intern(k): intern(v) if isinstance(v, str) and len(v) < 64 else v for k, v in (mapping or {}).items()}


def trim_meta(meta: Mapping[str, Any], share: Callable[[Any], Any] = _no_sharing) -> dict:
    out = {}
    for key in KEEP_META:
        value = meta.get(key)
        if value is None:
            continue
        if key == "labels":
            value = _strings({k: v for k, v in value.items() if k not in UNREAD_LABELS})
        elif key == "annotations":
            value = _strings(value)
        elif key == "ownerReferences":
            value = share([_strings(ref) for ref in value])
        elif key in ("namespace", "name", "creationTimestamp"):  # a burst creates hundreds a second
            value = intern(value)
        out[key] = value
    return out


def _terminated(state: Mapping[str, Any] | None) -> dict | None:
    if not state:
        return None
    terminated = state.get("terminated")
    if terminated is None:
        return {intern(k): {} for k in state}  # which state, not its details
    return {"terminated": {k: terminated[k] for k in ("exitCode", "reason") if k in terminated}}


def trim_conditions(conditions: list[Mapping[str, Any]]) -> list[dict]:
    """Type, status, reason and message: not the times, which change when nothing else does."""
    return [{k: intern(c[k]) if k != "message" else c[k] for k in KEEP_CONDITION if k in c} for c in conditions]


def trim_pod_status(status: Mapping[str, Any], share: Callable[[Any], Any] = _no_sharing) -> dict:
    """What tfop/api/pods.py and the gang backends read: phase, reason, conditions, exit codes, restarts."""
    out: dict[str, Any] = {k: status[k] for k in ("phase", "reason") if k in status}
    if status.get("conditions"):
        out["conditions"] = share(trim_conditions(status["conditions"]))
    containers = []
    for c in status.get("containerStatuses") or []:
        kept: dict[str, Any] = {"name": intern(c.get("name", "")), "restartCount": c.get("restartCount", 0)}
        for key in ("state", "lastState"):
            state = _terminated(c.get(key))
            if state:
                kept[key] = state
        containers.append(kept)
    if containers:
        out["containerStatuses"] = share(containers)
    return out


def trim_child(obj: Mapping[str, Any], keep_spec: bool = False, shared: SharedParts | None = None) -> dict:
    """A pod, service, group object or PriorityClass as the informers keep it (a service's status,
    its load balancer, is never read); with `shared`, equal parts kept once."""
    kind = obj.get("kind") or ""
    share = shared.one if shared is not None else _no_sharing
    out = {"apiVersion": intern(obj.get("apiVersion") or ""), "kind": intern(kind),
           "metadata": trim_meta(obj.get("metadata") or {}, share)}
    if kind == "Pod":
        out["status"] = trim_pod_status(obj.get("status") or {}, share)
        node = (obj.get("spec") or {}).get("nodeName")
        if node and not keep_spec:  # where it runs: a lost node loses its pods (tfop/api/nodes.py)
            out["spec"] = {"nodeName": intern(node)}
    elif kind != "Service":
        out["status"] = obj.get("status") or {}
    if keep_spec:
        out["spec"] = obj.get("spec") or {}
    if "value" in obj:  # PriorityClass keeps its value at the top level
        out["value"] = obj["value"]
    return out


def trim_group(obj: Mapping[str, Any], status_fields: tuple[str, ...]) -> dict:
    """A gang's group object: its spec (the operator patches it) and the fields of its status that the
    backend reads (GangBackend.group_status_fields), conditions without their times."""
    out = trim_child(obj, keep_spec=True)
    status = obj.get("status") or {}
    out["status"] = {k: trim_conditions(status[k]) if k == "conditions" and isinstance(status[k], list) else status[k]
                     for k in status_fields if k in status}
    return out


def keep_whole(obj: Mapping[str, Any]) -> dict:
    """For an informer that keeps objects as the API sent them (a TFJob's reconcile reads all of it)."""
    return dict(obj)


def trim_job(body: Mapping[str, Any]) -> dict:
    """A TFJob as the controller keeps it: no managedFields fieldsV1 and no last-applied copy of the
    whole job; the API version they say the job was written in (tfop.api.normalize.authored_version) stays.
    Entries of a subresource go (authored_version skips them): the first status write adds one, which
    would otherwise make the job (and the gang shape kept with it) anew at the next pass."""
    meta = dict(body.get("metadata") or {})
    meta["managedFields"] = [{k: entry[k] for k in ("manager", "apiVersion") if k in entry}
                             for entry in meta.get("managedFields") or [] if not entry.get("subresource")]
    annotations = meta.get("annotations")
    if annotations and LAST_APPLIED in annotations:
        try:
            version = json.loads(annotations[LAST_APPLIED]).get("apiVersion")
        except (ValueError, AttributeError):
            version = None
        meta["annotations"] = dict(annotations)
        meta["annotations"][LAST_APPLIED] = json.dumps({"apiVersion": version}) if version else "{}"
    return {**body, "metadata": meta}


# -- what explains a waiting gang: nodes, the pods bound to them, queues (tfop/runtime/capacity.py) --
def trim_identity(obj: Mapping[str, Any]) -> dict:
    meta = obj.get("metadata") or {}
    out = {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "deletionTimestamp") if meta.get(k)}
    for key in ("name", "namespace"):
        if key in out:
            out[key] = intern(out[key])
    return {"metadata": out}  # kind and apiVersion are the informer's own


def milli(value: Any, up: bool = False) -> int:
    """A quantity in thousandths of its unit, as tfop.core.room.NodeRoom counts (ints add fast,
    and cost less memory than Fractions); requests round up, room down."""
    scaled = (value if isinstance(value, Fraction) else parse_quantity(value)) * 1000
    return math.ceil(scaled) if up else math.floor(scaled)


def _quantities(values: Mapping[str, Any] | None) -> dict:
    out = {}
    for name, value in (values or {}).items():
        try:
            out[intern(name)] = milli(value)
        except ValueError:
            continue
    return out


def trim_node(node: Mapping[str, Any]) -> dict:
    """A node as far as room for a pod goes: allocatable, Ready, cordoned, the taints that keep pods off,
    its labels."""
    status, spec = node.get("status") or {}, node.get("spec") or {}
    condition: Mapping[str, Any] = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {})
    ready = condition.get("status") == "True"
    taints = tuple((intern(t.get("key") or ""), t.get("value") or "", intern(t.get("effect") or ""))
                   for t in spec.get("taints") or [] if t.get("effect") in ("NoSchedule", "NoExecute"))
    labels = _strings((node.get("metadata") or {}).get("labels"))  # for the pods' nodeSelector and affinity
    # Ready's status, since when and why say whether the node is lost (tfop/api/nodes.py); its heartbeat
    # times are not kept, so a heartbeat changes nothing kept.
    health = {"readyStatus": intern(str(condition.get("status") or "Unknown")),
              "readySince": condition.get("lastTransitionTime") or "",
              "readyMessage": str(condition.get("message") or "")[:MAX_NODE_MESSAGE]}
    return {**trim_identity(node), "allocatable": _quantities(status.get("allocatable")), "ready": ready,
            "unschedulable": bool(spec.get("unschedulable")), "taints": taints, "labels": labels, **health}


def trim_queue(queue: Mapping[str, Any]) -> dict:
    """A scheduler's queue (Volcano's): its name and state."""
    return {**trim_identity(queue), "state": intern(str((queue.get("status") or {}).get("state") or ""))}


def trim_workload(workload: Mapping[str, Any]) -> dict:
    """A Kueue Workload as far as why it waits goes: its LocalQueue, its conditions, where it was admitted
    (never its pod sets, which copy the job's templates)."""
    spec, status = workload.get("spec") or {}, workload.get("status") or {}
    kept: dict[str, Any] = {"conditions": [{k: c[k] for k in KEEP_CONDITION if k in c}
                                           for c in status.get("conditions") or []]}
    cluster_queue = (status.get("admission") or {}).get("clusterQueue")
    if cluster_queue:
        kept["admission"] = {"clusterQueue": cluster_queue}
    return {**trim_identity(workload), "metadata": trim_meta(workload.get("metadata") or {}),
            "spec": {"queueName": spec.get("queueName") or ""}, "status": kept}


def trim_local_queue(queue: Mapping[str, Any]) -> dict:
    """A Kueue LocalQueue: which ClusterQueue it feeds."""
    return {**trim_identity(queue), "spec": {"clusterQueue": (queue.get("spec") or {}).get("clusterQueue") or ""}}
