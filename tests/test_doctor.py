"""`tfop doctor`: pure tables for rule suggestions, scheduler evidence and the report;
run_checks against a fake cluster; and one real-apiserver test (marked `cluster`)."""
import datetime as dt

import pytest
import yaml

from operator_fixtures import deployment as _deployment, lease as _operator_lease, pod as _operator_pod
from tfop.gang import registry
from tfop.tools.doctor import checks as doctor
from tfop.tools.doctor import kueue
from tfop.tools.deploy import rbac

NOW = dt.datetime(2026, 1, 1, 12, 0, 0, tzinfo=dt.timezone.utc)


@pytest.mark.parametrize("denied,want", [
    ([], []),
    ([("scheduling.volcano.sh", "podgroups", "create"), ("scheduling.volcano.sh", "podgroups", "list")],
     [{"apiGroups": ["scheduling.volcano.sh"], "resources": ["podgroups"], "verbs": ["create", "list"]}]),
    # same group, same missing verbs: one rule
    ([("", "pods", "create"), ("", "services", "create")],
     [{"apiGroups": [""], "resources": ["pods", "services"], "verbs": ["create"]}]),
    # different verbs or groups: separate rules
    ([("", "pods", "create"), ("", "services", "get"), ("events.k8s.io", "events", "create")],
     [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]},
      {"apiGroups": [""], "resources": ["services"], "verbs": ["get"]},
      {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create"]}]),
    ([("kubeflow.org", "tfjobs/status", "patch")],
     [{"apiGroups": ["kubeflow.org"], "resources": ["tfjobs/status"], "verbs": ["patch"]}]),
])
def test_missing_rules(denied, want):
    rules = doctor.missing_rules(denied)
    assert rules == want
    assert set(rbac.permissions(rules)) == set(denied)  # grants exactly what was denied
    assert not rbac.has_wildcard(rules)


def test_rbac_fix_is_pasteable_yaml():
    denied = [("scheduling.volcano.sh", "podgroups", v) for v in ("get", "list")]
    text = doctor.rbac_fix(denied, "system:serviceaccount:kubeflow:tfop", ["tfop"])
    head, _, body = text.partition("\n")
    assert head == "add to the rules of ClusterRole tfop (bound to system:serviceaccount:kubeflow:tfop):"
    assert yaml.safe_load(body) == doctor.missing_rules(denied)
    text = doctor.rbac_fix(denied, "u", None)
    assert text.startswith("add to the rules of a ClusterRole bound to u:\n")
    text = doctor.rbac_fix(denied, "system:serviceaccount:vs:sched", [])
    role, binding = yaml.safe_load_all(text.partition("\n")[2])
    assert role["rules"] == doctor.missing_rules(denied) and role["metadata"]["name"] == "sched-extra"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "sched", "namespace": "vs"}]


def test_describe_denied():
    assert doctor.describe_denied([("scheduling.volcano.sh", "podgroups", "list"),
                                   ("scheduling.volcano.sh", "podgroups", "watch"),
                                   ("", "pods", "create")]) == \
        "denied: list, watch podgroups.scheduling.volcano.sh; create pods"


def _lease(name, renewed, duration=15, holder="h1", ns="kube-system"):
    return {"metadata": {"name": name, "namespace": ns},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": duration,
                     "renewTime": renewed.isoformat()}}


def _pod(name, ns="kube-system", labels=None, phase="Running", sa="sched"):
    return {"metadata": {"name": name, "namespace": ns, "labels": labels or {}},
            "spec": {"serviceAccountName": sa}, "status": {"phase": phase}}


FRESH = NOW - dt.timedelta(seconds=5)
STALE = NOW - dt.timedelta(minutes=10)


@pytest.mark.parametrize("sched,leases,pods,found,sa", [
    ("default-scheduler", [_lease("kube-scheduler", FRESH)], [], True, None),
    ("default-scheduler", [_lease("kube-scheduler", STALE)], [], False, None),
    ("default-scheduler", [_lease("kube-scheduler", FRESH, holder="")], [], False, None),
    ("default-scheduler", [], [_pod("kube-scheduler-node1", labels={"component": "kube-scheduler"})],
     True, ("kube-system", "sched")),
    ("volcano", [_lease("vc-scheduler", FRESH, ns="volcano-system")], [], True, None),
    ("volcano", [], [_pod("volcano-scheduler-7d9f-abcde", ns="volcano-system", sa="volcano-scheduler")],
     True, ("volcano-system", "volcano-scheduler")),
    ("volcano", [], [_pod("volcano-scheduler-7d9f", phase="Pending")], False, None),
    ("volcano", [], [_pod("volcanoish")], False, None),
    ("scheduler-plugins-scheduler", [],
     [_pod("x", ns="scheduler-plugins", labels={"app": "scheduler-plugins-scheduler"})],
     True, ("scheduler-plugins", "sched")),
    ("yunikorn", [_lease("kube-scheduler", FRESH)], [], False, None),
])
def test_find_scheduler(sched, leases, pods, found, sa):
    ev = doctor.find_scheduler(sched, leases, pods, NOW)
    assert (ev.found, ev.service_account) == (found, sa)


def _event(reporter, reason="FailedScheduling", ago=60, legacy=False):
    when = (NOW - dt.timedelta(seconds=ago)).isoformat()
    e = {"reason": reason, "involvedObject": {"namespace": "ml", "name": "job-worker-0"}}
    if legacy:  # written through core/v1: source.component + lastTimestamp
        return {**e, "source": {"component": reporter}, "lastTimestamp": when}
    return {**e, "reportingComponent": reporter, "source": {}, "eventTime": when}


@pytest.mark.parametrize("sched,events,found", [
    ("scheduler-plugins-scheduler", [_event("scheduler-plugins-scheduler")], True),
    ("scheduler-plugins-scheduler", [_event("scheduler-plugins-scheduler", "Scheduled", legacy=True)], True),
    ("scheduler-plugins-scheduler", [_event("scheduler-plugins-scheduler", ago=3600)], False),  # stale
    ("scheduler-plugins-scheduler", [_event("default-scheduler")], False),  # someone else
    ("scheduler-plugins-scheduler", [_event("scheduler-plugins-scheduler", "Pulled")], False),
    ("volcano", [{**_event("volcano", ago=5), "series": {"lastObservedTime": NOW.isoformat()}}], True),
])
def test_find_scheduler_by_events(sched, events, found):
    ev = doctor.find_scheduler(sched, [], [], NOW, events)
    assert ev.found is found
    if found:
        assert "for pod ml/job-worker-0" in ev.detail


def test_find_scheduler_says_what_it_looked_for():
    ev = doctor.find_scheduler("volcano", [], [], NOW)
    assert "'volcano'" in ev.detail and "vc-scheduler" in ev.detail and "volcano-scheduler" in ev.detail
    assert "Lease" in ev.detail and "Running pod" in ev.detail and "FailedScheduling" in ev.detail


@pytest.mark.parametrize("backend,override,want", [
    (None, None, "default-scheduler"),
    ("volcano", None, "volcano"),
    ("volcano", "my-vc", "my-vc"),
    ("coscheduling", None, "default-scheduler"),
])
def test_expected_scheduler(backend, override, want):
    b = registry.load_backend(backend)[0] if backend else None
    assert doctor.expected_scheduler(b, override) == want


@pytest.mark.parametrize("checks,code,last", [
    ([doctor.Check("a", True)], 0, "all checks passed"),
    ([doctor.Check("a", True), doctor.Check("b", None, "why")], 0, "all checks passed"),
    ([doctor.Check("a", True), doctor.Check("b", False, "d", "fix:\n- x")], 1, "1 ok, 1 failed"),
])
def test_report(checks, code, last):
    text = doctor.format_report(checks)
    assert text.splitlines()[-1] == last and doctor.exit_code(checks) == code
    for c in checks:
        assert {True: "[PASS] ", False: "[FAIL] ", None: "[SKIP] "}[c.ok] + c.title in text
    if code:
        assert "       - x" in text  # the fix is printed, indented, for failures


# ------------------------------------------------------------ run_checks, fake cluster
class FakeCluster:
    def __init__(self, crds=(), granted=(), leases=(), pods=(), bindings=None, args=None,
                 operator=None, served=(), keeps_scheduling_group=True):
        self.crds, self.granted = set(crds), {u: set(p) for u, p in dict(granted).items()}
        # served: (api_version, plural) discovery lists; keeps_scheduling_group: the gate, or an error
        self._served, self._keeps = set(served), keeps_scheduling_group
        self._leases, self._pods, self.bindings = list(leases), list(pods), bindings or {}
        self.jobs: list[dict] = []
        # Kueue: is its API served, its Configuration's text, its Workloads
        self.kueue = False
        self.kueue_text: str | None = None
        self.kueue_workloads: list[dict] = []
        # operator: (Deployment, its pods, its Lease); args: a Deployment with these args alone
        self.operator = operator or ((_deployment(args=args), [], None) if args is not None else (None, [], None))

    def crd_names(self):
        return self.crds

    def served(self, api_version, plural):
        return (api_version, plural) in self._served

    def gang_apis(self):
        keys = registry.served_keys()
        return self.crds | {key for key, api in keys.items() if api in self._served}

    def keeps_scheduling_group(self, namespace):
        if isinstance(self._keeps, Exception):
            raise self._keeps
        return self._keeps

    def allowed(self, user, groups, group, resource, verb):
        return (group, resource, verb) in self.granted.get(user, set())

    def leases(self):
        return self._leases

    def tfjobs(self):
        return self.jobs

    def serves_workloads(self):
        return self.kueue

    def kueue_config(self, namespace, name, key):
        assert (namespace, name, key) == ("kueue-system", "kueue-manager-config", "controller_manager_config.yaml")
        return self.kueue_text

    def workloads(self, namespace):
        return [w for w in self.kueue_workloads if w["metadata"]["namespace"] == namespace]

    def running_pods(self):
        return self._pods

    def scheduler_events(self):
        return []

    def roles_bound_to(self, ns, name):
        return self.bindings.get((ns, name), [])

    def deployment(self, ns, name):
        if self.operator[0] == "forbidden":
            raise RuntimeError("403 Forbidden")
        return self.operator[0]

    def pods(self, ns, selector):
        assert selector == "app.kubernetes.io/name=tfop"
        return self.operator[1]

    def lease(self, ns, name):
        assert (ns, name) == ("kubeflow", "tfop")
        return self.operator[2]


OP = "system:serviceaccount:kubeflow:tfop"
VC = "system:serviceaccount:volcano-system:volcano-scheduler"


def _healthy(volcano):
    return FakeCluster(
        crds={doctor.TFJOB_CRD, *volcano.crds},
        granted={OP: rbac.permissions(rbac.operator_rules(volcano)),
                 VC: {("scheduling.volcano.sh", "podgroups", v) for v in ("list", "watch")}},
        pods=[_pod("volcano-scheduler-1", ns="volcano-system", sa="volcano-scheduler")],
        bindings={("kubeflow", "tfop"): ["tfop"]},
        operator=(_deployment(), [_operator_pod("tfop-a"), _operator_pod("tfop-b")],
                  _operator_lease("tfop-a_0123456789", FRESH)))


def test_run_checks_healthy():
    volcano, _ = registry.load_backend("volcano")
    checks = doctor.run_checks(_healthy(volcano), volcano, now=NOW)
    assert doctor.exit_code(checks) == 0, doctor.format_report(checks)
    assert len(checks) == 1 + len(volcano.crds) + 2 + 3


def test_run_checks_finds_each_problem():
    volcano, _ = registry.load_backend("volcano")
    cluster = _healthy(volcano)
    cluster.crds.discard("queues.scheduling.volcano.sh")
    cluster.granted[OP].discard(("scheduling.volcano.sh", "podgroups", "create"))
    cluster.granted[VC].discard(("scheduling.volcano.sh", "podgroups", "watch"))
    checks = doctor.run_checks(cluster, volcano, now=NOW)
    failed = {c.title: c for c in checks if c.ok is False}
    assert set(failed) == {
        "CRD queues.scheduling.volcano.sh exists",
        "ServiceAccount kubeflow/tfop has every permission the operator uses",
        "ServiceAccount volcano-system/volcano-scheduler (the scheduler's) may list podgroups.scheduling.volcano.sh",
    }
    fix = failed["ServiceAccount kubeflow/tfop has every permission the operator uses"].fix
    assert yaml.safe_load(fix.partition("\n")[2]) == [
        {"apiGroups": ["scheduling.volcano.sh"], "resources": ["podgroups"], "verbs": ["create"]}]
    cluster._pods = []
    checks = doctor.run_checks(cluster, volcano, now=NOW)
    by_title = {c.title: c for c in checks}
    assert by_title["scheduler 'volcano' is running"].ok is False
    assert by_title["scheduler's ServiceAccount may list the gang's group objects"].ok is None


def test_run_checks_names_each_job_waiting_on_a_lost_node_and_the_command():
    volcano, _ = registry.load_backend("volcano")
    cluster = _healthy(volcano)
    waiting = {"node": "gpu-7", "pods": ["a-worker-1"], "reason": "NodeUnreachable", "since": "2026-11-30T10:00:00Z",
               "message": "... run `kubectl taint nodes gpu-7 node.kubernetes.io/out-of-service=nodeshutdown:NoExecute`"}
    done = {"conditions": [{"type": "Succeeded", "status": "True"}], "nodeLoss": waiting}
    cluster.jobs = [{"metadata": {"namespace": "ml", "name": "a"}, "status": {"nodeLoss": waiting}},
                    {"metadata": {"namespace": "ml", "name": "b"}, "status": {}},
                    {"metadata": {"namespace": "ml", "name": "c"}, "status": done}]
    checks = doctor.run_checks(cluster, volcano, now=NOW)
    failed = [c for c in checks if c.ok is False]
    assert [c.title for c in failed] == ["TFJob ml/a waits on lost node gpu-7"]
    assert "kubectl taint nodes gpu-7 node.kubernetes.io/out-of-service" in doctor.format_report(checks)
    assert doctor.exit_code(checks) == 1


def test_run_checks_without_gang():
    cluster = FakeCluster(crds={doctor.TFJOB_CRD},
                          granted={OP: rbac.permissions(rbac.operator_rules(None))},
                          leases=[_lease("kube-scheduler", FRESH)])
    checks = doctor.run_checks(cluster, None, now=NOW)
    assert [c.ok for c in checks] == [True, True, None, True]  # no Deployment: not installed yet, not a failure


@pytest.mark.parametrize("flag,args,want_backend", [
    ("volcano", None, "volcano"),
    (None, ["run", "--all-namespaces"], None),
    (None, ["run", "--enable-gang-scheduling", "--gang-scheduler-name", "kube-batch"], "kube-batch"),
    (None, ["run", "--enable-gang-scheduling"], "volcano"),
    (None, None, None),  # no Deployment: check without gang
])
def test_resolve(flag, args, want_backend):
    backend, _, why, _ = doctor.backend_to_check(FakeCluster(args=args), flag, None, "kubeflow", "tfop")
    assert (backend.name if backend else None) == want_backend, why


@pytest.mark.parametrize("operator,why", [
    ((None, [], None), "Deployment kubeflow/tfop not found; checking without gang scheduling"),
    (("forbidden", [], None), "Deployment kubeflow/tfop unreadable (403 Forbidden); checking without gang"),
])
def test_resolve_without_the_deployment_says_why(operator, why):
    target = doctor.backend_to_check(FakeCluster(operator=operator), None, None, "kubeflow", "tfop")
    assert target.backend is None and target.why.startswith(why), target.why


def test_resolve_auto_uses_cluster_crds():
    cluster = FakeCluster(crds={"podgroups.scheduling.x-k8s.io"})
    backend, _, _, _ = doctor.backend_to_check(cluster, "auto", None, "kubeflow", "tfop")
    assert backend.name == "scheduler-plugins"
    with pytest.raises(ValueError):
        doctor.backend_to_check(FakeCluster(), "auto", None, "kubeflow", "tfop")


# ------------------------------------------------------------ real apiserver
@pytest.mark.cluster
def test_doctor_on_real_cluster(request):
    """Against a real kube-apiserver with RBAC: doctor finds a missing CRD, a missing
    rule (via SubjectAccessReview) and a missing scheduler, and exits 1; the RBAC
    checks pass once the suggested rules are added."""
    try:  # fixtures of e2e/pytest_plugin.py; without that plugin, skip rather than error
        cluster = request.getfixturevalue("cluster")
        namespace = request.getfixturevalue("namespace")
    except pytest.FixtureLookupError:
        pytest.skip("needs the cluster/namespace fixtures of e2e/pytest_plugin.py")
    from click.testing import CliRunner
    from kubernetes import client, config

    from tfop.tools.doctor.command import doctor_cmd

    from tfop.kube.blocking import BlockingClient
    from tfop.kube.credentials import load_credentials

    api = config.new_client_from_config(config_file=str(cluster.kubeconfig))  # the test's own hands
    core, rbac_api = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    tfop_api = BlockingClient(load_credentials(str(cluster.kubeconfig))).__enter__()
    kube_batch, _ = registry.load_backend("kube-batch")  # its CRD is absent (the scenario installing it removes it)
    lacking = ("scheduling.incubator.k8s.io", "podgroups", "create")
    granted = [p for p in rbac.permissions(rbac.operator_rules(kube_batch)) if p != lacking]
    role = f"tfop-doctor-{namespace}"
    sched_role = f"tfop-doctor-sched-{namespace}"
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "op"}})
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "sched"}})
    rbac_api.create_cluster_role(rbac.cluster_role(doctor.missing_rules(granted), name=role))
    rbac_api.create_cluster_role_binding(rbac.cluster_role_binding(
        namespace=namespace, name=role, role=role, service_account_name="op"))
    try:
        checks = doctor.run_checks(doctor.Cluster(tfop_api), kube_batch, namespace, "op",
                                   scheduler_name=f"no-such-scheduler-{namespace}",
                                   scheduler_service_account=(namespace, "sched"))
        by_title = {c.title: c for c in checks}
        crd = by_title["CRD podgroups.scheduling.incubator.k8s.io exists"]
        assert crd.ok is False
        perms = by_title[f"ServiceAccount {namespace}/op has every permission the operator uses"]
        assert perms.ok is False
        assert perms.detail == "denied: create podgroups.scheduling.incubator.k8s.io"
        assert perms.fix.startswith(f"add to the rules of ClusterRole {role} ")
        assert yaml.safe_load(perms.fix.partition("\n")[2]) == doctor.missing_rules([lacking])
        sched = by_title[f"scheduler 'no-such-scheduler-{namespace}' is running"]
        assert sched.ok is False and "looked for a Lease named" in sched.detail
        s_title = (f"ServiceAccount {namespace}/sched (the scheduler's) may list "
                   "podgroups.scheduling.incubator.k8s.io")
        assert by_title[s_title].ok is False and "none" not in by_title[s_title].detail

        result = CliRunner().invoke(doctor_cmd, [
            "--kubeconfig", str(cluster.kubeconfig), "--namespace", namespace,
            "--service-account", "op", "--gang-scheduler-name", "kube-batch",
            "--scheduler-name", f"no-such-scheduler-{namespace}"])
        assert result.exit_code == 1, result.output
        assert "verbs: [create]" in result.output
        unknown = f"no-such-backend-{namespace}"  # upstream's meaning, said as a warning
        result = CliRunner().invoke(doctor_cmd, ["--kubeconfig", str(cluster.kubeconfig), "--namespace", namespace,
                                                 "--service-account", "op", "--gang-scheduler-name", unknown])
        assert f"\nWARNING: {registry.flag_warning(unknown)}\n" in result.output, result.output

        # Fix the RBAC ones exactly as suggested: those checks now pass.
        rbac_api.patch_cluster_role(role, [{"op": "add", "path": "/rules/-",
                                            "value": doctor.missing_rules([lacking])[0]}])
        rbac_api.create_cluster_role(rbac.cluster_role(
            [{"apiGroups": ["scheduling.incubator.k8s.io"], "resources": ["podgroups"],
              "verbs": ["list", "watch"]}], name=sched_role))
        rbac_api.create_cluster_role_binding(rbac.cluster_role_binding(
            namespace=namespace, name=sched_role, role=sched_role, service_account_name="sched"))
        checks = doctor.run_checks(doctor.Cluster(tfop_api), kube_batch, namespace, "op",
                                   scheduler_name=f"no-such-scheduler-{namespace}",
                                   scheduler_service_account=(namespace, "sched"))
        by_title = {c.title: c for c in checks}
        assert by_title[perms.title].ok is True
        assert by_title[s_title].ok is True
    finally:
        tfop_api.close()
        for name in (role, sched_role):
            for delete in (rbac_api.delete_cluster_role_binding, rbac_api.delete_cluster_role):
                try:
                    delete(name)
                except client.ApiException:
                    pass


@pytest.mark.parametrize("flag,args,warned,source", [
    ("volcan", None, "volcan", ""),
    (None, ["run", "--gang-scheduler-name", "my-sched"], "my-sched", "Deployment kubeflow/tfop args: "),
    ("volcano", None, None, ""),
    (None, ["run", "--enable-gang-scheduling"], None, ""),
    (None, ["run", "--all-namespaces"], None, ""),  # gang scheduling off
])
def test_resolve_warns_about_an_unknown_backend_name(flag, args, warned, source):
    target = doctor.backend_to_check(FakeCluster(args=args), flag, None, "kubeflow", "tfop")
    assert target.warning == (source + registry.flag_warning(warned) if warned else None)


# ------------------------------------------------------------ Kubernetes' own gang: its API and gate
NATIVE_API = ("scheduling.k8s.io/v1beta1", "podgroups")
SERVED_TITLE = "the apiserver serves podgroups in scheduling.k8s.io/v1beta1"
KEPT_TITLE = "pods keep spec.schedulingGroup (feature gate GenericWorkload on)"


@pytest.mark.parametrize("served,keeps,expected", [
    ((NATIVE_API,), True, [(SERVED_TITLE, True), (KEPT_TITLE, True)]),
    ((), True, [(SERVED_TITLE, False)]),
    ((NATIVE_API,), False, [(SERVED_TITLE, True), (KEPT_TITLE, False)]),
    ((NATIVE_API,), RuntimeError("403 Forbidden"), [(SERVED_TITLE, True), (KEPT_TITLE, None)]),
])
def test_kubernetes_backend_checks_its_api_and_gate(served, keeps, expected):
    backend, _ = registry.load_backend("kubernetes")
    checks = doctor.builtin_api_checks(FakeCluster(served=served, keeps_scheduling_group=keeps), backend, "kubeflow")
    assert [(c.title, c.ok) for c in checks] == expected
    for check in checks:
        if check.ok is False:
            assert "--feature-gates=GenericWorkload=true" in check.fix
            assert "--runtime-config=scheduling.k8s.io/v1beta1=true" in check.fix


@pytest.mark.parametrize("name", ["volcano", "kube-arbitrator", "coscheduling"])
def test_other_backends_have_no_builtin_api_checks(name):
    backend, _ = registry.load_backend(name)
    assert doctor.builtin_api_checks(FakeCluster(), backend, "kubeflow") == []


def test_auto_target_finds_kubernetes_own_gangs_by_discovery():
    cluster = FakeCluster(crds={doctor.TFJOB_CRD}, served=(NATIVE_API,), args=["--gang-scheduler-name", "auto"])
    backend, _, why, _ = doctor.backend_to_check(cluster, None, None, "kubeflow", "tfop")
    assert backend.name == "kubernetes" and "serves podgroups.scheduling.k8s.io/v1beta1" in why


# ------------------------------------------------------------ Kueue queueing TFJobs
def _labelled(name, age, uid, finished=False, queue="q"):
    meta = {"name": name, "namespace": "ml", "uid": uid, "labels": {"kueue.x-k8s.io/queue-name": queue} if queue else {},
            "creationTimestamp": (NOW - dt.timedelta(seconds=age)).strftime("%Y-%m-%dT%H:%M:%SZ")}
    conds = [{"type": "Succeeded", "status": "True"}] if finished else []
    return {"metadata": meta, "status": {"conditions": conds}}


def _workload_of(uid):
    return {"metadata": {"namespace": "ml", "name": f"tfjob-{uid}", "ownerReferences": [{"uid": uid}]}}


WITH_TFJOB = "integrations:\n  frameworks: [batch/job, kubeflow.org/tfjob]\n"
WITHOUT_TFJOB = "integrations:\n  frameworks: [batch/job]\n"


@pytest.mark.parametrize("text,listed", [
    (WITH_TFJOB, True), (WITHOUT_TFJOB, False),
    ("integrations: {}\n", None),  # Kueue's default list, which depends on its release
    (None, None), ("", None), ("{not yaml", None), ("- a list\n", None), ("integrations:\n  frameworks: x\n", None),
])
def test_kueue_configuration_read_for_the_tfjob_integration(text, listed):
    assert kueue.frameworks_listed(text) is listed


# (Kueue served, its Configuration, jobs, Workloads): (ok of the one Kueue check, or no check; words in it)
KUEUE_CASES = [
    (False, WITHOUT_TFJOB, [_labelled("a", 300, "u1")], [], None, ""),  # no Kueue: nothing to say
    (True, None, [], [], None, ""),  # nothing known either way
    (True, WITH_TFJOB, [], [], True, "lists it"),
    (True, WITHOUT_TFJOB, [], [], False, "lacks kubeflow.org/tfjob"),
    (True, None, [_labelled("a", 300, "u1")], [_workload_of("u1")], True,
     "each of 1 labelled TFJob(s) has its Workload"),
    (True, WITH_TFJOB, [_labelled("a", 300, "u1"), _labelled("b", 300, "u2")],
     [_workload_of("u1")], False, "1 TFJob(s) labelled kueue.x-k8s.io/queue-name have no Workload after 60 s"
     ", so Kueue does not hold them to its quota: ml/b"),
    # too young, finished or without a queue label: no Workload is awaited
    (True, None, [_labelled("a", 5, "u1"), _labelled("b", 300, "u2", finished=True),
                                      _labelled("c", 300, "u3", queue=None)], [], None, ""),
]


@pytest.mark.parametrize("served,text,jobs,workloads,ok,words", KUEUE_CASES)
def test_kueue_check_says_when_labelled_tfjobs_are_not_queued(served, text, jobs, workloads, ok, words):
    cluster = FakeCluster()
    cluster.kueue, cluster.kueue_text, cluster.jobs, cluster.kueue_workloads = served, text, jobs, workloads
    checks = kueue.kueue_checks(cluster, NOW)
    assert [c.ok for c in checks] == ([] if ok is None else [ok])
    if checks:
        assert words in checks[0].detail, checks[0].detail
        assert checks[0].title == kueue.TITLE
        assert ok or "add kubeflow.org/tfjob to integrations.frameworks" in checks[0].fix


def test_kueue_check_names_at_most_five_jobs():
    jobs = [_labelled(f"j{i}", 300, f"u{i}") for i in range(8)]
    (check,) = kueue.verdict(None, len(jobs), kueue.without_workload(jobs, []))
    assert "ml/j0, ml/j1, ml/j2, ml/j3, ml/j4 and 3 more" in check.detail
