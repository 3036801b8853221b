"""Generate the TFJob CustomResourceDefinition.

    python -m tfop.tools.deploy.crdgen            # writes crds/kubeflow.org_tfjobs.yaml
    python -m tfop.tools.deploy.crdgen --check    # exit 1 if the committed file is stale

The PodTemplateSpec schema is derived from the Kubernetes JSON schemas that
kubernetes-validate ships, turned into a structural schema. Everything else
is written out here.
"""
import copy
import json
import sys
from pathlib import Path

import kubernetes_validate
import yaml

from tfop.api import constants
from tfop.api.constants import GROUP, KIND, PLURAL, STORAGE_VERSION
from tfop.api.quantity import MAX_QUANTITY_LENGTH, QUANTITY_PATTERN
from tfop.api.rules import (
    MAX_JOB_REPLICAS,
    MAX_REPLICA_KEYS,
    MAX_REPLICAS_PER_TYPE,
    REPLICA_SPECS,
    ROOT,
    RUN_POLICY,
    TRANSITION_RULES,
    rules_at,
)

VERSIONS = constants.SERVED_VERSIONS  # storage first
K8S_SCHEMA_RELEASE = "v1.34.0"  # matches the Kubernetes release we target
# Lists, not the constants' tuples: yaml's SafeDumper writes no tuples.
REPLICA_TYPES = list(constants.REPLICA_TYPES)
CLEAN_POD_POLICIES = list(constants.CLEAN_POD_POLICIES)
RESTART_POLICIES = list(constants.RESTART_POLICIES)
SUCCESS_POLICIES = list(constants.SUCCESS_POLICIES)
OUTPUT = Path(__file__).resolve().parents[3] / "crds" / f"{GROUP}_{PLURAL}.yaml"

_DEFS_PREFIX = "io.k8s.apimachinery.pkg"
_QUANTITY = f"{_DEFS_PREFIX}.api.resource.Quantity"
_INT_OR_STRING = {f"{_DEFS_PREFIX}.util.intstr.IntOrString", _QUANTITY}
_OBJECT_META = f"{_DEFS_PREFIX}.apis.meta.v1.ObjectMeta"
_TIME = f"{_DEFS_PREFIX}.apis.meta.v1.Time"
# Keywords of the Kubernetes JSON schemas that a CRD schema may carry over.
_KEEP = ("description", "format", "enum", "required", "minimum", "maximum", "pattern",
         "minLength", "maxLength", "minItems", "maxItems",
         "x-kubernetes-list-type", "x-kubernetes-list-map-keys", "x-kubernetes-map-type")
# A quantity string admission accepts: none with an exponent or a length no real resource comes near
# (tfop.api.quantity), which the operator would pay for on every pass. A pattern, not a CEL rule: it
# costs nothing against the apiserver's CEL budget, which rules on every resources map of every
# container of a template would exceed.
QUANTITY = {"x-kubernetes-int-or-string": True, "pattern": QUANTITY_PATTERN, "maxLength": MAX_QUANTITY_LENGTH}
# A list-map key must be required or defaulted in a CRD; these are the API defaults.
_MAP_KEY_DEFAULTS = {"protocol": "TCP"}

# ---------------------------------------------------------------- CEL rules
def _validations(at: str) -> list[dict]:
    """x-kubernetes-validations of the schema node at this object path, from tfop.api.rules."""
    out = []
    for rule in rules_at(at):
        entry = {"rule": rule.cel, "message": rule.message}
        if rule.message_cel:
            entry["messageExpression"] = rule.message_cel
        if rule.field_path:
            entry["fieldPath"] = rule.field_path
        out.append(entry)
    return out + [dict(rule) for rule in TRANSITION_RULES.get(at, ())]


# --------------------------------------------- Kubernetes schema conversion
def k8s_schema_dir(release: str = K8S_SCHEMA_RELEASE) -> Path:
    """Directory of the shipped JSON schemas: the wanted release, else the oldest."""
    root = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
    wanted = root / f"{release}-local"
    if wanted.is_dir():
        return wanted

    def key(p):
        return tuple(int(x) for x in p.name[1:].split("-")[0].split("."))
    return min((p for p in root.glob("v*-local") if p.is_dir()), key=key)


def _k8s_defs():
    path = k8s_schema_dir() / "_definitions.json"
    return json.loads(path.read_text())["$defs"]


def _template_metadata(description=None):
    m = {"type": "object",
         "properties": {
             "labels": {"type": "object", "additionalProperties": {"type": "string"},
                        "description": "Labels of the objects made from this template."},
             "annotations": {"type": "object", "additionalProperties": {"type": "string"},
                             "description": "Annotations of the objects made from this template."},
         },
         # other ObjectMeta fields (name, creationTimestamp: null, ...) are kept as written
         "x-kubernetes-preserve-unknown-fields": True}
    if description:
        m["description"] = description
    return m


class _Converter:
    """Inlines $refs of the Kubernetes schemas into one structural schema."""

    def __init__(self, defs):
        self.defs = defs

    def ref(self, name, stack=()):
        return self.node({"$ref": f"#/$defs/{name}"}, stack)

    def node(self, src, stack):
        if "$ref" in src:
            name = src["$ref"].rsplit("/", 1)[-1]
            site_doc = src.get("description")
            if name == _QUANTITY:
                out = dict(QUANTITY)
            elif name in _INT_OR_STRING:
                out = {"x-kubernetes-int-or-string": True}
            elif name == _OBJECT_META:
                out = _template_metadata()
            elif name == _TIME:
                out = {"type": "string", "format": "date-time"}
            elif name in stack:  # recursive type: cannot inline, keep as is
                out = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
            else:
                out = self.node(self.defs[name], stack + (name,))
            out = dict(out)
            if site_doc:
                out["description"] = site_doc
            elif name in _INT_OR_STRING | {_TIME}:
                out.pop("description", None)
            return out

        out = {k: copy.deepcopy(src[k]) for k in _KEEP if k in src}
        types = src.get("type")
        if isinstance(types, list):
            types = [t for t in types if t != "null"]
            types = types[0] if len(types) == 1 else None
        if types:
            out["type"] = types
        if "items" in src:
            out["items"] = self.node(src["items"], stack)
        if "properties" in src:
            out["properties"] = {k: self.node(v, stack) for k, v in src["properties"].items()}
        if isinstance(src.get("additionalProperties"), dict):
            out["additionalProperties"] = self.node(src["additionalProperties"], stack)
        if out.get("type") == "object" and not {"properties", "additionalProperties"} & set(out):
            out["x-kubernetes-preserve-unknown-fields"] = True
        if out.get("x-kubernetes-list-type") == "map":
            self._default_map_keys(out)
        return out

    @staticmethod
    def _default_map_keys(array):
        item = array["items"]
        required = set(item.get("required", []))
        for key in array.get("x-kubernetes-list-map-keys", []):
            if key not in required and "default" not in item["properties"][key]:
                item["properties"][key]["default"] = _MAP_KEY_DEFAULTS.get(key, "")


# ------------------------------------------------------------ TFJob schema
def _d(description, schema):
    return {"description": description, **schema}


def _int32(description, minimum=0, maximum=None):
    s = {"type": "integer", "format": "int32", "description": description}
    if minimum is not None:
        s["minimum"] = minimum
    if maximum is not None:
        s["maximum"] = maximum
    return s


def _int64(description, minimum=0):
    return {"type": "integer", "format": "int64", "minimum": minimum, "description": description}


def _time(description):
    return {"type": "string", "format": "date-time", "description": description}


def _str(description, **extra):
    return {"type": "string", "description": description, **extra}


def _run_policy_fields(legacy=False):
    suffix = (" Deprecated location: use spec.runPolicy instead; honoured when "
              "spec.runPolicy does not set it.") if legacy else ""
    return {
        "cleanPodPolicy": _str(
            "Which pods to delete once the job has finished: None keeps all, Running deletes "
            "pods still running or pending (and their services), All deletes every pod." + suffix,
            enum=CLEAN_POD_POLICIES),
        "ttlSecondsAfterFinished": _int32(
            "Delete the TFJob itself this many seconds after it succeeded or failed. "
            "Unset: keep it." + suffix),
        "activeDeadlineSeconds": _int64(
            "Fail the job, deleting its pods, once it has been running this many seconds "
            "since status.startTime." + suffix),
        "backoffLimit": _int32(
            "Fail the job once its pods have been restarted this many times in total "
            "(container restarts plus ExitCode re-creations)." + suffix),
    }


def _scheduling_policy():
    return _d("Gang scheduling settings handed to the gang scheduler's group object.", {
        "type": "object",
        "properties": {
            "minAvailable": _int32("Pods that must be schedulable together before any starts. "
                                   "Default: all pods of the job."),
            "queue": _str("Scheduler queue to submit the gang to (Volcano, YuniKorn, ...)."),
            "minResources": _d("Resources the whole gang needs before it may start; default: "
                               "the sum over its pods.", {
                "type": "object",
                # Only bounded in length: what is no quantity is the gang's to report (tfop validate
                # with the gang flags), since an operator without gangs never reads it.
                "additionalProperties": {"x-kubernetes-int-or-string": True,
                                         "maxLength": MAX_QUANTITY_LENGTH}}),
            "priorityClass": _str("PriorityClass name for the gang."),
            "scheduleTimeoutSeconds": _int32("How long the gang may wait to be scheduled "
                                             "before the scheduler gives up on it."),
        }})


def _replica_spec(template):
    return _d("Pods of one replica type.", {
        "type": "object",
        "properties": {
            "replicas": _int32("Number of pods of this type. Unset means 1 (applied by the "
                               "operator, which can tell unset from 1). At most "
                               f"{MAX_REPLICAS_PER_TYPE}, and a job at most {MAX_JOB_REPLICAS} "
                               "in all: every pod's TF_CONFIG lists every pod.",
                               maximum=MAX_REPLICAS_PER_TYPE),
            "restartPolicy": _str("What to do when a pod of this type fails: Always and OnFailure "
                                  "let the kubelet restart containers; Never fails the job; "
                                  "ExitCode re-creates the pod for retryable exit codes (>= 128) "
                                  "and fails the job otherwise. Default Never.",
                                  enum=RESTART_POLICIES),
            "template": template,
        }})


def _replica_specs(template) -> dict:
    """spec.tfReplicaSpecs: a map from replica type, in any case, to its spec (as upstream's).

    The keys are checked by the rules of tfop.api.rules; every key's pod
    template is checked alike.
    """
    return _d("Replica types of the job, each mapped to its pods: Chief (or Master), PS, Worker "
              "and Evaluator, in any case (Worker, worker and WORKER are one type).", {
                  "type": "object",
                  "maxProperties": MAX_REPLICA_KEYS,
                  "additionalProperties": _replica_spec(template),
                  "x-kubernetes-validations": _validations(REPLICA_SPECS)})


def _replica_statuses(description: str, **more: dict) -> dict:
    """Per replica type, its pod counts and `more` properties."""
    status = _d("Pod counts of one replica type.", {
        "type": "object",
        "properties": {
            "active": _int32("Pods pending or running."),
            "succeeded": _int32("Pods that succeeded."),
            "failed": _int32("Pods that failed."),
            **more,
        }})
    return _d(description, {"type": "object", "additionalProperties": status})


def tfjob_schema(conv: _Converter) -> dict:
    template = conv.ref("io.k8s.api.core.v1.PodTemplateSpec")
    template["description"] = ("Pod template for this replica type. The operator adds its "
                               "labels, TF_CONFIG and the tfjob-port to the tensorflow container.")
    spec = _d("What to run: the replica types and how to run, clean up and schedule them.", {
        "type": "object",
        "required": ["tfReplicaSpecs"],
        "properties": {
            "tfReplicaSpecs": _replica_specs(template),
            "runPolicy": _d("Clean-up, limits and scheduling of the job.", {
                "type": "object",
                "x-kubernetes-validations": _validations(RUN_POLICY),
                # {} when unset (on create, and on read of a job stored without it): the Kubeflow SDK's
                # model requires it, and a job written as v1beta1 or v1alpha2 has none.
                "default": {},
                "properties": {
                    **_run_policy_fields(),
                    "suspend": {"type": "boolean", "description":
                                "Suspend the job: delete its pods, services and gang object "
                                "until set back to false (Kueue uses this)."},
                    "managedBy": _str("Controller that reconciles this job, fixed when it is created: "
                                      "unset, kubeflow.org/training-operator or tfop for tfop; tfop leaves "
                                      "jobs managed by another controller (kueue.x-k8s.io/multikueue) alone."),
                    "schedulingPolicy": _scheduling_policy(),
                }}),
            "successPolicy": _str("When the job succeeds without a Chief/Master: \"\" means "
                                  "when worker 0 succeeds, AllWorkers when all workers do.",
                                  enum=SUCCESS_POLICIES),
            "enableDynamicWorker": {"type": "boolean", "description":
                                    "Workers may come and go: TF_CONFIG uses the sparse form; a "
                                    "worker whose restartPolicy is Never may fail without failing "
                                    "the job (retryable failures restart as usual)."},
            **_run_policy_fields(legacy=True),
        }})
    return _d("TFJob runs a distributed TensorFlow training job.", {
        "type": "object",
        "required": ["spec"],
        "properties": {
            "apiVersion": _str("Version of this object's schema."),
            "kind": _str("Kind of this object: TFJob."),
            # declared so the name rule's fieldPath resolves; only these two are allowed here
            "metadata": {"type": "object", "properties": {"name": {"type": "string"},
                                                          "generateName": {"type": "string"}}},
            "spec": spec,
            "status": _status_schema(conv),
        },
        "x-kubernetes-validations": _validations(ROOT)})


def _waiting_schemas() -> dict:
    """status.nodeLoss, status.admission and status.gang: why a job waits (tfop/core/nodes.py, pending.py,
    admission.py)."""
    return {
        "nodeLoss": _d("While pods of the job are on nodes Kubernetes says are gone: which, and what "
                       "ends the wait.", {
            "type": "object",
            "properties": {
                "node": _str("The first lost node."),
                "nodes": {"type": "array", "items": {"type": "string"}, "maxItems": 10,
                          "description": "Every lost node the job's pods are on (at most 10)."},
                "pods": {"type": "array", "items": {"type": "string"}, "maxItems": 10,
                         "description": "The job's pods on them (at most 10)."},
                "reason": _str("NodeUnreachable, NodeNotReady, NodeDeleted, NodeOutOfService or "
                               "DeletionByTaintManager."),
                "message": _str("What the job waits for, and the command that ends the wait."),
                "since": _time("When tfop first saw these nodes lost."),
            }}),
        "admission": _d("While Kueue holds the job (suspended until its Workload is admitted): why.", {
            "type": "object",
            "properties": {
                "queue": _str("The job's Kueue LocalQueue."),
                "clusterQueue": _str("The ClusterQueue that LocalQueue feeds."),
                "reason": _str("tfop's cause: QueueQuotaExceeded or QueueNotFound."),
                "message": _str("Why Kueue holds the job, in one plain sentence."),
                "schedulerMessage": _str("Kueue's own words (the Workload's QuotaReserved condition)."),
                "since": _time("When tfop first saw Kueue hold the job."),
            }}),
        "gang": _d("Gang scheduling state, as reported by the gang scheduler.", {
            "type": "object",
            "properties": {
                "backend": _str("Gang scheduling backend in use, e.g. volcano."),
                "group": _str("Name of the scheduler's group object (PodGroup, ...)."),
                "phase": _str("Phase of the group as the scheduler reports it, while the gang waits."),
                "reason": _str("While the gang waits: tfop's cause when it knows one (InsufficientResources, "
                               "NoNodeFitsPod, QueueClosed, QueueNotFound, PriorityClassNotFound, AdmissionHeld), "
                               "else the scheduler's (e.g. Unschedulable, PodGroupPending)."),
                "message": _str("Why the gang waits, in one plain sentence computed by tfop from the "
                                "gang's needs, the nodes' free capacity, its queue and PriorityClass."),
                "schedulerMessage": _str("The scheduler's own words about the waiting gang, verbatim."),
                "since": _time("When the group entered this phase."),
            }}),
    }


def _status_schema(conv: _Converter) -> dict:
    label_selector = conv.ref(f"{_DEFS_PREFIX}.apis.meta.v1.LabelSelector")
    label_selector["description"] = "Label selector of these pods."

    replica_statuses = _replica_statuses(
        "Pod counts per replica type, keyed by replica type.", labelSelector=label_selector,
        selector=_str("Label selector of these pods, in string form."))
    legacy_statuses = _replica_statuses(
        "The counters of replicaStatuses, under the name read by kubeflow.org/v1alpha2 clients.")

    condition = _d("One observed state of the job.", {
        "type": "object",
        "required": ["type", "status"],
        "properties": {
            "type": _str("Created, Running, Restarting, Succeeded, Failed or Suspended."),
            "status": _str("True, False or Unknown."),
            "reason": _str("One-word CamelCase reason, e.g. TFJobRunning."),
            "message": _str("Human-readable details."),
            "lastUpdateTime": _time("When this condition was last updated."),
            "lastTransitionTime": _time("When status last changed."),
        }})

    return _d("Observed state of the job, written by the operator.", {
        "type": "object",
        "properties": {
            "conditions": _d("Conditions of the job, latest last.",
                             {"type": "array", "items": condition}),
            "replicaStatuses": replica_statuses,
            "tfReplicaStatuses": legacy_statuses,
            "startTime": _time("When the operator first saw the job running (reset on resume)."),
            "completionTime": _time("When the job succeeded or failed."),
            "lastReconcileTime": _time("When the operator last reconciled the job."),
            "ready": _str("Ready pods of all pods, e.g. 3/5."),
            "restartCount": _int32("Restarts for failures, counted against runPolicy.backoffLimit."),
            "disruptionCount": _int32(
                "Restarts the cluster caused (a pod's DisruptionTarget: preemption, eviction, the taint "
                "manager, PodGC, node pressure; a gang member on a lost node): never counted against "
                "backoffLimit; the job fails past `tfop run --max-disruptions-per-job`."),
            "containerRestarts": _int32(
                "Containers the kubelet restarted in place in the job's current pods (restartPolicy OnFailure "
                "or Always), counted against backoffLimit; neither the pod nor the gang restarts for them."),
            "succeededIndexes": _d(
                "Per replica type, the indices whose pod succeeded, as ranges (e.g. \"0-3,7\"): "
                "such a pod, deleted later (completed-pod garbage collection, eviction), is not "
                "created again. Cleared when the whole gang restarts and while suspended.",
                {"type": "object", "additionalProperties": {"type": "string"}}),
            "observedGeneration": _int64("metadata.generation last acted upon."),
            "message": _str("What to read now (the Message column): while the gang waits or Kueue holds "
                            "the job, why, in tfop's words (gang.message, admission.message); otherwise the "
                            "latest condition's message."),
            **_waiting_schemas(),
        }})


def strip_descriptions(node):
    """Copy of a schema without descriptions (the served-only versions, for size)."""
    if isinstance(node, dict):
        return {k: strip_descriptions(v) for k, v in node.items()
                if not (k == "description" and isinstance(v, str))}
    if isinstance(node, list):
        return [strip_descriptions(v) for v in node]
    return node


PRINTER_COLUMNS = [
    {"name": "State", "type": "string", "jsonPath": ".status.conditions[-1:].type",
     "description": "Type of the latest condition."},
    {"name": "Ready", "type": "string", "jsonPath": ".status.ready",
     "description": "Ready pods of all pods."},
    {"name": "Gang", "type": "string", "jsonPath": ".status.gang.phase", "priority": 1,
     "description": "Phase of a waiting gang's group as the scheduler reports it; empty once the gang is whole."},
    {"name": "Message", "type": "string", "jsonPath": ".status.message", "priority": 1,
     "description": "Why a waiting gang waits, else the latest condition's message."},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def build_crd() -> dict:
    schema = tfjob_schema(_Converter(_k8s_defs()))
    light = strip_descriptions(schema)
    versions = []
    for name in VERSIONS:
        storage = name == STORAGE_VERSION
        version = {
            "name": name,
            "served": True,
            "storage": storage,
            "schema": {"openAPIV3Schema": schema if storage else light},
            "subresources": {"status": {}},
            "additionalPrinterColumns": PRINTER_COLUMNS,
        }
        if not storage:
            version["deprecated"] = True
            version["deprecationWarning"] = (f"{GROUP}/{name} {KIND} is deprecated; "
                                             f"use {GROUP}/{STORAGE_VERSION}")
        versions.append(version)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}",
                     "labels": {"app.kubernetes.io/part-of": "tfop"}},
        "spec": {
            "group": GROUP,
            "names": {"kind": KIND, "listKind": f"{KIND}List", "plural": PLURAL,
                      "singular": KIND.lower(), "shortNames": ["tfjob"],
                      "categories": ["all", "kubeflow"]},
            "scope": "Namespaced",
            # every version reads the same stored object, hence identical schemas
            "conversion": {"strategy": "None"},
            "versions": versions,
        },
    }


class _Dumper(yaml.SafeDumper):
    """No anchors/aliases: kubectl and humans read the file."""

    def ignore_aliases(self, data):
        return True


def crd_file_text() -> str:
    """The text of crds/kubeflow.org_tfjobs.yaml: a header, then the CRD as YAML."""
    header = ("# Generated by `python -m tfop.tools.deploy.crdgen` "
              f"(Kubernetes {k8s_schema_dir().name} JSON schemas). Do not edit.\n")
    return header + yaml.dump(build_crd(), Dumper=_Dumper, sort_keys=False, width=100)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    text = crd_file_text()
    if "--check" in argv:
        if not OUTPUT.exists() or OUTPUT.read_text() != text:
            print(f"{OUTPUT} is stale: run python -m tfop.tools.deploy.crdgen", file=sys.stderr)
            return 1
        return 0
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    OUTPUT.write_text(text)
    print(f"wrote {OUTPUT} ({len(text)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
