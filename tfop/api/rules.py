"""The TFJob spec rules: each is one CEL expression for the CRD and the same check in Python.

tfop.tools.crdgen writes every rule into the CRD's x-kubernetes-validations at
the node it names; tfop.tools.crd evaluates the same table offline, so
`tfop validate` refuses what the apiserver refuses, in the same words.
normalize applies the predicates to its case-folded view of the replica types
(see canonical_type) with wording of its own.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from tfop.api.constants import CHIEF_TYPES, REPLICA_TYPES
from tfop.api.validation import Problem

ROOT = ""  # the TFJob object itself
REPLICA_SPECS = "spec.tfReplicaSpecs"

# spec.tfReplicaSpecs is an object, not a map, so that `kubectl explain` can
# step into spec.tfReplicaSpecs.Worker. It declares each replica type as
# written (Worker) and in lower case (worker), the two spellings in use; it
# keeps unknown keys (x-kubernetes-preserve-unknown-fields) so that a
# misspelt type is rejected by a rule rather than silently pruned. CEL cannot
# see unknown keys of an object (its declared type has only the declared
# properties), but size() of the object counts every key: so "every key is
# declared" is "size equals the number of declared keys present".
KNOWN_TYPES_LOWER = tuple(t.lower() for t in REPLICA_TYPES)
REPLICA_KEYS = REPLICA_TYPES + KNOWN_TYPES_LOWER  # the declared spellings
CHIEF_KEYS = tuple(k for t in CHIEF_TYPES for k in (t, t.lower()))
EVALUATOR_KEYS = ("Evaluator", "evaluator")

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
               "or Evaluator, spelt so or in lower case (chief, master, ps, worker, "
               "evaluator); rename or remove the others")
MSG_DUPLICATE = ("spec.tfReplicaSpecs lists a replica type twice in different case "
                 "(e.g. Worker and worker); keep one")
MSG_ONE_CHIEF = "spec.tfReplicaSpecs may have only one Chief or Master; remove the other"
MSG_CHIEF_REPLICAS = "spec.tfReplicaSpecs.Chief/Master replicas must be 0 or 1"
MSG_EVALUATOR_REPLICAS = "spec.tfReplicaSpecs.Evaluator replicas must be 0 or 1"
MSG_TOTAL_REPLICAS = (f"spec.tfReplicaSpecs: a job may have at most {MAX_JOB_REPLICAS} pods, the sum of "
                      "replicas over its replica types (unset counts 1); lower replicas or split the job")
MSG_NAME = ("metadata.name must be a DNS-1035 label: at most 63 lower-case letters, "
            "digits or '-', starting with a letter and ending with a letter or digit")


def is_dns1035_label(name: Any) -> bool:
    return isinstance(name, str) and len(name) <= NAME_MAX and bool(_NAME_RE.match(name))


def canonical_type(key: Any) -> str | None:
    """The replica type a key names in any case.

    Deliberately looser than the CRD (REPLICA_KEYS): jobs stored before the CRD
    had its rules may say WORKER, and the operator still runs them.
    """
    if not isinstance(key, str):  # YAML keys may be numbers, or null
        return None
    for rtype in REPLICA_TYPES:
        if key.lower() == rtype.lower():
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
    # keys to name on failure where Python can be sharper than CEL (each unknown key)
    culprits: Callable[[Node], list[str]] | None = None

    def problems(self, at: str, node: Node) -> list[Problem]:
        if self.holds(node):
            return []
        under = [f".{k}" for k in self.culprits(node)] if self.culprits else [self.field_path]
        return [Problem(f"{at}{u}".lstrip("."), self.message) for u in under]


def _present(keys) -> str:
    """CEL: how many of these declared keys self has."""
    return "[" + ", ".join(f"has(self.{k})" for k in keys) + "].filter(x, x).size()"


def _name_ok(obj: Node) -> bool:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return not isinstance(name, str) or is_dns1035_label(name)  # a non-string is the schema's to report


def _undeclared(specs: Node) -> list[str]:
    return [k for k in specs if k not in REPLICA_KEYS]


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
    return sum(_replica_count(specs.get(k)) for k in REPLICA_KEYS if k in specs)


def _total_cel() -> str:
    """CEL: the sum of replicas over the declared keys (unset replicas count 1, an absent type 0)."""
    terms = [f"(has(self.{k}) ? (has(self.{k}.replicas) ? self.{k}.replicas : 1) : 0)" for k in REPLICA_KEYS]
    return " + ".join(terms)


def _under_specs(keys) -> tuple[str, ...]:
    return tuple(f"{REPLICA_SPECS}.{k}" for k in keys)


_AT_MOST_ONE = "!has(self.replicas) || self.replicas <= 1"

NAME = Rule((ROOT,), f"!has(self.metadata.name) || (size(self.metadata.name) <= {NAME_MAX}"
            f" && self.metadata.name.matches('{NAME_PATTERN}'))", MSG_NAME, _name_ok,
            ".metadata.name")
NOT_EMPTY = Rule((REPLICA_SPECS,), "size(dyn(self)) > 0", MSG_EMPTY, lambda specs: len(specs) > 0)
DECLARED_KEYS = Rule((REPLICA_SPECS,), f"size(dyn(self)) == {_present(REPLICA_KEYS)}", MSG_UNKNOWN,
                     lambda specs: not _undeclared(specs), culprits=_undeclared)
ONE_SPELLING = Rule(
    (REPLICA_SPECS,), " && ".join(f"!(has(self.{t}) && has(self.{t.lower()}))" for t in REPLICA_TYPES),
    MSG_DUPLICATE, lambda specs: not any(t in specs and t.lower() in specs for t in REPLICA_TYPES))
ONE_CHIEF = Rule((REPLICA_SPECS,), f"{_present(CHIEF_KEYS)} <= 1", MSG_ONE_CHIEF,
                 lambda specs: sum(k in specs for k in CHIEF_KEYS) <= 1)
ONE_CHIEF_REPLICA = Rule(_under_specs(CHIEF_KEYS), _AT_MOST_ONE, MSG_CHIEF_REPLICAS,
                         _at_most_one_replica, ".replicas")
ONE_EVALUATOR_REPLICA = Rule(_under_specs(EVALUATOR_KEYS), _AT_MOST_ONE, MSG_EVALUATOR_REPLICAS,
                             _at_most_one_replica, ".replicas")

TOTAL_REPLICAS = Rule((REPLICA_SPECS,), f"{_total_cel()} <= {MAX_JOB_REPLICAS}", MSG_TOTAL_REPLICAS,
                      lambda specs: _total_replicas(specs) <= MAX_JOB_REPLICAS)

# In the order the checks report (and the CRD lists) them.
RULES = (NAME, NOT_EMPTY, DECLARED_KEYS, ONE_SPELLING, ONE_CHIEF, ONE_CHIEF_REPLICA,
         ONE_EVALUATOR_REPLICA, TOTAL_REPLICAS)


def rules_at(path: str) -> list[Rule]:
    """The rules attached to the schema node at this object path."""
    return [r for r in RULES if path in r.at]
