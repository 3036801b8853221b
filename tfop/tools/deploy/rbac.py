"""The operator's RBAC: one source of truth for the rules, and the rbac/ files made from it.

Every rule names exact groups, resources and verbs; nothing here may ever be
`*` (the seeds' "grant * on *" advice is what this replaces). `python -m
tfop.tools.deploy.rbac [DIR]` rewrites rbac/; tests/test_rbac.py fails when the files on
disk differ from what this module generates, so the two cannot drift.
"""
from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from tfop.api.constants import GROUP, PLURAL
from tfop.core.settings import DEFAULT_DEPLOYMENT, DEFAULT_NAMESPACE, LEADER_ELECTION_LEASE
from tfop.gang.base import GangBackend
from tfop.gang.common import group_crd

NAME = DEFAULT_DEPLOYMENT  # ServiceAccount, ClusterRole and ClusterRoleBinding share it
RBAC_API = "rbac.authorization.k8s.io"
LABELS = {"app.kubernetes.io/name": "tfop", "app.kubernetes.io/part-of": "tfop"}

# What the operator itself calls, resource by resource (why in the comments). Nothing more:
# e2e/tests/test_rbac_exact.py runs the operator and fails on any grant it never used.
BASE_RULES: tuple[dict, ...] = (
    # The TFJob informer lists and watches them (kopf watches nothing and never writes a TFJob:
    # no finalizer, diff-base or progress). delete: ttlSecondsAfterFinished.
    {"apiGroups": [GROUP], "resources": [PLURAL], "verbs": ["delete", "list", "watch"]},
    # The status is merge-patched from the cached job; never read back, never replaced.
    {"apiGroups": [GROUP], "resources": [f"{PLURAL}/status"], "verbs": ["patch"]},
    # Children name the job as owner with blockOwnerDeletion: true. Where the admission plugin
    # OwnerReferencesPermissionEnforcement runs (OpenShift), setting it needs this, or every
    # create is refused.
    {"apiGroups": [GROUP], "resources": [f"{PLURAL}/finalizers"], "verbs": ["update"]},
    # Children: watched by label; created from the job (the dry-run pod probe is a create too);
    # deleted by restarts, suspend, scale-down, cleanPodPolicy and for an earlier job's orphans;
    # patched to adopt an orphan; read (get) only when a create answers 409, to say whose the name is.
    {"apiGroups": [""], "resources": ["pods", "services"],
     "verbs": ["create", "delete", "get", "list", "patch", "watch"]},
    # Events are posted as core v1 Events (kopf's own posting is off); a repeat is counted on the
    # Event posted before with a merge patch (tfop/kube/events.py).
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
)
# Leader election (`tfop run --leader-elect`, on in the deployed manifests): a Role in the
# operator's own namespace, never cluster-wide. create: the first replica makes the Lease (an
# authorizer cannot match a create by name); get and update: read and renew that one Lease.
LEADER_ELECTION_RULES: tuple[dict, ...] = (
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "update"],
     "resourceNames": [LEADER_ELECTION_LEASE]},
)
LEADER_ELECTION_ROLE = f"{NAME}-leader-election"

# With any gang backend: the PriorityClass informer (values order replica types in minResources), and
# the nodes' informer (their allocatable and taints say why a gang waits: tfop/runtime/capacity.py,
# with the pods bound to them, which the pods rule above lets it list cluster-wide).
GANG_RULES: tuple[dict, ...] = (
    {"apiGroups": ["scheduling.k8s.io"], "resources": ["priorityclasses"], "verbs": ["list", "watch"]},
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch"]},
)
CRD_API = "apiextensions.k8s.io"
# With any gang backend: Kueue's Workloads and LocalQueues, to say why Kueue holds a job it suspended
# (tfop/core/admission.py). Listed after the backend's own rules (the chart's order).
KUEUE_RULES: tuple[dict, ...] = (
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads", "localqueues"], "verbs": ["list", "watch"]},
)


def crd_rules(backend: GangBackend) -> tuple[dict, ...]:
    """What the operator reads of CRDs at start for this backend: `get` of its group object's CRD
    (logged when missing), `list` when `--gang-scheduler-name auto` may pick it by its CRDs (a
    built-in API is found by discovery, which needs no rule: under its backend's role `auto` cannot
    list CRDs, says so, and decides by discovery alone)."""
    verbs = ["get"] if group_crd(backend) is not None else []
    verbs += ["list"] if getattr(backend, "crds", ()) else []  # duck-typed backends may lack both
    return ({"apiGroups": [CRD_API], "resources": ["customresourcedefinitions"], "verbs": verbs},) if verbs else ()


# Resources without a namespace: a Role cannot grant them, so even an operator watching only some
# namespaces keeps these rules in a ClusterRole. Every other rule here (TFJobs, pods, services,
# events, a backend's group objects) is namespaced and goes to a Role per watched namespace.
CLUSTER_SCOPED: frozenset[tuple[str, str]] = frozenset({
    ("scheduling.k8s.io", "priorityclasses"), (CRD_API, "customresourcedefinitions"), ("", "nodes"),
    ("scheduling.volcano.sh", "queues")})


def is_cluster_scoped(rule: Mapping[str, Any]) -> bool:
    """Whether a rule grants cluster-scoped resources; a rule mixing both scopes is a ValueError
    (it could be put in neither kind of role whole)."""
    pairs = {(g, r) for g in rule.get("apiGroups", []) for r in rule.get("resources", [])}
    cluster = pairs & CLUSTER_SCOPED
    if cluster and cluster != pairs:
        raise ValueError(f"rule mixes cluster-scoped and namespaced resources: {dict(rule)}")
    return bool(cluster)


def split_by_scope(rules: Iterable[Mapping[str, Any]]) -> tuple[list[dict], list[dict]]:
    """(namespaced rules, cluster-scoped rules), each in the order given."""
    plain = [dict(r) for r in rules]
    return [r for r in plain if not is_cluster_scoped(r)], [r for r in plain if is_cluster_scoped(r)]


def canonical_rule(rule: Mapping[str, Any]) -> dict:
    """A rule as plain lists with sorted verbs, so equal rules compare equal."""
    out: dict[str, Any] = {
        "apiGroups": list(rule.get("apiGroups", [])),
        "resources": list(rule.get("resources", [])),
        "verbs": sorted(rule.get("verbs", [])),
    }
    if rule.get("resourceNames"):
        out["resourceNames"] = list(rule["resourceNames"])
    return out


def operator_rules(backend: GangBackend | None = None) -> list[dict]:
    """Every rule the operator needs: the base set, plus with a gang backend the gang rules, the CRD
    reads and the backend's own."""
    rules = [canonical_rule(r) for r in BASE_RULES]
    extra = (*GANG_RULES, *crd_rules(backend), *backend.rbac_rules, *KUEUE_RULES) if backend is not None else ()
    for rule in extra:
        rule = canonical_rule(rule)
        if rule not in rules:
            rules.append(rule)
    return rules


def permissions(rules: Iterable[Mapping[str, Any]]) -> list[tuple[str, str, str]]:
    """(group, resource, verb) triples a list of rules grants, in rule order, no duplicates."""
    seen: dict[tuple[str, str, str], None] = {}
    for rule in rules:
        for group in rule.get("apiGroups", []):
            for resource in rule.get("resources", []):
                for verb in sorted(rule.get("verbs", [])):
                    seen[(group, resource, verb)] = None
    return list(seen)


def has_wildcard(rules: Iterable[Mapping[str, Any]]) -> bool:
    return any("*" in rule.get(key, []) for rule in rules
               for key in ("apiGroups", "resources", "verbs"))


# ------------------------------------------------------------------ objects
def _meta(name: str, namespace: str | None = None) -> dict:
    meta: dict[str, Any] = {"name": name, "labels": dict(LABELS)}
    if namespace:
        meta["namespace"] = namespace
    return meta


def service_account(namespace: str = DEFAULT_NAMESPACE, name: str = NAME) -> dict:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(name, namespace)}


def cluster_role(rules: list[dict], name: str = NAME) -> dict:
    return {"apiVersion": f"{RBAC_API}/v1", "kind": "ClusterRole",
            "metadata": _meta(name), "rules": rules}


def cluster_role_binding(namespace: str = DEFAULT_NAMESPACE, name: str = NAME,
                         role: str = NAME, service_account_name: str = NAME) -> dict:
    return {"apiVersion": f"{RBAC_API}/v1", "kind": "ClusterRoleBinding",
            "metadata": _meta(name),
            "roleRef": {"apiGroup": RBAC_API, "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": service_account_name,
                          "namespace": namespace}]}


def role(rules: list[dict], namespace: str, name: str = NAME) -> dict:
    return {"apiVersion": f"{RBAC_API}/v1", "kind": "Role", "metadata": _meta(name, namespace), "rules": rules}


def role_binding(namespace: str, operator_namespace: str = DEFAULT_NAMESPACE, name: str = NAME,
                 role_name: str = NAME, service_account_name: str = NAME) -> dict:
    return {"apiVersion": f"{RBAC_API}/v1", "kind": "RoleBinding", "metadata": _meta(name, namespace),
            "roleRef": {"apiGroup": RBAC_API, "kind": "Role", "name": role_name},
            "subjects": [{"kind": "ServiceAccount", "name": service_account_name,
                          "namespace": operator_namespace}]}


def namespaced_role_objects(watch: Iterable[str], backend: GangBackend | None = None,
                            operator_namespace: str = DEFAULT_NAMESPACE) -> list[dict]:
    """A Role and RoleBinding `tfop` in each watched namespace, holding the namespaced part of
    operator_rules(backend): what an operator started with `--namespace` for each needs there."""
    rules, _cluster = split_by_scope(operator_rules(backend))
    objs: list[dict] = []
    for namespace in watch:
        objs += [role(rules, namespace), role_binding(namespace, operator_namespace)]
    return objs


def leader_election_objects(namespace: str = DEFAULT_NAMESPACE) -> list[dict]:
    """The Role and RoleBinding that let the operator's ServiceAccount hold its Lease."""
    role = {"apiVersion": f"{RBAC_API}/v1", "kind": "Role", "metadata": _meta(LEADER_ELECTION_ROLE, namespace),
            "rules": [canonical_rule(r) for r in LEADER_ELECTION_RULES]}
    binding = {"apiVersion": f"{RBAC_API}/v1", "kind": "RoleBinding",
               "metadata": _meta(LEADER_ELECTION_ROLE, namespace),
               "roleRef": {"apiGroup": RBAC_API, "kind": "Role", "name": LEADER_ELECTION_ROLE},
               "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": namespace}]}
    return [role, binding]


# ------------------------------------------------------------ rbac/ files
def _backends() -> list[GangBackend]:
    from tfop.gang import registry  # late: the registry imports every backend

    out: list[GangBackend] = []
    for name in registry.backend_names():
        try:
            backend, _ = registry.load_backend(name)
        except ValueError:
            continue  # a broken third-party plugin must not break rbac/ generation
        if backend.name not in {b.name for b in out}:
            out.append(backend)
    return out


def file_objects(backends: Iterable[GangBackend] | None = None) -> dict[str, list[dict]]:
    """rbac/ file name -> the objects in it.

    Each gang backend gets its own ClusterRole *and* ClusterRoleBinding
    rather than an aggregationRule: aggregation needs kube-controller-manager's
    aggregation controller, which also rewrites the aggregated role's `rules`
    and so would undo `tfop gang enable`. Separate bindings work on any
    cluster and `kubectl delete -f rbac/gang-X.yaml` revokes exactly them.
    """
    files: dict[str, list[dict]] = {
        "serviceaccount.yaml": [service_account()],
        "clusterrole.yaml": [cluster_role(operator_rules(None))],
        "clusterrolebinding.yaml": [cluster_role_binding()],
        "leader-election.yaml": leader_election_objects(),
    }
    for backend in _backends() if backends is None else backends:
        extra = [r for r in operator_rules(backend) if r not in operator_rules(None)]
        if not extra:
            continue  # a backend adding nothing to the base role gets no file
        name = f"{NAME}-gang-{backend.name}"
        files[f"gang-{backend.name}.yaml"] = [
            cluster_role(extra, name=name),
            cluster_role_binding(name=name, role=name),
        ]
    return files


KUSTOMIZATION = {
    "apiVersion": "kustomize.config.k8s.io/v1beta1",
    "kind": "Kustomization",
    # The kubeflow namespace is not listed: it is usually shared with other
    # Kubeflow components, and `kubectl delete -k rbac/` must not remove it.
    "resources": ["serviceaccount.yaml", "clusterrole.yaml", "clusterrolebinding.yaml", "leader-election.yaml"],
}

HEADER = ("# Generated by `python -m tfop.tools.deploy.rbac` from tfop/tools/deploy/rbac.py; do not edit by hand.\n"
          "# Base: kubectl apply -k rbac/   Gang backend X: kubectl apply -f rbac/gang-X.yaml\n")


def file_texts(backends: Iterable[GangBackend] | None = None) -> dict[str, str]:
    """rbac/ file name -> its YAML text, as written to disk."""
    out = {name: HEADER + yaml.safe_dump_all(objs, sort_keys=False)
           for name, objs in file_objects(backends).items()}
    out["kustomization.yaml"] = HEADER + yaml.safe_dump(KUSTOMIZATION, sort_keys=False)
    return out


def write_files(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in file_texts().items():
        path = directory / name
        path.write_text(text)
        written.append(path)
    return written


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[3] / "rbac"
    for p in write_files(target):
        print(p)
