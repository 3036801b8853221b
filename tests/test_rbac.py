"""rbac/ is generated from tfop.tools.deploy.rbac; these tests make drift and wildcards impossible."""
import shutil
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from tfop.tools.deploy import rbac
from tfop.gang import registry

RBAC_DIR = Path(__file__).resolve().parent.parent / "rbac"


def test_rbac_dir_matches_generator():
    want = rbac.file_texts()
    have = {p.name: p.read_text() for p in RBAC_DIR.glob("*.yaml")}
    assert have == want, "rbac/ is stale: run `python -m tfop.tools.deploy.rbac`"


@pytest.mark.parametrize("name", sorted(rbac.file_texts()))
def test_rbac_files_valid(name):
    for obj in yaml.safe_load_all((RBAC_DIR / name).read_text()):
        if obj["kind"] == "Kustomization":
            continue
        kubernetes_validate.validate(obj, kubernetes_validate.utils.latest_version(), strict=True)
        assert not rbac.has_wildcard(obj.get("rules", []))


def test_base_rules_exact():
    perms = set(rbac.permissions(rbac.operator_rules(None)))
    assert ("kubeflow.org", "tfjobs", "delete") in perms
    assert ("kubeflow.org", "tfjobs/status", "patch") in perms
    assert ("", "pods", "create") in perms
    assert ("", "events", "create") in perms
    assert not {p for p in perms if p[0] == "coordination.k8s.io"}  # no leader election
    assert ("", "pods", "update") not in perms
    assert ("", "secrets", "get") not in perms
    assert not rbac.has_wildcard(rbac.operator_rules(None))


def test_base_rules_without_gang_reads():
    """Gang off, the operator reads no PriorityClass and no CRD; it never GETs or updates a TFJob."""
    perms = set(rbac.permissions(rbac.operator_rules(None)))
    assert ("kubeflow.org", "tfjobs/finalizers", "update") in perms  # blockOwnerDeletion on children
    assert not {p for p in perms if p[0] in ("scheduling.k8s.io", "apiextensions.k8s.io", "events.k8s.io")}
    assert {p for p in perms if p[2] == "update"} == {("kubeflow.org", "tfjobs/finalizers", "update")}
    assert not {p for p in perms if p[0] == "kubeflow.org" and p[2] == "get"}


# backend -> its CRD reads: get (the start-up check of its group's CRD, when it is one), list (`auto` may pick it by CRDs)
CRD_VERBS = {"volcano": ["get", "list"], "scheduler-plugins": ["get", "list"], "kube-batch": ["get", "list"],
             "kube-arbitrator": [], "koordinator": ["list"], "coscheduling": [], "yunikorn": [], "kubernetes": []}


@pytest.mark.parametrize("name", sorted(CRD_VERBS))
def test_gang_rules_follow_the_backend(name):
    backend, _ = registry.load_backend(name)
    perms = set(rbac.permissions(rbac.operator_rules(backend)))
    crd = sorted(v for g, r, v in perms if r == "customresourcedefinitions")
    assert crd == CRD_VERBS[name]
    assert {("scheduling.k8s.io", "priorityclasses", v) for v in ("list", "watch")} <= perms


@pytest.mark.parametrize("name", sorted(CRD_VERBS))
def test_reads_that_explain_a_waiting_gang_come_with_the_gang_only(name):
    """Nodes (and the pods bound to them, which the base pods rule lists), Kueue's Workloads and
    LocalQueues with every backend; Volcano's Queues with Volcano only. Only reads; none without a gang."""
    backend, _ = registry.load_backend(name)
    perms = set(rbac.permissions(rbac.operator_rules(backend)))
    reads = {("", "nodes"), ("kueue.x-k8s.io", "workloads"), ("kueue.x-k8s.io", "localqueues")}
    if name == "volcano":
        reads.add(("scheduling.volcano.sh", "queues"))
    assert {(g, r, v) for g, r in reads for v in ("list", "watch")} <= perms
    assert not {p for p in perms if (p[0], p[1]) in reads | {("scheduling.volcano.sh", "queues")}
                and p[2] not in ("list", "watch")}
    assert (("scheduling.volcano.sh", "queues", "list") in perms) == (name == "volcano")
    plain = set(rbac.permissions(rbac.operator_rules(None)))
    assert not {p for p in plain if (p[0], p[1]) in reads}
    _namespaced, cluster = rbac.split_by_scope(rbac.operator_rules(backend))
    assert {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch"]} in cluster


@pytest.mark.parametrize("name", registry.backend_names())
def test_backend_rules_added_once(name):
    backend, _ = registry.load_backend(name)
    rules = rbac.operator_rules(backend)
    assert rules[:len(rbac.BASE_RULES)] == rbac.operator_rules(None)
    assert len({str(r) for r in rules}) == len(rules)
    for rule in backend.rbac_rules:
        assert rbac.canonical_rule(rule) in rules
    assert not rbac.has_wildcard(rules)


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")
def test_kustomization_builds():
    out = subprocess.run(["kubectl", "kustomize", str(RBAC_DIR)], check=True,
                         capture_output=True, text=True).stdout
    kinds = sorted(o["kind"] for o in yaml.safe_load_all(out))
    assert kinds == ["ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ServiceAccount"]


@pytest.mark.parametrize("name", registry.backend_names())
def test_scope_split_keeps_every_rule_once(name):
    """Namespaced plus cluster-scoped is the whole rule set; only PriorityClasses and CRDs need a ClusterRole."""
    backend, _ = registry.load_backend(name)
    rules = rbac.operator_rules(backend)
    namespaced, cluster = rbac.split_by_scope(rules)
    assert sorted(map(str, namespaced + cluster)) == sorted(map(str, rules))
    assert {(g, r) for g, r, _v in rbac.permissions(cluster)} <= rbac.CLUSTER_SCOPED
    assert namespaced[:len(rbac.BASE_RULES)] == rbac.operator_rules(None)
    assert rbac.split_by_scope(rbac.operator_rules(None)) == (rbac.operator_rules(None), [])


def test_a_rule_mixing_scopes_is_refused():
    mixed = {"apiGroups": ["", "scheduling.k8s.io"], "resources": ["pods", "priorityclasses"], "verbs": ["list"]}
    with pytest.raises(ValueError, match="mixes"):
        rbac.split_by_scope([mixed])


def test_namespaced_role_objects():
    objs = rbac.namespaced_role_objects(["a", "b"], None, operator_namespace="ops")
    assert [(o["kind"], o["metadata"]["namespace"]) for o in objs] == [
        ("Role", "a"), ("RoleBinding", "a"), ("Role", "b"), ("RoleBinding", "b")]
    assert objs[0]["rules"] == rbac.operator_rules(None)
    assert objs[1]["subjects"] == [{"kind": "ServiceAccount", "name": "tfop", "namespace": "ops"}]
    for obj in objs:
        kubernetes_validate.validate(obj, kubernetes_validate.utils.latest_version(), strict=True)
