"""Lost nodes, disruptions, OOM kills and in-place restarts in the pure core, as plain tables."""
from dataclasses import replace

import pytest

from core_fixtures import (NOW, ago, all_pods, all_services, context, last_condition, model, pod, pod_template,
                           container, refs, rspec, run, running_status, tfjob, with_status)
from test_core_gang_reconcile import PODS, ctx, desired_group, gang_job, gang_pods, group_of
from tfop.api.nodes import NOT_READY_GRACE_SECONDS, node_loss, not_ready_ends
from tfop.core.context import Observed
from tfop.core.plan import Event

UNREACHABLE = ("node.kubernetes.io/unreachable", "", "NoExecute")
NOT_READY = ("node.kubernetes.io/not-ready", "", "NoExecute")
OUT_OF_SERVICE = ("node.kubernetes.io/out-of-service", "nodeshutdown", "NoExecute")


def node(name="n2", status="True", since=120.0, taints=(), message=""):
    return {"metadata": {"name": name}, "readyStatus": status, "readySince": ago(since), "taints": taints,
            "readyMessage": message}


# -- the node's word ---------------------------------------------------------------------------------
LOSS_TABLE = [  # (case, node, reason or None)
    ("healthy", node(), None),
    ("Ready Unknown: no heartbeat", node(status="Unknown", taints=(UNREACHABLE,)), "NodeUnreachable"),
    ("tainted unreachable, no Ready condition", node(status="", taints=(UNREACHABLE,)), "NodeUnreachable"),
    ("Ready again, its unreachable taint not yet lifted", node(taints=(UNREACHABLE,)), None),
    ("NotReady for a moment (a kubelet restarting)", node(status="False", since=5, taints=(NOT_READY,)), None),
    ("NotReady past the grace", node(status="False", since=NOT_READY_GRACE_SECONDS + 1), "NodeNotReady"),
    ("deleted", None, "NodeDeleted"),
    ("out of service while Ready", node(taints=(OUT_OF_SERVICE,)), "NodeOutOfService"),
]


@pytest.mark.parametrize("case,n,reason", LOSS_TABLE, ids=[r[0] for r in LOSS_TABLE])
def test_node_loss(case, n, reason):
    loss = node_loss(n, NOW)
    assert (loss.reason if loss else None) == reason


def test_not_ready_counts_once_its_grace_ends():
    assert not_ready_ends(node(status="False", since=5), NOW) == pytest.approx(NOT_READY_GRACE_SECONDS - 5)
    assert not_ready_ends(node(status="False", since=60), NOW) is None  # lost already
    assert not_ready_ends(node(), NOW) is None


# -- a gang member on a lost node ----------------------------------------------------------------------
def on_node(p, name, **meta):
    p["spec"]["nodeName"] = name
    p["metadata"].update(meta)
    return p


def running_gang(name="volcano", **status):
    job = with_status(gang_job(), **running_status(**status))
    return job, group_of(desired_group(name, job), phase="Running")


def placed(job, name="volcano", lost_node="n2", **overrides):
    pods = gang_pods(job, name, **overrides)
    return [on_node(p, lost_node if p["metadata"]["name"] == "tf-job-worker-1" else "n1") for p in pods]


@pytest.mark.parametrize("name", ["volcano", "scheduler-plugins", "kubernetes"])
def test_a_member_on_a_lost_node_restarts_the_whole_gang_at_once(name):
    job, group = running_gang(name)
    nodes = {"n1": node("n1"), "n2": node("n2", status="Unknown", taints=(UNREACHABLE,))}
    obs = Observed(pods=placed(job, name), services=all_services(job), group=group, nodes=nodes)
    plan = run(job, obs, ctx=ctx(name))
    assert refs(plan) == PODS  # the survivors too: their GPUs go back to the pool now
    assert plan.status["disruptionCount"] == 1 and "restartCount" not in plan.status
    restarting = last_condition(plan.status)
    assert (restarting["type"], restarting["reason"]) == ("Restarting", "NodeLost")
    lost = [e for e in plan.events if e.type == "Warning"]
    assert [e.reason for e in lost] == ["NodeLost"]
    assert "tf-job-worker-1 on node n2" in lost[0].message and "Unknown" in lost[0].message
    assert plan.status["nodeLoss"]["node"] == "n2" and plan.status["nodeLoss"]["pods"] == ["tf-job-worker-1"]


def test_the_gang_waits_for_the_pod_stuck_on_the_lost_node_and_says_how_to_end_it():
    job, group = running_gang(disruptionCount=1)
    nodes = {"n1": node("n1"), "n2": node("n2", status="Unknown", taints=(UNREACHABLE,))}
    stuck = [p for p in placed(job, worker_1=dict(deleting=True)) if p["metadata"]["name"] == "tf-job-worker-1"]
    plan = run(job, Observed(pods=stuck, services=all_services(job), group=group, nodes=nodes), ctx=ctx("volcano"))
    assert plan.create == [] and plan.delete == [] and plan.force_delete == []
    message = plan.status["message"]
    assert "waits for pod tf-job-worker-1 on lost node n2" in message
    assert "kubectl taint nodes n2 node.kubernetes.io/out-of-service=nodeshutdown:NoExecute" in message
    assert "kubectl delete pod -n ml tf-job-worker-1 --force --grace-period=0" in message
    assert plan.status["disruptionCount"] == 1  # the wait is not another restart


@pytest.mark.parametrize("deleted_ago,forced", [(40, True), (10, False)])
def test_the_opt_in_force_deletes_a_stuck_pod_after_its_time(deleted_ago, forced):
    job, group = running_gang(disruptionCount=1)
    nodes = {"n2": node("n2", status="Unknown", since=300, taints=(UNREACHABLE,))}
    stuck = [on_node(p, "n2", deletionTimestamp=ago(deleted_ago)) for p in gang_pods(job)
             if p["metadata"]["name"] == "tf-job-worker-1"]
    plan = run(job, Observed(pods=stuck, services=all_services(job), group=group, nodes=nodes),
               ctx=ctx("volcano", force_delete_lost_pods_after=30))
    assert [r.name for r in plan.force_delete] == (["tf-job-worker-1"] if forced else [])
    assert any(e.reason == "ForceDeleted" for e in plan.events) == forced
    if not forced:
        assert plan.requeue_after == pytest.approx(20)
        assert "tfop force-deletes it at" in plan.status["message"]


def test_a_node_released_by_the_admin_says_kubernetes_releases_the_pod():
    job, group = running_gang(disruptionCount=1)
    nodes = {"n2": node("n2", status="Unknown", taints=(UNREACHABLE, OUT_OF_SERVICE))}
    stuck = [on_node(p, "n2") for p in gang_pods(job, worker_1=dict(deleting=True))
             if p["metadata"]["name"] == "tf-job-worker-1"]
    plan = run(job, Observed(pods=stuck, services=all_services(job), group=group, nodes=nodes), ctx=ctx("volcano"))
    assert "pod garbage collector releases it" in plan.status["message"]


def test_a_node_not_ready_for_a_moment_loses_nothing_and_is_looked_at_again():
    job, group = running_gang()
    nodes = {"n1": node("n1"), "n2": node("n2", status="False", since=5, taints=(NOT_READY,))}
    plan = run(job, Observed(pods=placed(job), services=all_services(job), group=group, nodes=nodes),
               ctx=ctx("volcano"))
    assert plan.delete == [] and "nodeLoss" not in (plan.status or {})
    assert plan.requeue_after == pytest.approx(NOT_READY_GRACE_SECONDS - 5 + 0.5)


# -- disruptions ------------------------------------------------------------------------------------------
def disrupted(p, reason="EvictionByEvictionAPI"):
    p["status"]["conditions"].append({"type": "DisruptionTarget", "status": "True", "reason": reason})
    return p


@pytest.mark.parametrize("policy,code", [("Never", 1), ("ExitCode", 1), ("OnFailure", 1)])
def test_a_disrupted_pod_is_retried_under_every_policy_and_not_counted_against_backoff(policy, code):
    job = model(tfjob({"Worker": rspec(replicas=2, restart_policy=policy)}, runPolicy={"backoffLimit": 0}))
    job = with_status(job, **running_status())
    pods = all_pods(job, worker_1=dict(phase="Failed", exit_code=code))
    disrupted(pods[1])
    plan = run(job, Observed(pods=pods, services=all_services(job)))
    assert refs(plan) == ["Pod/tf-job-worker-1"]
    assert plan.status["disruptionCount"] == 1 and "restartCount" not in plan.status
    assert not any(c["type"] == "Failed" for c in plan.status["conditions"])
    event = [e for e in plan.events if e.type == "Warning"]
    assert [e.reason for e in event] == ["Disrupted"]
    assert "EvictionByEvictionAPI" in event[0].message and "not counted against backoffLimit" in event[0].message


def test_a_job_disrupted_past_its_limit_fails():
    job = model(tfjob({"Worker": rspec(replicas=1, restart_policy="Never")}))
    job = with_status(job, **running_status(disruptionCount=3))
    pods = [disrupted(p) for p in all_pods(job, phase="Failed", worker_0=dict(exit_code=137))]
    plan = run(job, Observed(pods=pods, services=all_services(job)), ctx=context(max_disruptions_per_job=3))
    failed = last_condition(plan.status)
    assert failed["type"] == "Failed" and "--max-disruptions-per-job=3" in failed["message"]
    assert any(e.reason == "DisruptionLimitExceeded" for e in plan.events)


def test_without_a_gang_a_pod_the_cluster_deleted_is_counted_as_a_disruption():
    job = model(tfjob({"Worker": rspec(replicas=2, restart_policy="Never")}))
    job = with_status(job, **running_status())
    pods = all_pods(job, worker_1=None)
    plan = run(job, Observed(pods=pods, services=all_services(job), vanished=frozenset({"tf-job-worker-1"}),
                             disrupted={"tf-job-worker-1": "DeletionByTaintManager"}))
    assert [p["metadata"]["name"] for p in plan.create if p["kind"] == "Pod"] == ["tf-job-worker-1"]
    assert plan.status["disruptionCount"] == 1
    said = [e.message for e in plan.events if e.reason == "Disrupted"]
    assert len(said) == 1 and "tf-job-worker-1 (deleted by the cluster: DisruptionTarget DeletionByTaintManager)" \
        in said[0], said


def test_a_gang_member_evicted_restarts_the_gang_as_a_disruption():
    job, group = running_gang()
    pods = gang_pods(job, worker_1=dict(deleting=True))
    disrupted(pods[-1], "PreemptionByScheduler")
    plan = run(job, Observed(pods=pods, services=all_services(job), group=group), ctx=ctx("volcano"))
    assert refs(plan) == ["Pod/tf-job-ps-0", "Pod/tf-job-worker-0"]  # the evicted one goes already
    assert plan.status["disruptionCount"] == 1 and "restartCount" not in plan.status
    gang_restart = [e for e in plan.events if e.reason == "GangRestart"]
    assert len(gang_restart) == 1 and "PreemptionByScheduler" in gang_restart[0].message
    # the next gang's pods are another generation: the same pod still going is no second restart
    again = run(with_status(job, **plan.status), Observed(pods=[pods[-1]], services=all_services(job), group=group),
                ctx=ctx("volcano"))
    assert again.delete == [] and (again.status or plan.status)["disruptionCount"] == 1


# -- what the kubelet says --------------------------------------------------------------------------------
def test_an_oom_kill_names_the_memory_limit_to_raise():
    template = pod_template(container(resources={"limits": {"memory": "1Gi"}}))
    job = model(tfjob({"Worker": rspec(replicas=1, restart_policy="Never", template=template)}))
    job = with_status(job, **running_status())
    oom = pod(job, "Worker", 0, phase="Failed", exit_code=137)
    oom["status"]["containerStatuses"][0]["state"]["terminated"]["reason"] = "OOMKilled"
    plan = run(job, Observed(pods=[oom], services=all_services(job)))
    failed = last_condition(plan.status)
    assert failed["type"] == "Failed"
    assert "tf-job-worker-0 was OOMKilled (exit code 137)" in failed["message"]
    assert "memory limit 1Gi; raise resources.limits.memory of Worker pods" in failed["message"]


def test_containers_restarted_in_place_are_told_and_restart_nothing():
    job = model(tfjob({"Worker": rspec(replicas=2, restart_policy="OnFailure")}, runPolicy={"backoffLimit": 5}))
    job = with_status(job, **running_status())
    obs = Observed(pods=all_pods(job, worker_1=dict(restarts=2)), services=all_services(job))
    plan = run(job, obs)
    assert plan.delete == [] and "restartCount" not in plan.status
    assert plan.status["containerRestarts"] == 2
    assert [e.reason for e in plan.events] == ["ContainerRestarted"]
    assert "2 of backoffLimit=5 used" in plan.events[0].message
    again = run(with_status(job, **plan.status), obs)  # told once
    assert again.events == []


def test_node_loss_leaves_a_finished_job_alone():
    job, group = running_gang()
    job = replace(job, status={**job.status, "conditions": job.status["conditions"] + [
        {"type": "Succeeded", "status": "True", "reason": "TFJobSucceeded", "message": "m"}]})
    nodes = {"n2": node("n2", status="Unknown")}
    plan = run(job, Observed(pods=placed(job), services=all_services(job), group=group, nodes=nodes),
               ctx=ctx("volcano"))
    assert "nodeLoss" not in (plan.status or {}) and not any(e.reason == "NodeLost" for e in plan.events)


def test_events_compare_by_value():  # the plan's Events are plain data: tests compare them whole
    assert Event("Warning", "NodeLost", "m") == Event("Warning", "NodeLost", "m")
