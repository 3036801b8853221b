"""The TFJob spec rules: each is one CEL expression for the CRD and the same check in Python.

tfop.tools.deploy.crdgen writes every rule into the CRD's x-kubernetes-validations at
the node it names; tfop.tools.offline.crd evaluates the same table offline, so
`tfop validate` refuses what the apiserver refuses, in the same words.
normalize applies the predicates to its case-folded view of the replica types
(see canonical_type) with wording of its own.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tfop.api.constants import CHIEF_TYPES, REPLICA_TYPES
from tfop.api.validation import Problem

ROOT = ""  # the TFJob object itself
REPLICA_SPECS = "spec.tfReplicaSpecs"
RUN_POLICY = "spec.runPolicy"

# spec.tfReplicaSpecs is a map (as upstream's CRD has it): any key reaches the
# rules below, which read it case-insensitively (k.lowerAscii(), as the
# operator does in canonical_type), so WORKER, Ps and chief are replica types.
# A map's rules cannot point at the offending key (a rule's fieldPath is
# fixed), so the Python twins name it (culprits) where CEL names the map.
KNOWN_TYPES_LOWER = tuple(t.lower() for t in REPLICA_TYPES)
CHIEF_TYPES_LOWER = tuple(t.lower() for t in CHIEF_TYPES)
MAX_REPLICA_KEYS = len(REPLICA_TYPES)  # the map's maxProperties: a job has each type once at most

# Upper bounds on a job's size, so that no tenant's job can stop the operator or flood the cluster.
# Every pod's TF_CONFIG lists every pod's host (~50 bytes each), so a job of N pods stores ~50*N^2
# bytes in etcd: 5000 pods are ~1.25 GB, over half of etcd's default 2 GiB quota; 5000 is also the
# node count Kubernetes is tested at. A job needing more can never work on a shared cluster (and the
# biggest real TFJobs, a few thousand parameter-server workers, fit). The operator may be set lower
# (`tfop run --max-pods-per-job`).
MAX_REPLICAS_PER_TYPE = 5000  # the CRD's maximum of each replica type's replicas
MAX_JOB_REPLICAS = 5000  # the sum over the replica types (TOTAL_REPLICAS)

NAME_PATTERN = "^[a-z]([-a-z0-9]*[a-z0-9])?$"
NAME_MAX = 63
_NAME_RE = re.compile(NAME_PATTERN)

MSG_EMPTY = ("spec.tfReplicaSpecs must not be empty: add at least one replica type "
             "(Chief, Master, PS, Worker or Evaluator)")
MSG_UNKNOWN = ("spec.tfReplicaSpecs keys must be replica types Chief, Master, PS, Worker "
               "or Evaluator, in any case (e.g. Worker, worker or WORKER); rename or remove the others")
# The duplicate rule names the two keys (its messageExpression); this is what the apiserver says
# instead when that message cannot be made (a key holding a line break, or a message over 5 KiB).
MSG_DUPLICATE = ("spec.tfReplicaSpecs lists a replica type twice in different case "
                 "(e.g. Worker and worker); keep one")
MSG_ONE_CHIEF = "spec.tfReplicaSpecs may have only one Chief or Master; remove the other"
MSG_CHIEF_REPLICAS = "spec.tfReplicaSpecs.Chief/Master replicas must be 0 or 1"
MSG_EVALUATOR_REPLICAS = "spec.tfReplicaSpecs.Evaluator replicas must be 0 or 1"
MSG_TOTAL_REPLICAS = (f"spec.tfReplicaSpecs: a job may have at most {MAX_JOB_REPLICAS} pods, the sum of "
                      "replicas over its replica types (unset counts 1); lower replicas or split the job")
MSG_NAME = ("metadata.name must be a DNS-1035 label: at most 63 lower-case letters, "
            "digits or '-', starting with a letter and ending with a letter or digit")
# The apiserver's bounds on a messageExpression's result (k8s.io/apiserver/pkg/apis/cel).
MAX_EVALUATED_MESSAGE_BYTES = 5 * 1024


def duplicate_message(first: str, second: str) -> str:
    return (f"spec.tfReplicaSpecs lists a replica type twice, as {first} and {second} "
            "(keys that differ only in case); keep one")


def is_dns1035_label(name: Any) -> bool:
    return isinstance(name, str) and len(name) <= NAME_MAX and bool(_NAME_RE.match(name))


def canonical_type(key: Any) -> str | None:
    """The replica type a key names in any case (as the CRD's rules read keys, with lowerAscii)."""
    if not isinstance(key, str):  # YAML keys may be numbers, or null
        return None
    for rtype in REPLICA_TYPES:
        if lower_ascii(key) == rtype.lower():
            return rtype
    return None


Node = Mapping[str, Any]


@dataclass(frozen=True)
class Rule:
    at: tuple[str, ...]  # the schema nodes it is attached to, as object paths (ROOT: the TFJob)
    cel: str  # self is the node
    message: str
    holds: Callable[[Node], bool]  # the CEL expression in Python, on the same node
    field_path: str = ""  # where under the node the apiserver reports a failure
    # what under the node to name on failure, where Python can be sharper than CEL (each bad key)
    culprits: Callable[[Node], list[str]] | None = None
    message_cel: str = ""  # a messageExpression, when the message names what failed
    explain: Callable[[Node], str] | None = None  # its Python twin

    def problems(self, at: str, node: Node) -> list[Problem]:
        if self.holds(node):
            return []
        message = self.message
        if self.explain:
            message = _as_the_apiserver_shows(self.explain(node), self.message)
        under = [f".{k}" for k in self.culprits(node)] if self.culprits else [self.field_path]
        return [Problem(f"{at}{u}".lstrip("."), message) for u in under]


def _as_the_apiserver_shows(evaluated: str, fallback: str) -> str:
    """A messageExpression's result as reported: the static message when it is unfit to show."""
    evaluated = evaluated.strip()
    fit = (evaluated and "\n" not in evaluated
           and len(evaluated.encode("utf-8", "surrogatepass")) <= MAX_EVALUATED_MESSAGE_BYTES)
    return evaluated if fit else fallback


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def lower_ascii(key: Any) -> str:
    """CEL's lowerAscii(): only A-Z change (str.lower would fold other letters too)."""
    return str(key).translate(_ASCII_LOWER)


def _cel_list(values) -> str:
    return "[" + ", ".join(f"'{v}'" for v in values) + "]"


def _name_ok(obj: Node) -> bool:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return not isinstance(name, str) or is_dns1035_label(name)  # a non-string is the schema's to report


def _unknown_keys(specs: Node) -> list[str]:
    return [str(k) for k in specs if lower_ascii(k) not in KNOWN_TYPES_LOWER]


def _same_type_keys(specs: Node) -> list[str]:
    """Keys that another key equals but for case (WORKER and worker: both)."""
    keys = [str(k) for k in specs]
    return [k for k in keys if any(j != k and lower_ascii(j) == lower_ascii(k) for j in keys)]


def _duplicate_message(specs: Node) -> str:
    """The two smallest keys of one type (CEL's map order is random: min() makes it one message)."""
    same = _same_type_keys(specs)
    first = min(same)
    return duplicate_message(first, min(j for j in same if j != first and lower_ascii(j) == lower_ascii(first)))


def _same_type_cel(x: str, y: str) -> str:
    return f"{y} != {x} && {y}.lowerAscii() == {x}.lowerAscii()"


# The same in CEL, built from comprehensions over the map itself: a key they range over has a size
# the apiserver's cost estimate knows, while the result of min() has none (a message made from it is
# refused as too costly). k: the smallest key of a duplicate; j: the smallest other key of its type.
_IS_DUPLICATE = "self.exists(a, {})".format(_same_type_cel("{x}", "a"))
_FIRST = ("{dup_k} && !self.exists(m, {dup_m} && m < k)"
          .format(dup_k=_IS_DUPLICATE.format(x="k"), dup_m=_IS_DUPLICATE.format(x="m")))
_SECOND = f"{_same_type_cel('k', 'j')} && !self.exists(n, {_same_type_cel('k', 'n')} && n < j)"
_DUPLICATE_CEL = (f"self.map(k, {_FIRST}, self.map(j, {_SECOND}, "
                  + f"'{duplicate_message(chr(0), chr(1))}'".replace(chr(0), "' + k + '").replace(chr(1), "' + j + '")
                  + "))[0][0]")


def _replicas_above_one(types_lower) -> Callable[[Node], list[str]]:
    """The `<key>.replicas` of each key of these types asking for more than one replica."""
    def culprits(specs: Node) -> list[str]:
        return [f"{k}.replicas" for k, spec in specs.items()
                if lower_ascii(k) in types_lower and isinstance(spec, Mapping) and not _at_most_one_replica(spec)]
    return culprits


def _replicas_above_one_cel(types_lower) -> str:
    return (f"self.all(k, !(k.lowerAscii() in {_cel_list(types_lower)}) "
            "|| !has(self[k].replicas) || self[k].replicas <= 1)")


def _at_most_one_replica(spec: Node) -> bool:
    n = spec.get("replicas")
    return not isinstance(n, int) or isinstance(n, bool) or n <= 1  # a non-integer is the schema's


def _replica_count(spec: Any) -> int:
    """A replica type's pods as the operator counts them (unset: 1); a mistyped count is the schema's."""
    if not isinstance(spec, Mapping):
        return 0  # null: pruned by the apiserver, so CEL never sees it
    n = spec.get("replicas", 1)
    return n if isinstance(n, int) and not isinstance(n, bool) else 0


def _total_replicas(specs: Node) -> int:
    return sum(_replica_count(spec) for spec in specs.values())


NAME = Rule((ROOT,), f"!has(self.metadata.name) || (size(self.metadata.name) <= {NAME_MAX}"
            f" && self.metadata.name.matches('{NAME_PATTERN}'))", MSG_NAME, _name_ok,
            ".metadata.name")
NOT_EMPTY = Rule((REPLICA_SPECS,), "size(self) > 0", MSG_EMPTY, lambda specs: len(specs) > 0)
KNOWN_KEYS = Rule((REPLICA_SPECS,), f"self.all(k, k.lowerAscii() in {_cel_list(KNOWN_TYPES_LOWER)})",
                  MSG_UNKNOWN, lambda specs: not _unknown_keys(specs), culprits=_unknown_keys)
ONE_SPELLING = Rule((REPLICA_SPECS,), "self.all(k, !self.exists(j, j != k && j.lowerAscii() == k.lowerAscii()))",
                    MSG_DUPLICATE, lambda specs: not _same_type_keys(specs),
                    message_cel=_DUPLICATE_CEL, explain=_duplicate_message)
ONE_CHIEF = Rule((REPLICA_SPECS,), f"self.filter(k, k.lowerAscii() in {_cel_list(CHIEF_TYPES_LOWER)}).size() <= 1",
                 MSG_ONE_CHIEF, lambda specs: sum(lower_ascii(k) in CHIEF_TYPES_LOWER for k in specs) <= 1)
ONE_CHIEF_REPLICA = Rule((REPLICA_SPECS,), _replicas_above_one_cel(CHIEF_TYPES_LOWER), MSG_CHIEF_REPLICAS,
                         lambda specs: not _replicas_above_one(CHIEF_TYPES_LOWER)(specs),
                         culprits=_replicas_above_one(CHIEF_TYPES_LOWER))
ONE_EVALUATOR_REPLICA = Rule((REPLICA_SPECS,), _replicas_above_one_cel(("evaluator",)), MSG_EVALUATOR_REPLICAS,
                             lambda specs: not _replicas_above_one(("evaluator",))(specs),
                             culprits=_replicas_above_one(("evaluator",)))
TOTAL_REPLICAS = Rule((REPLICA_SPECS,),
                      f"self.map(k, has(self[k].replicas) ? self[k].replicas : 1).sum() <= {MAX_JOB_REPLICAS}",
                      MSG_TOTAL_REPLICAS, lambda specs: _total_replicas(specs) <= MAX_JOB_REPLICAS)

# In the order the checks report (and the CRD lists) them.
RULES = (NAME, NOT_EMPTY, KNOWN_KEYS, ONE_SPELLING, ONE_CHIEF, ONE_CHIEF_REPLICA,
         ONE_EVALUATOR_REPLICA, TOTAL_REPLICAS)


def rules_at(path: str) -> list[Rule]:
    """The rules attached to the schema node at this object path."""
    return [r for r in RULES if path in r.at]


# A rule of an update, judged against the stored object (oldSelf): `tfop validate`, which sees one
# object, has no twin. managedBy names the job's controller (OUR_MANAGERS in tfop/runtime/controller.py:
# tfop; kueue.x-k8s.io/multikueue: Kueue's MultiKueue); were it changed, two controllers could run one
# job, or none. Upstream's webhook makes it immutable; runPolicy is defaulted to {}, so the rule always runs.
MSG_MANAGED_BY = ("spec.runPolicy.managedBy cannot be set, changed or removed once the job exists: it names "
                  "the controller that runs the job; delete the job and create it with the value wanted")
MANAGED_BY_IMMUTABLE = {
    "rule": "has(self.managedBy) == has(oldSelf.managedBy) && (!has(self.managedBy) || "
            "self.managedBy == oldSelf.managedBy)",
    "message": MSG_MANAGED_BY, "fieldPath": ".managedBy"}
TRANSITION_RULES: Mapping[str, tuple[Mapping[str, str], ...]] = {RUN_POLICY: (MANAGED_BY_IMMUTABLE,)}
