"""`tfop gang enable|disable`: pure tables, plus apply_gang against a fake API."""
from types import SimpleNamespace as NS

import pytest

from tfop.tools.deploy import manifests
from tfop.tools.deploy import rbac
from tfop.gang import registry
from tfop.tools.deploy.gang_toggle import (Target, apply_gang, describe_args, describe_rules, toggle_args,
                                    toggle_rules)
from tfop.tools.deploy.operator_args import gang_flags

ON = ["run", "--enable-gang-scheduling", "--gang-scheduler-name", "volcano", "--all-namespaces"]
OFF = ["run", "--all-namespaces"]


@pytest.mark.parametrize("args,enable,name,want", [
    (OFF, True, "volcano", ON),
    (ON, True, "volcano", ON),  # idempotent
    (ON, False, None, OFF),
    (OFF, False, None, OFF),  # idempotent
    ([], True, "volcano", ["--enable-gang-scheduling", "--gang-scheduler-name", "volcano"]),
    (OFF, True, None, ["run", "--enable-gang-scheduling", "--all-namespaces"]),
    # switching backend replaces the name in place
    (ON, True, "kube-batch",
     ["run", "--enable-gang-scheduling", "--gang-scheduler-name", "kube-batch", "--all-namespaces"]),
    # upstream spellings are understood and normalised
    (["run", "--enable-gang-scheduling=true", "--gang-scheduler-name=volcano", "-v"], True, "volcano",
     ["run", "--enable-gang-scheduling=true", "--gang-scheduler-name=volcano", "-v"]),
    (["run", "--enable-gang-scheduling=true", "--gang-scheduler-name=volcano", "-v"], False, None,
     ["run", "-v"]),
    (["run", "--enable-gang-scheduling=false", "--all-namespaces"], True, "volcano", ON),
    # a stray name without the enable flag is removed by disable
    (["run", "--gang-scheduler-name", "volcano"], False, None, ["run"]),
    # unrelated flags keep their order and values
    (["run", "--scheduler-name", "s", "--all-namespaces"], True, "coscheduling",
     ["run", "--enable-gang-scheduling", "--gang-scheduler-name", "coscheduling",
      "--scheduler-name", "s", "--all-namespaces"]),
])
def test_toggle_args(args, enable, name, want):
    got = toggle_args(args, enable, name)
    assert got == want
    assert toggle_args(got, enable, name) == got  # a second run changes nothing


@pytest.mark.parametrize("name", registry.backend_names())
def test_toggle_matches_manifests(name):
    """Enabling on a gang-off deployment yields exactly what `tfop manifests` renders with gang."""
    off = {o["kind"]: o for o in manifests.deploy_objects(False, include_crds=False)}
    on = {o["kind"]: o for o in manifests.deploy_objects(True, name, include_crds=False)}
    backend, _why = registry.backend_from_flags(True, name)
    off_args = off["Deployment"]["spec"]["template"]["spec"]["containers"][0]["args"]
    on_args = on["Deployment"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert toggle_args(off_args, True, name) == on_args
    assert toggle_args(on_args, False, None) == off_args
    rules_on = toggle_rules(off["ClusterRole"]["rules"], True, backend)
    assert rules_on == on["ClusterRole"]["rules"]
    assert toggle_rules(rules_on, True, backend) == rules_on
    assert toggle_rules(rules_on, False, backend) == off["ClusterRole"]["rules"]


def test_toggle_rules_never_removes_base_rules():
    backend = NS(rbac_rules=(rbac.BASE_RULES[2],))  # a backend repeating a base rule
    base = rbac.operator_rules(None)
    assert toggle_rules(base, False, backend) == base
    assert toggle_rules(base, True, None) == base


def test_toggle_rules_keeps_foreign_rules():
    volcano, _ = registry.load_backend("volcano")
    foreign = {"apiGroups": ["x.io"], "resources": ["things"], "verbs": ["get"]}
    rules = toggle_rules([foreign], True, volcano)
    assert rules[0] == foreign and len(rules) == 7  # + priorityclasses, nodes, CRDs, queues, podgroups, Kueue's
    assert toggle_rules(rules, False, volcano) == [foreign]


@pytest.mark.parametrize("args,want", [
    (OFF, (False, None)),
    (ON, (True, "volcano")),
    (["--enable-gang-scheduling=False"], (False, None)),
    (["--enable-gang-scheduling=1", "--gang-scheduler-name=kube-batch"], (True, "kube-batch")),
])
def test_gang_flags(args, want):
    assert gang_flags(args) == want


@pytest.mark.parametrize("old,new,want", [
    (OFF, ON, "args += --enable-gang-scheduling --gang-scheduler-name volcano"),
    (ON, OFF, "args -= --enable-gang-scheduling --gang-scheduler-name volcano"),
    (ON, ON, ""),
    (ON, toggle_args(ON, True, "yunikorn"),
     "args -= --gang-scheduler-name volcano; args += --gang-scheduler-name yunikorn"),
])
def test_describe_args(old, new, want):
    assert describe_args(old, new) == want


def test_describe_rules():
    volcano, _ = registry.load_backend("volcano")
    base = rbac.operator_rules(None)
    added = ["scheduling.k8s.io priorityclasses [list watch]", "core nodes [list watch]",
             "apiextensions.k8s.io customresourcedefinitions [get list]", "scheduling.volcano.sh queues [list watch]",
             "scheduling.volcano.sh podgroups [create delete get list patch watch]",
             "kueue.x-k8s.io workloads,localqueues [list watch]"]
    assert describe_rules(base, toggle_rules(base, True, volcano)) == [f"+ {r}" for r in added]
    assert describe_rules(toggle_rules(base, True, volcano), base) == [f"- {r}" for r in added]
    assert describe_rules(base, base) == []


# ------------------------------------------------------------ apply_gang, fake API
class FakeApi:
    """Just enough of tfop.kube.blocking.BlockingClient for apply_gang: a Deployment and a ClusterRole."""

    def __init__(self, args, rules):
        self.args, self.rules, self.patches = list(args), [dict(r) for r in rules], []

    def get(self, api_version, plural, namespace, name):
        if plural == "deployments":
            return {"spec": {"template": {"spec": {"containers": [{"name": "tfop", "args": list(self.args)}]}}}}
        assert plural == "clusterroles"
        return {"rules": [dict(r) for r in self.rules]}

    def json_patch(self, api_version, plural, namespace, name, body, field_manager):
        assert field_manager == "tfop-gang"
        if plural == "deployments":
            assert body[0] == {"op": "test", "path": "/spec/template/spec/containers/0/args",
                               "value": self.args}
            self.args = body[-1]["value"]
            self.patches.append(("deployment", body))
        else:
            assert body[0]["op"] == "test" and body[0]["value"] == self.rules
            self.rules = body[-1]["value"]
            self.patches.append(("clusterrole", body))


@pytest.fixture
def fake():
    return FakeApi(OFF, rbac.operator_rules(None))


def test_apply_enable_twice_then_disable(fake):
    out = apply_gang(fake, True, "volcano")
    assert out == [
        "Deployment kubeflow/tfop: args += --enable-gang-scheduling --gang-scheduler-name volcano",
        "ClusterRole tfop: + scheduling.k8s.io priorityclasses [list watch]",
        "ClusterRole tfop: + core nodes [list watch]",
        "ClusterRole tfop: + apiextensions.k8s.io customresourcedefinitions [get list]",
        "ClusterRole tfop: + scheduling.volcano.sh queues [list watch]",
        "ClusterRole tfop: + scheduling.volcano.sh podgroups [create delete get list patch watch]",
        "ClusterRole tfop: + kueue.x-k8s.io workloads,localqueues [list watch]",
    ]
    assert fake.args == ON and len(fake.patches) == 2
    again = apply_gang(fake, True, "volcano")
    assert len(fake.patches) == 2  # nothing patched the second time
    assert again[-1] == "nothing to do: gang scheduling already enabled (volcano)"
    out = apply_gang(fake, False, None)
    assert out[0] == "Deployment kubeflow/tfop: args -= --enable-gang-scheduling --gang-scheduler-name volcano"
    assert fake.args == OFF and fake.rules == rbac.operator_rules(None)
    assert apply_gang(fake, False, None)[-1] == "nothing to do: gang scheduling already disabled"


def test_apply_switch_backend(fake):
    apply_gang(fake, True, "volcano")
    out = apply_gang(fake, True, "kube-batch")
    assert "ClusterRole tfop: - scheduling.volcano.sh queues" in out[1]
    assert "ClusterRole tfop: - scheduling.volcano.sh podgroups" in out[2]
    assert "ClusterRole tfop: + scheduling.incubator.k8s.io podgroups" in out[3]
    kb, _ = registry.load_backend("kube-batch")
    assert fake.rules == rbac.operator_rules(kb)


def test_apply_dry_run(fake):
    out = apply_gang(fake, True, "volcano", Target(), dry_run=True)
    assert len(out) == 7 and fake.patches == [] and fake.args == OFF  # args, then 6 rules


@pytest.mark.cluster
def test_apply_gang_on_real_cluster(request):
    """enable, enable again (no change), disable, against a real apiserver."""
    try:  # fixtures of e2e/pytest_plugin.py; without that plugin, skip rather than error
        cluster = request.getfixturevalue("cluster")
        namespace = request.getfixturevalue("namespace")
    except pytest.FixtureLookupError:
        pytest.skip("needs the cluster/namespace fixtures of e2e/pytest_plugin.py")
    from kubernetes import client, config

    from tfop.kube.blocking import BlockingClient
    from tfop.kube.credentials import load_credentials

    api = config.new_client_from_config(config_file=str(cluster.kubeconfig))  # the test's own hands
    tfop_api = BlockingClient(load_credentials(str(cluster.kubeconfig))).__enter__()
    request.addfinalizer(tfop_api.close)
    objs = {o["kind"]: o for o in manifests.deploy_objects(namespace=namespace, include_crds=False)}
    role_name = f"tfop-toggle-{namespace}"
    objs["ClusterRole"]["metadata"]["name"] = role_name
    client.AppsV1Api(api).create_namespaced_deployment(namespace, objs["Deployment"])
    rbac_api = client.RbacAuthorizationV1Api(api)
    rbac_api.create_cluster_role(objs["ClusterRole"])
    target = Target(namespace=namespace, deployment="tfop", cluster_role=role_name)
    try:
        first = apply_gang(tfop_api, True, "volcano", target)
        assert first[0].endswith("args += --enable-gang-scheduling --gang-scheduler-name volcano")
        assert first[1:] == [f"ClusterRole {role_name}: + {rule}" for rule in (
            "scheduling.k8s.io priorityclasses [list watch]",
            "core nodes [list watch]",
            "apiextensions.k8s.io customresourcedefinitions [get list]",
            "scheduling.volcano.sh queues [list watch]",
            "scheduling.volcano.sh podgroups [create delete get list patch watch]",
            "kueue.x-k8s.io workloads,localqueues [list watch]")]
        assert apply_gang(tfop_api, True, "volcano", target)[-1].startswith("nothing to do")
        volcano, _ = registry.load_backend("volcano")
        rules = [api.sanitize_for_serialization(r) for r in rbac_api.read_cluster_role(role_name).rules]
        assert rules == rbac.operator_rules(volcano)
        apply_gang(tfop_api, False, None, target)
        dep = client.AppsV1Api(api).read_namespaced_deployment("tfop", namespace)
        assert dep.spec.template.spec.containers[0].args == OFF + ["--leader-elect"]  # the other flags stay
        rules = [api.sanitize_for_serialization(r) for r in rbac_api.read_cluster_role(role_name).rules]
        assert rules == rbac.operator_rules(None)
    finally:
        rbac_api.delete_cluster_role(role_name)
