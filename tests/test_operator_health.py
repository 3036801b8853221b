"""`tfop doctor` on the installed operator (tfop.tools.doctor.operator_health): plain tables."""
import datetime as dt

import pytest

from operator_fixtures import deployment, lease, pod
from tfop.tools.deploy import operator_args
from tfop.tools.doctor import operator_health

NOW = dt.datetime(2026, 1, 1, 12, 0, 0, tzinfo=dt.timezone.utc)
FRESH = NOW - dt.timedelta(seconds=4)
TWO = [pod("tfop-a"), pod("tfop-b")]


@pytest.mark.parametrize("dep,pods,ok,said", [
    (None, [], None, "no Deployment kubeflow/tfop: the operator is not installed here"),
    (deployment(), TWO, True, "2 of 2 Ready (pods: tfop-a, tfop-b)"),
    (deployment(ready=1), [pod("tfop-a"), pod("tfop-b", False, ("ImagePullBackOff", "pull access denied"))],
     False, "pod tfop-b is not Ready: ImagePullBackOff: pull access denied"),
    (deployment(ready=1), [pod("tfop-a"), pod("tfop-b", False)],
     False, "pod tfop-b is not Ready: phase Pending, readiness probe not passing (caches not synced yet?)"),
    (deployment(ready=1), [pod("tfop-a"), pod("tfop-b", False, unschedulable="0/3 nodes are available")],
     False, "pod tfop-b is not Ready: Unschedulable: 0/3 nodes are available"),
    (deployment(generation=2), TWO, False, "rolling out: 2 of 2 replicas run the current template"),
    (deployment(updated=1), TWO, False, "rolling out: 1 of 2 replicas run the current template"),
    (deployment(), [pod("tfop-a"), pod("tfop-b", oom_restarts=3)], False,
     "pod tfop-b restarted 3 time(s), last killed for memory (OOMKilled): raise resources.limits.memory "
     "(now 512Mi)"),
    (deployment(replicas=0), [], False, "scaled to 0 replicas: no operator runs"),
    # a pod on its way out is neither counted nor blamed
    (deployment(), TWO + [pod("tfop-old", False, deleting=True)], True, "2 of 2 Ready (pods: tfop-a, tfop-b)"),
])
def test_replicas_check(dep, pods, ok, said):
    check = operator_health.replicas_check("kubeflow", "tfop", dep, pods)
    assert check.ok is ok and said in check.detail, check
    assert check.title == "Deployment kubeflow/tfop has every replica Ready"
    if ok is False and dep["spec"]["replicas"]:
        assert check.fix.startswith("kubectl -n kubeflow describe pods -l app.kubernetes.io/name=tfop")


@pytest.mark.parametrize("dep,lease_,ok,said", [
    (deployment(), lease("tfop-a_0123456789", FRESH), True, "held by pod tfop-a, renewed 4s ago"),
    (deployment(), None, False, "no Lease kubeflow/tfop: no replica has led yet"),
    (deployment(), lease("", FRESH), False, "held by nobody"),
    (deployment(), lease("tfop-a_0123456789", NOW - dt.timedelta(minutes=5)), False,
     "held by tfop-a_0123456789, renewed 300s ago, longer than its 15s: its holder stopped renewing"),
    (deployment(), lease("laptop_0123456789", FRESH), False,
     "held by laptop_0123456789, not by a pod of Deployment kubeflow/tfop (tfop-a, tfop-b): another tfop"),
    (deployment(args=["run"], replicas=1), None, True, "one replica, leader election off"),
    (deployment(args=["run"]), None, False, "2 replicas run without --leader-elect"),
    (deployment(args=["run", "--leader-elect", "--no-leader-elect"]), None, False, "without --leader-elect"),
])
def test_leader_check(dep, lease_, ok, said):
    check = operator_health.leader_check("kubeflow", "tfop", dep, TWO, lease_, "tfop", NOW)
    assert check.ok is ok and said in check.detail, check
    assert check.title == "one replica of kubeflow/tfop leads (Lease kubeflow/tfop)"


def test_the_lease_is_looked_for_where_the_replicas_take_it():
    dep = deployment(args=["run", "--leader-elect", "--leader-elect-namespace=ops"])
    assert operator_health.lease_namespace(dep) == "ops"
    assert operator_health.lease_namespace(deployment()) == "kubeflow"
    check = operator_health.leader_check("kubeflow", "tfop", dep, TWO, lease("tfop-b_1", FRESH, namespace="ops"),
                                         "tfop", NOW)
    assert check.ok and check.title.endswith("(Lease ops/tfop)")
    assert operator_health.leader_check("kubeflow", "tfop", None, [], None, "tfop", NOW) is None


@pytest.mark.parametrize("containers,want", [
    ([{"name": "sidecar"}, {"name": "tfop", "args": ["run", "--x"]}], ["run", "--x"]),
    ([{"name": "manager", "args": ["run"]}, {"name": "proxy", "args": ["--y"]}], ["run"]),
])
def test_the_operator_container_is_the_one_named_like_the_deployment(containers, want):
    dep = deployment()
    dep["spec"]["template"]["spec"]["containers"] = containers
    assert operator_health.operator_args(dep) == want


@pytest.mark.parametrize("args,want", [
    (["run", "--leader-elect"], True),
    (["run"], False),
    (["run", "--leader-elect", "--no-leader-elect"], False),
    (["run", "--no-leader-elect", "--leader-elect"], True),
])
def test_leader_election_flag(args, want):
    assert operator_args.leader_election(args) is want
