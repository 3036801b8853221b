"""reconcile(): the upstream controller cases as tables (no gang scheduling)."""

import pytest

from core_fixtures import (
    NOW_S, ago, all_pods, all_services, cond, context, ctypes, last_condition, model, names, observed,
    pod, pod_template, refs, rspec, run, running_status, service, tfjob, with_status,
)
from tfop.api import conditions as S
from tfop.api.normalize import normalize
from tfop.core.plan import Event
from tfop.core.context import Observed
from tfop.core.indexes import parse_indexes


def _pods_svcs(*names_):
    """['worker-0', ...] -> the Service/... and Pod/... names the plan creates, services first."""
    return [f"Service/tf-job-{n}" for n in names_] + [f"Pod/tf-job-{n}" for n in names_]


# -- creation ---------------------------------------------------------------------------------
# (description, replicas, expected creations)
CREATE_TABLE = [
    ("local job: 1 pod + 1 service", {"Worker": 1}, _pods_svcs("worker-0")),
    ("4 workers + 2 PS: 6 + 6", {"PS": 2, "Worker": 4},
     _pods_svcs("ps-0", "ps-1", "worker-0", "worker-1", "worker-2", "worker-3")),
    ("chief first, then types in order", {"Evaluator": 1, "Worker": 1, "Chief": 1, "PS": 1},
     _pods_svcs("chief-0", "ps-0", "worker-0", "evaluator-0")),
    ("replicas: 0 creates nothing (#1709)", {"Worker": 0}, []),
    ("zero-replica type skipped", {"PS": 0, "Worker": 1}, _pods_svcs("worker-0")),
]


@pytest.mark.parametrize("desc,replicas,created", CREATE_TABLE, ids=[r[0] for r in CREATE_TABLE])
def test_first_reconcile_creates(desc, replicas, created):
    job = model(tfjob(replicas))
    plan = run(job)
    assert names(plan.create) == created
    assert plan.delete == [] and plan.create_group is None and plan.delete_job is False
    assert ctypes(plan.status) == [("Created", "True")]
    assert plan.status["startTime"] == NOW_S
    assert plan.status["lastReconcileTime"] == NOW_S
    if created:
        pretty = ", ".join(n.replace("/tf-job", " tf-job").lower() for n in created)
        assert plan.events == [Event("Normal", "SuccessfulCreate", f"created {pretty}")]
    else:
        assert plan.events == []


def test_created_event_is_capped_at_twelve_names():
    plan = run(model(tfjob({"Worker": 10})))
    assert len(plan.create) == 20
    assert len(plan.events) == 1
    assert plan.events[0].message.endswith(", pod tf-job-worker-1 and 8 more")


def test_only_missing_children_created():
    job = model(tfjob({"PS": 1, "Worker": 2}))
    obs = Observed(pods=[pod(job, "PS", 0), pod(job, "Worker", 1)], services=[service(job, "Worker", 0)])
    plan = run(with_status(job, **running_status()), obs)
    assert names(plan.create) == ["Service/tf-job-ps-0", "Service/tf-job-worker-1", "Pod/tf-job-worker-0"]
    assert [e.reason for e in plan.events] == ["SuccessfulCreate"]


def test_nothing_to_do_writes_nothing():
    job = model(tfjob({"PS": 1, "Worker": 2}))
    first = run(with_status(job, **running_status()), observed(job))
    assert first.create == [] and first.delete == [] and first.events == []
    steady = with_status(job, **{**first.status, "lastReconcileTime": ago(3600)})
    plan = run(steady, observed(job))
    assert plan.status is None
    assert plan.writes == 0 and plan.events == []


# -- status from the pods (upstream status_test.go) ---------------------------------------------
CHIEF = {"Chief": 1, "PS": 2, "Worker": 4}
NOCHIEF = {"PS": 2, "Worker": 4}
OK, FAIL = dict(phase="Succeeded", exit_code=0), dict(phase="Failed", exit_code=1)


def _w(*indices, **state):
    return {f"worker_{i}": state for i in indices}


# (description, replicas, spec extras, pod overrides, last condition, replicaStatuses active/succeeded/failed)
STATUS_TABLE = [
    ("chief succeeded", CHIEF, {}, {"chief_0": OK}, ("Succeeded", "True"), {"Chief": (0, 1, 0)}),
    ("chief running", CHIEF, {}, {}, ("Running", "True"), {"Chief": (1, 0, 0)}),
    ("chief failed", CHIEF, {}, {"chief_0": FAIL}, ("Failed", "True"), {"Chief": (0, 0, 1)}),
    ("no chief: worker failed", {"Worker": 1}, {}, {"worker_0": FAIL}, ("Failed", "True"), {"Worker": (0, 0, 1)}),
    ("no chief: worker succeeded", {"Worker": 1}, {}, {"worker_0": OK}, ("Succeeded", "True"),
     {"Worker": (0, 1, 0)}),
    ("no chief: worker running", {"Worker": 1}, {}, {}, ("Running", "True"), {"Worker": (1, 0, 0)}),
    ("no chief: workers 0,1 succeeded, 2 active (counted succeeded, as upstream)", NOCHIEF, {}, _w(0, 1, **OK),
     ("Succeeded", "True"), {"Worker": (0, 4, 0), "PS": (0, 2, 0)}),
    ("no chief: 2 running, 2 failed", NOCHIEF, {}, _w(2, 3, **FAIL), ("Failed", "True"), {"Worker": (2, 0, 2)}),
    ("no chief: 2 succeeded, 2 failed (worker-0 failed)", NOCHIEF, {}, {**_w(2, 3, **OK), **_w(0, 1, **FAIL)},
     ("Failed", "True"), {"Worker": (0, 2, 2)}),
    ("no chief: worker-0 succeeded, worker-3 failed: success decided", NOCHIEF, {}, {**_w(0, **OK), **_w(3, **FAIL)},
     ("Succeeded", "True"), {"Worker": (0, 3, 1)}),
    ("no chief: worker-0 succeeded, 3 active", NOCHIEF, {}, _w(0, **OK), ("Succeeded", "True"),
     {"Worker": (0, 4, 0)}),
    ("AllWorkers: worker-0 succeeded, 3 active", NOCHIEF, {"successPolicy": "AllWorkers"}, _w(0, **OK),
     ("Running", "True"), {"Worker": (3, 1, 0)}),
    ("AllWorkers: all 4 succeeded", NOCHIEF, {"successPolicy": "AllWorkers"}, _w(0, 1, 2, 3, **OK),
     ("Succeeded", "True"), {"Worker": (0, 4, 0)}),
    ("AllWorkers: worker-0 succeeded, 2 running, 1 failed", NOCHIEF, {"successPolicy": "AllWorkers"},
     {**_w(0, **OK), **_w(3, **FAIL)}, ("Failed", "True"), {"Worker": (2, 1, 1)}),
    ("no chief: worker-1 succeeded only", NOCHIEF, {}, _w(1, **OK), ("Running", "True"), {"Worker": (3, 1, 0)}),
    ("chief running, workers failed", CHIEF, {}, _w(0, 1, 2, 3, **FAIL), ("Failed", "True"), {"Worker": (0, 0, 4)}),
    ("chief running, workers succeeded", CHIEF, {}, _w(0, 1, 2, 3, **OK), ("Running", "True"),
     {"Worker": (0, 4, 0), "Chief": (1, 0, 0)}),
    ("chief running, a PS failed", CHIEF, {}, {"ps_1": FAIL}, ("Failed", "True"), {"PS": (1, 0, 1)}),
    ("chief failed, workers succeeded", CHIEF, {}, {"chief_0": FAIL, **_w(0, 1, 2, 3, **OK)}, ("Failed", "True"),
     {"Chief": (0, 0, 1)}),
    ("chief succeeded, workers failed", CHIEF, {}, {"chief_0": OK, **_w(0, 1, 2, 3, **FAIL)},
     ("Succeeded", "True"), {"Chief": (0, 1, 0), "Worker": (0, 0, 4)}),
    ("master succeeded", {"Master": 1, "Worker": 2}, {}, {"master_0": OK}, ("Succeeded", "True"),
     {"Master": (0, 1, 0)}),
    ("dynamic worker: worker failure ignored", NOCHIEF, {"enableDynamicWorker": True}, _w(3, **FAIL),
     ("Running", "True"), {"Worker": (3, 0, 1)}),
    ("evaluator succeeded decides nothing", {"Chief": 1, "Evaluator": 1}, {}, {"evaluator_0": OK},
     ("Running", "True"), {"Evaluator": (0, 1, 0)}),
    ("pending pods: Created only", {"Worker": 2}, {}, _w(0, 1, phase="Pending"), ("Created", "True"),
     {"Worker": (0, 0, 0)}),
]


@pytest.mark.parametrize("desc,replicas,extra,overrides,last,counts", STATUS_TABLE, ids=[r[0] for r in STATUS_TABLE])
def test_status(desc, replicas, extra, overrides, last, counts):
    job = model(tfjob(replicas, **extra))
    job = with_status(job, conditions=[cond(S.CREATED)], startTime=ago(60))
    plan = run(job, observed(job, **overrides))
    c = last_condition(plan.status)
    assert (c["type"], c["status"]) == last
    for rtype, (active, succeeded, failed) in counts.items():
        got = plan.status["replicaStatuses"][rtype]
        assert (got["active"], got["succeeded"], got["failed"]) == (active, succeeded, failed)
    assert plan.status["tfReplicaStatuses"] == {  # v1alpha2's shape: the counters only
        rtype: {k: got[k] for k in ("active", "succeeded", "failed")}
        for rtype, got in plan.status["replicaStatuses"].items()}
    if last[0] in ("Succeeded", "Failed"):
        assert plan.status["completionTime"] == NOW_S
        assert plan.create == []
        reason = "TFJobSucceeded" if last[0] == "Succeeded" else "TFJobFailed"
        assert [e.reason for e in plan.events if e.reason.startswith("TFJob")] == [reason]


def test_failed_message_names_the_replica():
    job = model(tfjob({"PS": 1, "Worker": rspec(replicas=2, restart_policy="ExitCode")}))
    job = with_status(job, **running_status())
    plan = run(job, observed(job, worker_1=dict(phase="Failed", exit_code=1)))
    message = "TFJob ml/tf-job has failed because 1 Worker replica(s) failed: tf-job-worker-1 exited with code 1."
    assert last_condition(plan.status)["message"] == message
    assert ctypes(plan.status) == [("Created", "True"), ("Running", "False"), ("Failed", "True")]
    assert Event("Warning", "TFJobFailed", message) in plan.events
    assert plan.delete == []  # cleanPodPolicy None (v1): nothing deleted


# -- restarts -------------------------------------------------------------------------------------
# (description, restart policy, failed pod state, outcome, deleted, restartCount)
RESTART_TABLE = [
    ("OnFailure chief evicted -> Restarting", "OnFailure", dict(phase="Failed", reason="Evicted"),
     "Restarting", ["Pod/tf-job-chief-0"], 1),
    ("Always chief failed -> Restarting", "Always", dict(phase="Failed", exit_code=1),
     "Restarting", ["Pod/tf-job-chief-0"], 1),
    ("ExitCode 137 -> Restarting", "ExitCode", dict(phase="Failed", exit_code=137),
     "Restarting", ["Pod/tf-job-chief-0"], 1),
    ("ExitCode 130 -> pod deleted", "ExitCode", dict(phase="Failed", exit_code=130),
     "Restarting", ["Pod/tf-job-chief-0"], 1),
    ("ExitCode 143 -> pod deleted", "ExitCode", dict(phase="Failed", exit_code=143),
     "Restarting", ["Pod/tf-job-chief-0"], 1),
    ("ExitCode 138 (user retry) -> pod deleted", "ExitCode", dict(phase="Failed", exit_code=138),
     "Restarting", ["Pod/tf-job-chief-0"], 1),
    ("ExitCode evicted (no code) -> pod deleted", "ExitCode", dict(phase="Failed", reason="Evicted"),
     "Restarting", ["Pod/tf-job-chief-0"], 1),
    ("ExitCode 1 -> Failed", "ExitCode", dict(phase="Failed", exit_code=1), "Failed", [], None),
    ("ExitCode 127 -> Failed", "ExitCode", dict(phase="Failed", exit_code=127), "Failed", [], None),
    ("Never 137 -> Failed", "Never", dict(phase="Failed", exit_code=137), "Failed", [], None),
]


@pytest.mark.parametrize("desc,policy,state,outcome,deleted,restarts", RESTART_TABLE, ids=[r[0] for r in RESTART_TABLE])
def test_chief_restart(desc, policy, state, outcome, deleted, restarts):
    job = model(tfjob({"Chief": rspec(restart_policy=policy), "Worker": 2}))
    job = with_status(job, **running_status())
    plan = run(job, observed(job, chief_0=state))
    c = last_condition(plan.status)
    assert (c["type"], c["status"]) == (outcome, "True")
    assert refs(plan) == deleted
    assert plan.create == []  # never recreate in the pass that deletes
    assert plan.status.get("restartCount") == restarts
    if outcome == "Restarting":
        assert ctypes(plan.status) == [("Created", "True"), ("Restarting", "True")]
        assert [e.reason for e in plan.events] == ["SuccessfulDelete", "TFJobRestarting"]
        assert plan.events[0].message == "deleted pod tf-job-chief-0"
        assert plan.events[1].type == "Warning"


def test_restart_then_recreate_then_running():
    job = model(tfjob({"Chief": rspec(restart_policy="ExitCode"), "Worker": 1}))
    job = with_status(job, **running_status())
    plan = run(job, observed(job, chief_0=dict(phase="Failed", exit_code=137)))
    # the old pod is terminating: nothing is created
    job = with_status(job, **plan.status)
    plan = run(job, observed(job, chief_0=dict(phase="Failed", exit_code=137, deleting=True)))
    assert plan.create == [] and plan.delete == []
    # the old pod is gone: the chief is created again under the same name
    job = with_status(job, **(plan.status or job.status))
    plan = run(job, observed(job, chief_0=None))
    assert names(plan.create) == ["Pod/tf-job-chief-0"]
    assert plan.status is None  # nothing in the status changed
    assert last_condition(job.status)["type"] == "Restarting"
    # running again: Running replaces Restarting
    plan = run(job, observed(job))
    assert ctypes(plan.status) == [("Created", "True"), ("Running", "True")]
    assert plan.status["restartCount"] == 1


# -- backoffLimit ------------------------------------------------------------------------------------
# (description, policy, backoffLimit, status restartCount, pod states, outcome, deleted pods)
BACKOFF_TABLE = [
    ("kubelet restarts under the limit", "OnFailure", 2, 0, {"worker_0": dict(restarts=2)}, "Running", []),
    ("kubelet restarts past the limit", "OnFailure", 2, 0, {"worker_0": dict(restarts=2), "worker_1": dict(restarts=1)},
     "Failed", ["Pod/tf-job-ps-0", "Pod/tf-job-worker-0", "Pod/tf-job-worker-1"]),
    ("backoffLimit 0, one restart", "OnFailure", 0, 0, {"worker_1": dict(restarts=1)},
     "Failed", ["Pod/tf-job-ps-0", "Pod/tf-job-worker-0", "Pod/tf-job-worker-1"]),
    ("ExitCode restart within the limit", "ExitCode", 2, 1, {"worker_0": dict(phase="Failed", exit_code=137)},
     "Restarting", ["Pod/tf-job-worker-0"]),
    ("ExitCode restart past the limit", "ExitCode", 2, 2, {"worker_0": dict(phase="Failed", exit_code=137)},
     "Failed", ["Pod/tf-job-ps-0", "Pod/tf-job-worker-1"]),
    ("Never pods' restarts do not count", "Never", 0, 0, {"worker_0": dict(restarts=5)}, "Running", []),
]


@pytest.mark.parametrize("desc,policy,limit,count,states,outcome,deleted", BACKOFF_TABLE,
                         ids=[r[0] for r in BACKOFF_TABLE])
def test_backoff_limit(desc, policy, limit, count, states, outcome, deleted):
    job = model(tfjob({"PS": rspec(restart_policy="Never"), "Worker": rspec(replicas=2, restart_policy=policy)},
                      runPolicy={"backoffLimit": limit}))
    job = with_status(job, **running_status(restartCount=count))
    plan = run(job, observed(job, **states))
    got = (plan.status or job.status)["conditions"][-1]
    assert (got["type"], got["status"]) == (outcome, "True")
    assert refs(plan) == deleted
    assert plan.create == []
    if outcome == "Failed":
        assert got["message"].endswith(f"after reaching backoffLimit={limit}.")
        assert [e.reason for e in plan.events][-1] == "BackoffLimitExceeded"


# -- activeDeadlineSeconds ------------------------------------------------------------------------------
def test_active_deadline_exceeded():
    job = model(tfjob({"PS": 1, "Worker": 2}, runPolicy={"activeDeadlineSeconds": 60}))
    job = with_status(job, **running_status(start=ago(61)))
    plan = run(job, observed(job, worker_1=OK))
    c = last_condition(plan.status)
    assert (c["type"], c["status"]) == ("Failed", "True")
    assert c["message"] == "TFJob ml/tf-job has run longer than activeDeadlineSeconds=60; its pods are stopped."
    assert refs(plan) == ["Pod/tf-job-ps-0", "Pod/tf-job-worker-0"]
    assert plan.status["completionTime"] == NOW_S
    assert [e.reason for e in plan.events] == ["SuccessfulDelete", "DeadlineExceeded"]
    assert plan.create == []


def test_active_deadline_requeues_before_it():
    job = model(tfjob({"Worker": 2}, runPolicy={"activeDeadlineSeconds": 60}))
    job = with_status(job, **running_status(start=ago(15)))
    plan = run(job, observed(job))
    assert plan.requeue_after == 45
    assert plan.delete == [] and plan.create == []
    assert last_condition(plan.status)["type"] == "Running"


def test_active_deadline_counts_from_first_reconcile():
    job = model(tfjob({"Worker": 2}, runPolicy={"activeDeadlineSeconds": 60}))
    plan = run(job)
    assert plan.requeue_after == 60


# -- cleanPodPolicy ----------------------------------------------------------------------------------
# worker-0 succeeded, worker-1 running, PS running, PS-1 failed earlier? no: PS pending
CLEAN_TABLE = [
    ("All", ["Pod/tf-job-ps-0", "Service/tf-job-ps-0", "Pod/tf-job-ps-1", "Service/tf-job-ps-1",
             "Pod/tf-job-worker-0", "Service/tf-job-worker-0", "Pod/tf-job-worker-1", "Service/tf-job-worker-1"]),
    ("Running", ["Pod/tf-job-ps-0", "Service/tf-job-ps-0", "Pod/tf-job-ps-1", "Service/tf-job-ps-1",
                 "Pod/tf-job-worker-1", "Service/tf-job-worker-1"]),
    ("None", []),
]


@pytest.mark.parametrize("policy,deleted", CLEAN_TABLE)
def test_clean_pod_policy_after_success(policy, deleted):
    job = model(tfjob({"PS": 2, "Worker": 2}, runPolicy={"cleanPodPolicy": policy}))
    job = with_status(job, **running_status())
    obs = observed(job, worker_0=OK, ps_1=dict(phase="Pending"))
    plan = run(job, obs)
    assert last_condition(plan.status)["type"] == "Succeeded"
    assert refs(plan) == deleted
    # and again on the next reconcile of the finished job: the same, nothing created
    job = with_status(job, **plan.status)
    again = run(job, obs)
    assert refs(again) == deleted and again.create == []
    assert again.status is None


def test_finished_job_leaves_terminating_pods_alone():
    job = model(tfjob({"Worker": 2}, runPolicy={"cleanPodPolicy": "Running"}))
    job = with_status(job, **running_status(), completionTime=ago(5))
    job = with_status(job, **{**job.status, "conditions": job.status["conditions"] + [cond(S.SUCCEEDED)]})
    obs = Observed(pods=[pod(job, "Worker", 0, phase="Succeeded", exit_code=0),
                         pod(job, "Worker", 1, deleting=True)])
    plan = run(job, obs)
    assert plan.delete == [] and plan.create == [] and plan.events == []


def test_finished_job_never_recreates_collected_pods():
    """#1186: completed pods that were garbage collected must not come back."""
    job = model(tfjob({"Worker": 2}))
    job = with_status(job, **running_status(), completionTime=ago(5))
    job = with_status(job, **{**job.status, "conditions": job.status["conditions"] + [cond(S.SUCCEEDED)]})
    plan = run(job, Observed())
    assert plan.create == [] and plan.delete == []


# -- TTL -------------------------------------------------------------------------------------------------
# (description, ttl, finished seconds ago, delete_job, requeue_after)
TTL_TABLE = [
    ("past the ttl", 60, 61, True, None),
    ("exactly at the ttl", 60, 60, True, None),
    ("before the ttl", 60, 10, False, 50),
    ("ttl 0", 0, 0, True, None),
    ("no ttl", None, 1000, False, None),
]


@pytest.mark.parametrize("desc,ttl,done,delete_job,requeue", TTL_TABLE, ids=[r[0] for r in TTL_TABLE])
def test_ttl(desc, ttl, done, delete_job, requeue):
    run_policy = {"ttlSecondsAfterFinished": ttl} if ttl is not None else {}
    job = model(tfjob({"Worker": 1}, runPolicy=run_policy))
    job = with_status(job, conditions=[cond(S.CREATED), cond(S.SUCCEEDED)], startTime=ago(2000),
                      completionTime=ago(done))
    plan = run(job, Observed())
    assert plan.delete_job is delete_job
    assert plan.requeue_after == requeue


def test_ttl_counts_from_success_in_the_same_reconcile():
    job = model(tfjob({"Worker": 1}, runPolicy={"ttlSecondsAfterFinished": 30}))
    job = with_status(job, **running_status())
    plan = run(job, observed(job, worker_0=OK))
    assert last_condition(plan.status)["type"] == "Succeeded"
    assert plan.delete_job is False and plan.requeue_after == 30


# -- suspend / resume -------------------------------------------------------------------------------------
def test_suspend_deletes_everything():
    job = model(tfjob({"PS": 1, "Worker": 2}, runPolicy={"suspend": True}))
    job = with_status(job, **running_status())
    plan = run(job, observed(job))
    assert refs(plan) == ["Pod/tf-job-ps-0", "Service/tf-job-ps-0", "Pod/tf-job-worker-0", "Service/tf-job-worker-0",
                          "Pod/tf-job-worker-1", "Service/tf-job-worker-1"]
    assert plan.create == []
    assert ctypes(plan.status) == [("Created", "True"), ("Running", "False"), ("Suspended", "True")]
    assert last_condition(plan.status)["reason"] == "TFJobSuspended"
    assert [e.reason for e in plan.events] == ["SuccessfulDelete", "TFJobSuspended"]
    # pods gone: only the counts change; then nothing more to do
    job = with_status(job, **plan.status)
    again = run(job, Observed())
    assert again.create == [] and again.delete == [] and again.events == []
    assert again.status["ready"] == "0/3" and again.status["replicaStatuses"]["Worker"]["active"] == 0
    job = with_status(job, **again.status)
    assert run(job, Observed()).writes == 0


def test_suspended_before_start_creates_nothing():
    job = model(tfjob({"Worker": 2}, runPolicy={"suspend": True}))
    plan = run(job)
    assert plan.create == [] and plan.delete == []
    assert ctypes(plan.status) == [("Created", "True"), ("Running", "False"), ("Suspended", "True")]


def test_resume_resets_start_time():
    job = model(tfjob({"Worker": 2}, runPolicy={"activeDeadlineSeconds": 600}))
    job = with_status(job, conditions=[cond(S.CREATED), cond(S.RUNNING, "False", reason="TFJobSuspended"),
                                       cond(S.SUSPENDED)], startTime=ago(3600))
    plan = run(job, Observed())
    assert plan.status["startTime"] == NOW_S
    c = last_condition(plan.status)
    assert (c["type"], c["status"], c["reason"]) == ("Suspended", "False", "TFJobResumed")
    assert names(plan.create) == _pods_svcs("worker-0", "worker-1")
    assert [e.reason for e in plan.events] == ["SuccessfulCreate", "TFJobResumed"]
    assert plan.requeue_after == 600  # deadline counted from the resume, not the first start


# -- scaling ----------------------------------------------------------------------------------------------
def test_scale_down_deletes_pods_and_services():
    four = model(tfjob({"Worker": 4}))
    two = with_status(model(tfjob({"Worker": 2})), **running_status())
    plan = run(two, Observed(pods=all_pods(four), services=all_services(four)))
    assert refs(plan) == ["Pod/tf-job-worker-2", "Service/tf-job-worker-2",
                          "Pod/tf-job-worker-3", "Service/tf-job-worker-3"]
    assert plan.create == []
    assert plan.events == [Event("Normal", "SuccessfulDelete",
                                 "deleted pod tf-job-worker-2, service tf-job-worker-2, "
                                 "pod tf-job-worker-3, service tf-job-worker-3")]


def test_scale_down_of_an_orphan_service():
    four = model(tfjob({"Worker": 4}))
    two = with_status(model(tfjob({"Worker": 2})), **running_status())
    plan = run(two, Observed(pods=all_pods(two), services=all_services(four)))
    assert refs(plan) == ["Service/tf-job-worker-2", "Service/tf-job-worker-3"]


def test_scale_up_creates_missing():
    two = model(tfjob({"Worker": 2}))
    four = with_status(model(tfjob({"Worker": 4})), **running_status())
    plan = run(four, Observed(pods=all_pods(two), services=all_services(two)))
    assert names(plan.create) == _pods_svcs("worker-2", "worker-3")
    assert plan.delete == []


def test_removed_replica_type_is_deleted():
    old = model(tfjob({"PS": 1, "Worker": 1}))
    new = with_status(model(tfjob({"Worker": 1})), **running_status())
    plan = run(new, Observed(pods=all_pods(old), services=all_services(old)))
    assert refs(plan) == ["Pod/tf-job-ps-0", "Service/tf-job-ps-0"]


# -- conditions over several reconciles --------------------------------------------------------------------
def test_failed_is_terminal():
    job = model(tfjob({"Worker": 2}))
    job = with_status(job, conditions=[cond(S.CREATED), cond(S.RUNNING, "False"), cond(S.FAILED)],
                      startTime=ago(100), completionTime=ago(50))
    plan = run(job, observed(job))  # every pod running again: still Failed
    assert plan.create == []
    conditions = (plan.status or job.status)["conditions"]
    assert [(c["type"], c["status"]) for c in conditions] == [("Created", "True"), ("Running", "False"),
                                                               ("Failed", "True")]


def test_running_keeps_transition_time():
    job = model(tfjob({"Worker": 2}))
    job = with_status(job, **running_status(start="2024-05-01T10:00:00Z"))
    plan = run(job, observed(job, worker_1=dict(phase="Pending")))
    status = plan.status or job.status
    assert last_condition(status)["lastTransitionTime"] == "2024-05-01T10:00:00Z"


def test_last_condition_is_newest():
    job = model(tfjob({"Worker": 1}))
    statuses = []
    plan = run(job)
    for obs in (observed(job), observed(job, worker_0=OK)):
        job = with_status(job, **plan.status)
        plan = run(job, obs)
        statuses.append(last_condition(plan.status)["type"])
    assert statuses == ["Running", "Succeeded"]
    assert ctypes(plan.status) == [("Created", "True"), ("Running", "False"), ("Succeeded", "True")]


def test_status_unchanged_ignores_last_reconcile_time():
    job = model(tfjob({"Worker": 2}, generation=3))
    plan = run(with_status(job, **running_status()), observed(job))
    assert plan.status["observedGeneration"] == 3
    assert plan.status["ready"] == "2/2"
    job = with_status(job, **{**plan.status, "lastReconcileTime": "2020-01-01T00:00:00Z"})
    assert run(job, observed(job)).status is None
    # a real change (one pod not ready) writes, with a fresh lastReconcileTime
    changed = run(job, observed(job, worker_1=dict(ready=False)))
    assert changed.status["ready"] == "1/2"
    assert changed.status["lastReconcileTime"] == NOW_S


def test_one_event_per_reconcile_that_changed_something():
    job = model(tfjob({"Worker": 3}))
    job = with_status(job, **running_status())
    # worker-1 gone, worker-2 failed (Never: fatal) and its service gone: creates and fails in one pass
    obs = Observed(pods=[pod(job, "Worker", 0), pod(job, "Worker", 2, phase="Failed", exit_code=1)],
                   services=[service(job, "Worker", 0), service(job, "Worker", 1)])
    plan = run(job, obs)
    assert last_condition(plan.status)["type"] == "Failed"
    assert plan.create == []  # nothing is created in the pass that fails the job
    assert [e.reason for e in plan.events] == ["TFJobFailed"]
    # a pass that creates and deletes: one Event naming both
    job = with_status(model(tfjob({"Worker": 2, "PS": 1})), **running_status())
    four = model(tfjob({"Worker": 4}))
    plan = run(job, Observed(pods=all_pods(four), services=all_services(four)))
    lifecycle = [e for e in plan.events if e.reason in ("SuccessfulCreate", "SuccessfulDelete", "Reconciled")]
    assert len(lifecycle) == 1 and len(plan.create) == 2 and len(plan.delete) == 4


def test_created_and_deleted_in_one_event():
    four = model(tfjob({"Worker": 4}))
    job = with_status(model(tfjob({"Worker": 2, "PS": 1})), **running_status())
    plan = run(job, Observed(pods=all_pods(four), services=all_services(four)))
    assert plan.events == [Event("Normal", "Reconciled",
                                 "created service tf-job-ps-0, pod tf-job-ps-0; deleted pod tf-job-worker-2, "
                                 "service tf-job-worker-2, pod tf-job-worker-3, service tf-job-worker-3")]


# -- invalid jobs ------------------------------------------------------------------------------------------
INVALID_TABLE = [
    ("two chiefs", tfjob({"Chief": 1, "Master": 1}), "spec.tfReplicaSpecs: both Chief and Master are given: keep only one"),
    ("missing image", tfjob({"Worker": rspec(template=pod_template({"name": "tensorflow"}))}),
     "spec.tfReplicaSpecs.Worker.template.spec.containers[0].image: is empty: every container needs an image"),
    ("bad name", tfjob(name="Bad.Name"), "metadata.name: 'Bad.Name' is not a DNS-1035 label"),
]


@pytest.mark.parametrize("desc,obj,expected", INVALID_TABLE, ids=[r[0] for r in INVALID_TABLE])
def test_invalid_job_fails_with_field_and_fix(desc, obj, expected):
    n = normalize(obj)
    plan = run(n.job, Observed(), problems=n.problems, notes=n.notes)
    assert plan.create == [] and plan.delete == [] and plan.create_group is None
    c = last_condition(plan.status)
    assert (c["type"], c["status"], c["reason"]) == ("Failed", "True", "TFJobFailed")
    assert c["message"].startswith("invalid spec: " + expected)
    warnings = [e for e in plan.events if e.type == "Warning"]
    assert len(warnings) == 1 and warnings[0].reason == "InvalidSpec"
    assert warnings[0].message == c["message"]
    # the next reconcile: still failed, nothing created, no new event
    job = with_status(n.job, **plan.status)
    again = run(job, Observed(), problems=n.problems, notes=n.notes)
    assert again.writes == 0 and again.events == []


def test_notes_become_events_once():
    n = normalize(tfjob({"Worker": rspec(template=pod_template(restartPolicy="OnFailure"))}))
    plan = run(n.job, notes=n.notes)
    assert Event("Normal", "SpecInterpreted", n.notes[0]) in plan.events
    again = run(with_status(n.job, **plan.status), observed(n.job), notes=n.notes)
    assert all(e.reason != "SpecInterpreted" for e in again.events)


def test_scheduler_name_setting_applies_without_gang():
    job = model(tfjob({"Worker": 1}))
    plan = run(job, ctx=context(scheduler_name="my-scheduler"))
    pods = [o for o in plan.create if o["kind"] == "Pod"]
    assert pods[0]["spec"]["schedulerName"] == "my-scheduler"


def test_cluster_domain_setting():
    job = model(tfjob({"Worker": 2}))
    plan = run(job, ctx=context(cluster_domain="cluster.local"))
    pod0 = [o for o in plan.create if o["kind"] == "Pod"][0]
    assert "tf-job-worker-1.ml.svc.cluster.local:2222" in pod0["spec"]["containers"][0]["env"][0]["value"]


def test_success_pass_creates_nothing():
    """The pass that sees the chief succeed must not create a missing worker (#1186's cousin):
    with cleanPodPolicy None nothing would ever delete it."""
    job = model(tfjob({"Chief": 1, "Worker": 2}))
    job = with_status(job, **running_status())
    plan = run(job, observed(job, chief_0=OK, worker_1=None))
    assert last_condition(plan.status)["type"] == "Succeeded"
    assert plan.create == []


def test_failure_after_restart_clears_restarting():
    job = model(tfjob({"Worker": rspec(replicas=2, restart_policy="ExitCode")}))
    job = with_status(job, conditions=[cond(S.CREATED), cond(S.RESTARTING)], startTime=ago(60), restartCount=1)
    plan = run(job, observed(job, worker_1=dict(phase="Failed", exit_code=1)))
    assert ctypes(plan.status) == [("Created", "True"), ("Restarting", "False"), ("Failed", "True")]


def test_a_finished_jobs_replica_counts_stay_as_they_were():
    """cleanPodPolicy (or anyone) may delete a finished job's pods; its counts are what it finished with."""
    job = model(tfjob({"Worker": 2}))
    recorded = {"Worker": {"active": 0, "succeeded": 2, "failed": 0}}
    job = with_status(job, conditions=[cond(S.CREATED), cond(S.SUCCEEDED)], startTime=ago(60),
                      completionTime=ago(10), replicaStatuses=recorded)
    plan = run(job, observed(job, phase=None))  # every pod gone
    status = plan.status or job.status
    got = status["replicaStatuses"]["Worker"]
    assert (got["active"], got["succeeded"], got["failed"]) == (0, 2, 0)


# -- enableDynamicWorker (upstream v1.9: a failed worker pod restarts as its restartPolicy says;
#    ExitCode with a code < 128 fails the job; only Never's failures are left alone) ---------------
# (description, worker restartPolicy, failed worker-1 state, last condition, deleted)
DYNAMIC_TABLE = [
    ("Never, exit 1: left Failed, job runs on", "Never", dict(phase="Failed", exit_code=1), "Running", []),
    ("Never, exit 137: left Failed too", "Never", dict(phase="Failed", exit_code=137), "Running", []),
    ("OnFailure, evicted: restarted", "OnFailure", dict(phase="Failed", reason="Evicted"), "Restarting",
     ["Pod/tf-job-worker-1"]),
    ("Always, exit 1: restarted", "Always", dict(phase="Failed", exit_code=1), "Restarting", ["Pod/tf-job-worker-1"]),
    ("ExitCode 137: restarted", "ExitCode", dict(phase="Failed", exit_code=137), "Restarting",
     ["Pod/tf-job-worker-1"]),
    ("ExitCode, evicted (no code): restarted", "ExitCode", dict(phase="Failed", reason="Evicted"), "Restarting",
     ["Pod/tf-job-worker-1"]),
    ("ExitCode 1: the job fails", "ExitCode", dict(phase="Failed", exit_code=1), "Failed", []),
]


@pytest.mark.parametrize("desc,policy,state,last,deleted", DYNAMIC_TABLE, ids=[r[0] for r in DYNAMIC_TABLE])
def test_dynamic_worker_failures(desc, policy, state, last, deleted):
    job = model(tfjob({"PS": 1, "Worker": rspec(replicas=3, restart_policy=policy)}, enableDynamicWorker=True))
    job = with_status(job, **running_status())
    plan = run(job, observed(job, worker_1=state))
    status = plan.status or job.status
    assert (last_condition(status)["type"], last_condition(status)["status"]) == (last, "True")
    assert refs(plan) == deleted
    assert plan.create == []
    assert (plan.status or job.status)["replicaStatuses"]["Worker"]["failed"] == 1
    if last == "Failed":
        assert last_condition(status)["message"].endswith("tf-job-worker-1 exited with code 1.")


def test_dynamic_worker_leaves_other_types_as_they_are():
    job = model(tfjob({"PS": 1, "Worker": 2}, enableDynamicWorker=True))
    job = with_status(job, **running_status())
    plan = run(job, observed(job, ps_0=dict(phase="Failed", exit_code=1)))
    assert last_condition(plan.status)["type"] == "Failed"


# -- a succeeded pod deleted later stays succeeded (#1186 while the job runs) --------------------
def _chief_job(workers=3, **spec):
    return model(tfjob({"Chief": 1, "Worker": workers}, **spec))


def _counts(status, rtype):
    got = status["replicaStatuses"][rtype]
    return got["active"], got["succeeded"], got["failed"]


def test_succeeded_index_is_remembered_then_not_recreated():
    job = with_status(_chief_job(), **running_status())
    plan = run(job, observed(job, worker_1=OK))
    assert plan.status["succeededIndexes"] == {"Worker": "1"}
    assert _counts(plan.status, "Worker") == (2, 1, 0)
    # the succeeded pod is deleted (garbage collection of completed pods, an eviction, a user)
    job = with_status(job, **plan.status)
    plan = run(job, observed(job, worker_1=None))
    assert plan.create == [] and plan.delete == []
    assert plan.status is None  # nothing changed: it still counts as succeeded
    assert _counts(job.status, "Worker") == (2, 1, 0)
    # the chief finishes: the job succeeds with worker-1 counted succeeded
    plan = run(job, observed(job, worker_1=None, chief_0=OK))
    assert last_condition(plan.status)["type"] == "Succeeded"
    assert _counts(plan.status, "Worker") == (0, 3, 0) and _counts(plan.status, "Chief") == (0, 1, 0)


# (description, replicas, spec extras, recorded status, pod overrides, expected succeededIndexes, created)
INDEX_TABLE = [
    ("ranges, with the pods present", {"Chief": 1, "Worker": 8}, {}, None,
     _w(0, 1, 2, 3, 7, **OK), {"Worker": "0-3,7"}, []),
    ("recorded, pods gone: kept, not created", {"Chief": 1, "Worker": 8}, {}, {"Worker": "0-3,7"},
     {**_w(0, 1, 2, 3, 7, **{}), **{f"worker_{i}": None for i in (0, 1, 2, 3, 7)}}, {"Worker": "0-3,7"}, []),
    ("recorded and observed merge", {"Chief": 1, "Worker": 4}, {}, {"Worker": "0"},
     {"worker_0": None, **_w(2, **OK)}, {"Worker": "0,2"}, []),
    ("a pod running at a remembered index decides", {"Chief": 1, "Worker": 4}, {}, {"Worker": "1-2"},
     {}, None, []),
    ("scaled down: indices past replicas dropped", {"Chief": 1, "Worker": 2}, {}, {"Worker": "0-5"},
     {"worker_0": None, "worker_1": None}, {"Worker": "0-1"}, []),
    ("malformed memory ignored, missing pod created", {"Chief": 1, "Worker": 2}, {}, {"Worker": "x,-3,9-"},
     {"worker_1": None}, None, ["Pod/tf-job-worker-1"]),
    ("a terminating succeeded pod is not remembered", {"Chief": 1, "Worker": 2}, {}, None,
     {"worker_1": dict(deleting=True, **OK)}, None, []),
    ("AllWorkers: deleted succeeded workers count", {"PS": 1, "Worker": 3}, {"successPolicy": "AllWorkers"},
     {"Worker": "0-1"}, {"worker_0": None, "worker_1": None}, {"Worker": "0-1"}, []),
]


@pytest.mark.parametrize("desc,replicas,extra,recorded,overrides,expected,created", INDEX_TABLE,
                         ids=[r[0] for r in INDEX_TABLE])
def test_succeeded_indexes(desc, replicas, extra, recorded, overrides, expected, created):
    job = model(tfjob(replicas, **extra))
    status = running_status(**({"succeededIndexes": recorded} if recorded is not None else {}))
    job = with_status(job, **status)
    plan = run(job, observed(job, **overrides))
    after = plan.status or job.status
    assert after.get("succeededIndexes") == expected
    assert names(plan.create) == created
    assert after["replicaStatuses"]["Worker"]["succeeded"] == sum(
        len(parse_indexes(text, 100)) for text in (expected or {}).values())


def test_all_workers_succeed_with_deleted_ones_counted():
    job = model(tfjob({"PS": 1, "Worker": 3}, successPolicy="AllWorkers"))
    job = with_status(job, **running_status(succeededIndexes={"Worker": "0-1"}))
    plan = run(job, observed(job, worker_0=None, worker_1=None, worker_2=OK))
    assert last_condition(plan.status)["type"] == "Succeeded"
    assert _counts(plan.status, "Worker") == (0, 3, 0)
    assert plan.create == []


def test_worker0_remembered_decides_success():
    """Worker 0 succeeded and was deleted before the job's success was written (a crash): still success."""
    job = model(tfjob({"PS": 1, "Worker": 3}))
    job = with_status(job, **running_status(succeededIndexes={"Worker": "0"}))
    plan = run(job, observed(job, worker_0=None))
    assert last_condition(plan.status)["type"] == "Succeeded"
    assert plan.create == []


def test_suspend_forgets_succeeded_indexes():
    job = model(tfjob({"Chief": 1, "Worker": 2}, runPolicy={"suspend": True}))
    job = with_status(job, **running_status(succeededIndexes={"Worker": "1"}))
    plan = run(job, observed(job, worker_1=None))
    assert "succeededIndexes" not in plan.status
    # resumed: every replica runs again
    resumed = model(tfjob({"Chief": 1, "Worker": 2}))
    resumed = with_status(resumed, **plan.status)
    again = run(resumed, Observed())
    assert "Pod/tf-job-worker-1" in names(again.create)


def test_finished_job_keeps_its_succeeded_indexes_as_written():
    """An operator restart writes nothing to a finished job, whatever its pods say now."""
    job = _chief_job()
    job = with_status(job, **running_status(ago(3600), cond(S.SUCCEEDED), completionTime=ago(5)))
    written = run(job, Observed()).status  # finished before tfop remembered indices (or under upstream)
    assert "succeededIndexes" not in written
    plan = run(with_status(job, **written), observed(job, phase="Succeeded"))
    assert plan.status is None


# (description, job finished, a worker failed since, the status written): tfReplicaStatuses as older tfop
# wrote it (the selectors too) stays while its counters are right; once they change, the counters only.
LEGACY_TABLE = [
    ("running job, same counts: kept, no write", False, False, None),
    ("finished job: kept, no write", True, False, None),
    ("running job, a worker failed since: the counters only", False, True,
     {"active": 1, "succeeded": 0, "failed": 1}),
]


@pytest.mark.parametrize("desc,finished,failed,written", LEGACY_TABLE, ids=[r[0] for r in LEGACY_TABLE])
def test_legacy_replica_statuses_of_older_tfop(desc, finished, failed, written):
    job = model(tfjob({"PS": 1, "Worker": rspec(replicas=2, restart_policy="Never")},
                      **({"enableDynamicWorker": True} if failed else {})))
    extra = (cond(S.SUCCEEDED),) if finished else ()
    job = with_status(job, **running_status(ago(3600), *extra))
    phase = "Succeeded" if finished else "Running"
    settled = run(job, observed(job, phase=phase)).status
    old = with_status(job, **{**settled, "tfReplicaStatuses": settled["replicaStatuses"]})
    failure = {"worker_1": {"phase": "Failed", "exit_code": 1}} if failed else {}
    plan = run(old, observed(job, phase=phase, **failure))
    got = plan.status and plan.status["tfReplicaStatuses"]
    assert (got and got["Worker"]) == written


def _gang_ctx():
    from tfop.gang.registry import load_backend
    backend, _ = load_backend("volcano")
    return context(backend=backend, enable_gang_scheduling=True, gang_scheduler_name="volcano")


def _gang_obs(job, vanished=(), **overrides):
    from tfop.children.pod import PodOptions
    from tfop.gang.registry import load_backend
    ctx = _gang_ctx()
    plan = run(job, Observed(), ctx=ctx)
    group = {**plan.create_group, "metadata": {**plan.create_group["metadata"], "uid": "uid-group"},
             "status": {"phase": "Running"}}
    return Observed(pods=all_pods(job, "Running", **overrides), services=all_services(job), group=group,
                    vanished=frozenset(vanished)), ctx


def test_gang_deleted_succeeded_member_is_not_lost():
    job = model(tfjob({"Chief": 1, "Worker": rspec(replicas=2, restart_policy="ExitCode")}))
    job = with_status(job, **running_status(succeededIndexes={"Worker": "1"}))
    obs, ctx = _gang_obs(job, vanished={"tf-job-worker-1"}, worker_1=None)
    plan = run(job, obs, ctx=ctx)
    assert plan.delete == [] and plan.create == []
    status = plan.status or job.status
    assert "restartCount" not in status
    assert "reason" not in status.get("gang", {})  # 2 running + 1 succeeded: the gang is whole


def test_gang_restart_forgets_succeeded_indexes():
    job = model(tfjob({"Chief": 1, "Worker": rspec(replicas=2, restart_policy="ExitCode")}))
    job = with_status(job, **running_status(succeededIndexes={"Worker": "1"}))
    obs, ctx = _gang_obs(job, worker_1=None, worker_0=dict(phase="Failed", exit_code=137))
    plan = run(job, obs, ctx=ctx)
    assert plan.status["restartCount"] == 1
    assert "succeededIndexes" not in plan.status
    assert refs(plan) == ["Pod/tf-job-chief-0", "Pod/tf-job-worker-0"]
    # once the old members are gone the whole gang, worker-1 included, is created again
    job = with_status(job, **plan.status)
    again = run(job, Observed(services=all_services(job), group=obs.group), ctx=ctx)
    assert sorted(names(again.create)) == ["Pod/tf-job-chief-0", "Pod/tf-job-worker-0", "Pod/tf-job-worker-1"]


# -- backoffLimit: kubelet restarts and tfop's re-creations add up ---------
def test_backoff_adds_recreations_to_kubelet_restarts():
    job = model(tfjob({"Worker": rspec(replicas=2, restart_policy="OnFailure")}, runPolicy={"backoffLimit": 2}))
    job = with_status(job, **running_status(restartCount=2))
    plan = run(job, observed(job, worker_0=dict(restarts=1)))
    assert last_condition(plan.status)["type"] == "Failed"
    ok = run(with_status(job, **running_status(restartCount=1)), observed(job, worker_0=dict(restarts=1)))
    assert (ok.status or job.status)["conditions"][-1]["type"] == "Running"


def test_gang_requeue_forgets_the_succeeded_pods_it_deletes():
    """After scheduleTimeoutSeconds with on-schedule-timeout Requeue every pod is created again,
    a succeeded one too: it is not remembered."""
    job = model(tfjob({"Chief": 1, "Worker": 2}, annotations={"tfop.kubeflow.org/on-schedule-timeout": "Requeue"},
                      runPolicy={"schedulingPolicy": {"scheduleTimeoutSeconds": 60}}))
    job = with_status(job, conditions=[cond(S.CREATED)], startTime=ago(61),
                      gang={"backend": "volcano", "group": "tf-job", "phase": "Inqueue", "reason": "Pending",
                            "message": "pending", "since": ago(61)})
    obs, ctx = _gang_obs(job, chief_0=dict(phase="Pending"), worker_0=dict(phase="Pending"), worker_1=OK)
    plan = run(job, obs, ctx=ctx)
    assert "Pod/tf-job-worker-1" in refs(plan)
    assert "succeededIndexes" not in plan.status


def test_a_job_whose_pods_ran_and_failed_between_two_passes_says_it_ran():
    """As upstream: Running is recorded, then turned False by the failure, also when one pass sees both."""
    job = model(tfjob({"PS": 1, "Worker": rspec(replicas=2, restart_policy="Never")}))
    job = with_status(job, conditions=[cond(S.CREATED)], startTime=ago(60))
    plan = run(job, observed(job, worker_1=dict(phase="Failed", exit_code=1)))
    assert ctypes(plan.status) == [("Created", "True"), ("Running", "False"), ("Failed", "True")]


def test_a_job_that_fails_before_any_pod_ran_has_no_running_condition():
    job = model(tfjob({"PS": 1, "Worker": rspec(replicas=2, restart_policy="Never")}))
    job = with_status(job, conditions=[cond(S.CREATED)], startTime=ago(60))
    plan = run(job, observed(job, phase="Pending", worker_1=dict(phase="Failed", exit_code=1)))
    assert ctypes(plan.status) == [("Created", "True"), ("Failed", "True")]
