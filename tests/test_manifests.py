"""`tfop manifests`: every variant valid under kubernetes-validate strict, rules exact."""
import json

import kubernetes_validate
import pytest
import yaml

from tfop.tools.deploy import manifests
from tfop.tools.deploy import rbac
from tfop.gang import registry

VERSION = kubernetes_validate.utils.latest_version()
VARIANTS = [(False, None)] + [(True, n) for n in registry.backend_names()] + [
    (True, None), (True, "pdb"), (True, "my-coscheduler")]
NAMESPACED = [(False, None), (True, "volcano"), (True, "coscheduling"), (True, "kube-arbitrator")]


def _by_kind(objs):
    return {o["kind"]: o for o in objs}


@pytest.fixture(scope="module")
def rendered():
    return {v: manifests.deploy_objects(*v) for v in VARIANTS}


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: str(v))
def test_valid_strict(rendered, variant):
    for obj in rendered[variant]:
        kubernetes_validate.validate(obj, VERSION, strict=True)


@pytest.mark.parametrize("variant", NAMESPACED, ids=str)
def test_namespaced_valid_strict(variant):
    for obj in manifests.deploy_objects(*variant, include_crds=False, create_namespace=True,
                                        watch_namespaces=["team-a", "team-b"]):
        kubernetes_validate.validate(obj, VERSION, strict=True)


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: str(v))
def test_apply_order_and_role(rendered, variant):
    objs = rendered[variant]
    kinds = [o["kind"] for o in objs]
    assert kinds == sorted(kinds, key=manifests.KIND_ORDER.index)
    assert kinds[0] == "CustomResourceDefinition" and kinds[-1] == "Deployment"
    role = _by_kind(objs)["ClusterRole"]
    assert not rbac.has_wildcard(role["rules"])
    enable, name = variant
    backend, _why = registry.backend_from_flags(enable, name)
    assert role["rules"] == rbac.operator_rules(backend)


def test_gang_rules_only_with_gang(rendered):
    off = _by_kind(rendered[(False, None)])["ClusterRole"]["rules"]
    assert off == rbac.operator_rules(None)
    on = _by_kind(rendered[(True, "volcano")])["ClusterRole"]["rules"]
    assert {"apiGroups": ["scheduling.volcano.sh"], "resources": ["podgroups"],
            "verbs": ["create", "delete", "get", "list", "patch", "watch"]} in on
    assert "scheduling.volcano.sh" not in json.dumps(off)


@pytest.mark.parametrize("variant,args", [
    ((False, None, None), ["run", "--all-namespaces", "--leader-elect"]),
    ((True, "volcano", None),
     ["run", "--enable-gang-scheduling", "--gang-scheduler-name", "volcano", "--all-namespaces", "--leader-elect"]),
    ((True, None, None), ["run", "--enable-gang-scheduling", "--all-namespaces", "--leader-elect"]),
    ((True, "coscheduling", "default-scheduler"),
     ["run", "--enable-gang-scheduling", "--gang-scheduler-name", "coscheduling",
      "--scheduler-name", "default-scheduler", "--all-namespaces", "--leader-elect"]),
])
def test_deployment(variant, args):
    dep = _by_kind(manifests.deploy_objects(*variant, namespace="ml", image="r/tfop:1"))["Deployment"]
    assert dep["metadata"]["namespace"] == "ml"
    # Two replicas under leader election; a rollout adds the new one before the old one goes.
    assert dep["spec"]["replicas"] == 2
    assert dep["spec"]["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}
    pod = dep["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert c["args"] == args and c["image"] == "r/tfop:1"
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert [(p["name"], p["containerPort"]) for p in c["ports"]] == [("health", 8081), ("metrics", 8080)]
    assert set(c["resources"]) == {"requests", "limits"}
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] and not sc["allowPrivilegeEscalation"]
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert pod["securityContext"]["runAsNonRoot"] and isinstance(pod["securityContext"]["runAsUser"], int)
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}


def test_namespace_only_when_asked():
    """The namespace is usually shared by all of Kubeflow: `kubectl delete -f` of the output must not take it."""
    assert "Namespace" not in _by_kind(manifests.deploy_objects())
    objs = manifests.deploy_objects(namespace="ml", create_namespace=True)
    assert [o for o in objs if o["kind"] == "Namespace"] == [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}}]
    assert [o["kind"] for o in objs][:2] == ["CustomResourceDefinition", "Namespace"]


def test_namespace_everywhere():
    objs = _by_kind(manifests.deploy_objects(namespace="ml"))
    assert objs["ServiceAccount"]["metadata"]["namespace"] == "ml"
    assert objs["ClusterRoleBinding"]["subjects"][0]["namespace"] == "ml"
    # The Lease is namespaced: the leader election's rights are too, in the operator's namespace only.
    assert objs["Role"]["metadata"]["namespace"] == objs["RoleBinding"]["metadata"]["namespace"] == "ml"
    assert objs["RoleBinding"]["subjects"] == [{"kind": "ServiceAccount", "name": "tfop", "namespace": "ml"}]
    assert {r["apiGroups"][0] for r in objs["Role"]["rules"]} == {"coordination.k8s.io"}


@pytest.mark.parametrize("variant", NAMESPACED, ids=str)
def test_namespaced_install(variant):
    """Watched namespaces get Roles with the namespaced rules; only cluster-scoped reads stay cluster-wide."""
    backend, _why = registry.backend_from_flags(*variant)
    objs = manifests.deploy_objects(*variant, namespace="ops", watch_namespaces=["team-a", "team-b", "team-a"])
    roles = {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in objs if o["kind"] == "Role"}
    namespaced, cluster = rbac.split_by_scope(rbac.operator_rules(backend))
    for ns in ("team-a", "team-b"):
        assert roles[(ns, "tfop")]["rules"] == namespaced
        binding = next(o for o in objs if o["kind"] == "RoleBinding" and o["metadata"]["namespace"] == ns)
        assert binding["roleRef"]["name"] == "tfop"
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "tfop", "namespace": "ops"}]
    assert set(roles) == {("team-a", "tfop"), ("team-b", "tfop"), ("ops", "tfop-leader-election")}
    by_kind = _by_kind(objs)
    if cluster:
        assert by_kind["ClusterRole"]["rules"] == cluster
        assert by_kind["ClusterRoleBinding"]["subjects"][0]["namespace"] == "ops"
    else:
        assert "ClusterRole" not in by_kind and "ClusterRoleBinding" not in by_kind
    args = by_kind["Deployment"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--all-namespaces" not in args
    assert args[-5:] == ["--namespace", "team-a", "--namespace", "team-b", "--leader-elect"]


def test_namespaced_rules_split_by_scope():
    volcano, _ = registry.load_backend("volcano")
    namespaced, cluster = rbac.split_by_scope(rbac.operator_rules(volcano))
    assert [r["resources"] for r in cluster] == [["priorityclasses"], ["nodes"], ["customresourcedefinitions"],
                                                  ["queues"]]
    assert namespaced == rbac.operator_rules(None) + [rbac.canonical_rule(r) for r in (
        *volcano.rbac_rules, *rbac.KUEUE_RULES) if not rbac.is_cluster_scoped(r)]


@pytest.mark.parametrize("bad", ["Team", "a_b", "-a", "a" * 64, ""])
def test_watch_namespace_must_be_a_name(bad):
    with pytest.raises(ValueError, match="not a namespace name"):
        manifests.deploy_objects(watch_namespaces=[bad])


def test_cli_namespace_flags():
    from click.testing import CliRunner

    from tfop.tools.cli import cli

    result = CliRunner().invoke(cli, ["manifests", "--create-namespace", "--watch-namespace", "a",
                                      "--gang-scheduler-name", "volcano", "-o", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["items"] == manifests.deploy_objects(True, "volcano", create_namespace=True,
                                                                          watch_namespaces=["a"])
    refused = CliRunner().invoke(cli, ["manifests", "--watch-namespace", "A"])
    assert refused.exit_code == 2 and "not a namespace name" in refused.output


def test_auto_refused_offline():
    with pytest.raises(ValueError, match="auto"):
        manifests.deploy_objects(True, "auto")


def test_dump_roundtrip_and_server_side_note():
    objs = manifests.deploy_objects()
    text = manifests.dump(objs, "yaml")
    assert "--server-side" in text.splitlines()[0]
    assert list(yaml.safe_load_all(text)) == objs
    assert json.loads(manifests.dump(objs, "json"))["items"] == objs


def _cluster_fixtures(request):
    try:  # fixtures of e2e/pytest_plugin.py; without that plugin, skip rather than error
        return request.getfixturevalue("cluster"), request.getfixturevalue("namespace")
    except pytest.FixtureLookupError:
        pytest.skip("needs the cluster/namespace fixtures of e2e/pytest_plugin.py")


@pytest.mark.cluster
@pytest.mark.parametrize("variant", [(False, None), (True, "volcano")], ids=str)
def test_server_side_apply_accepts_everything(request, tmp_path, variant):
    """The real apiserver accepts the whole output in one server-side apply (dry run:
    nothing persists, so the shared CRD and cluster roles are untouched)."""
    import shutil
    import subprocess

    cluster, namespace = _cluster_fixtures(request)
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl not installed")
    path = tmp_path / "tfop.yaml"
    path.write_text(manifests.dump(manifests.deploy_objects(*variant, namespace=namespace)))
    out = subprocess.run(["kubectl", "--kubeconfig", str(cluster.kubeconfig), "apply",
                          # force: the shared cluster may hold a `tfop` role set by other tests
                          "--server-side", "--force-conflicts", "--dry-run=server", "-f", str(path)],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("serverside-applied") == len(manifests.deploy_objects(*variant))
