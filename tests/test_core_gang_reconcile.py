"""reconcile() with gang backends: group first, admission, finish/suspend, gang restart, timeouts."""
from dataclasses import replace
from functools import partial
from datetime import timedelta

import pytest

from core_fixtures import (
    NOW, NOW_S, ago, all_pods, all_services, cond, context, ctypes, last_condition, model, names, pod,
    pod_template, refs, rspec, run, running_status, tfjob, with_status,
)
from tfop.api import conditions as S
from tfop.children.pod import PodOptions
from tfop.gang.registry import load_backend
from tfop.core.plan import Event
from tfop.core.reconcile import reconcile
from tfop.core.context import Observed
from tfop.core.gang_step import only_progress, recheck_after
from tfop.runtime.holding import STARTING_HOLD, hold_limits
from tfop.core.outcomes import FailedWrite

BACKENDS = ["volcano", "scheduler-plugins", "kube-arbitrator", "kubernetes"]
GROUP = {
    "volcano": ("scheduling.volcano.sh/v1beta1", "PodGroup", "podgroups",
                {"minMember": 3, "minTaskMember": {"ps": 1, "worker": 2}, "queue": "default"}),
    "scheduler-plugins": ("scheduling.x-k8s.io/v1alpha1", "PodGroup", "podgroups", {"minMember": 3}),
    "kube-arbitrator": ("policy/v1", "PodDisruptionBudget", "poddisruptionbudgets",
                        {"minAvailable": 3, "selector": {"matchLabels": {"training.kubeflow.org/job-name": "tf-job"}}}),
    "kubernetes": ("scheduling.k8s.io/v1beta1", "PodGroup", "podgroups",
                   {"schedulingPolicy": {"gang": {"minCount": 3}}, "disruptionMode": {"all": {}}}),
}
SCHEDULER = {"volcano": "volcano", "scheduler-plugins": "scheduler-plugins-scheduler",
             "kube-arbitrator": "kube-batchd", "kubernetes": None}
MARKINGS = {  # (labels, annotations) each pod gets from the backend, besides the generation annotation
    "volcano": ({}, {"scheduling.k8s.io/group-name": "tf-job", "volcano.sh/task-spec": "worker"}),
    "scheduler-plugins": ({"scheduling.x-k8s.io/pod-group": "tf-job"}, {}),
    "kube-arbitrator": ({}, {}),
    "kubernetes": ({}, {}),  # a spec field instead: test_kubernetes_pods_name_their_group
}
SERVICES = ["Service/tf-job-ps-0", "Service/tf-job-worker-0", "Service/tf-job-worker-1"]
PODS = ["Pod/tf-job-ps-0", "Pod/tf-job-worker-0", "Pod/tf-job-worker-1"]


def ctx(name, **settings):
    backend, _ = load_backend(name)
    return context(backend=backend, enable_gang_scheduling=True, gang_scheduler_name=name, **settings)


def gang_job(replicas=None, annotations=None, **run_policy):
    return model(tfjob(replicas or {"PS": 1, "Worker": rspec(replicas=2, restart_policy="ExitCode")},
                       annotations=annotations, runPolicy=run_policy or None))


def group_of(plan_group, phase=None, conditions=None, deleting=False):
    g = {**plan_group, "metadata": {**plan_group["metadata"], "uid": "uid-group"}}
    status = {}
    if phase:
        status["phase"] = phase
    if conditions:
        status["conditions"] = conditions
    if status:
        g["status"] = status
    if deleting:
        g["metadata"]["deletionTimestamp"] = ago(1)
    return g


def desired_group(name, job=None):
    """The group a pass creates for `job` (as a new job: one timed out already gets none)."""
    job = job or gang_job()
    return run(with_status(job), ctx=ctx(name)).create_group


def gang_pod(job, rtype, index, name="volcano", generation=0, **state):
    backend, _ = load_backend(name)
    from tfop.gang.shape import compute_shape
    shape = compute_shape(job, {})
    options = PodOptions(scheduler_name=backend.scheduler_name, markings=backend.pod_markings(
        job, job.replica(rtype), index, shape), extra_annotations={"tfop.kubeflow.org/gang-generation": str(generation)})
    return pod(job, rtype, index, options=options, **state)


def gang_pods(job, name="volcano", phase="Running", **overrides):
    return all_pods(job, phase, make=lambda j, rtype, i, **kw: gang_pod(j, rtype, i, name, **kw), **overrides)


# -- the group object first --------------------------------------------------------------------------------
@pytest.mark.parametrize("name", BACKENDS)
def test_group_created_first(name):
    plan = run(gang_job(), ctx=ctx(name))
    api_version, kind, _, spec = GROUP[name]
    g = plan.create_group
    assert (g["apiVersion"], g["kind"], g["metadata"]["name"], g["metadata"]["namespace"]) == (
        api_version, kind, "tf-job", "ml")
    assert g["spec"] == spec
    assert g["metadata"]["ownerReferences"][0]["uid"] == gang_job().uid
    pods = [] if name == "volcano" else PODS  # Volcano: pods only once the group is admitted
    assert names(plan.create) == SERVICES + pods
    assert plan.create_together == bool(pods)  # a gang's members all in one batch (create_batches)
    assert plan.events[0].reason == "SuccessfulCreate"
    assert plan.events[0].message.startswith(f"created {kind.lower()} tf-job, service tf-job-ps-0")
    for p in plan.create[3:]:
        labels, annotations = MARKINGS[name]
        assert p["spec"].get("schedulerName") == SCHEDULER[name]
        assert labels.items() <= p["metadata"]["labels"].items()
        if p["metadata"]["name"].startswith("tf-job-worker"):
            assert annotations.items() <= p["metadata"]["annotations"].items()
        assert p["metadata"]["annotations"]["tfop.kubeflow.org/gang-generation"] == "0"


def test_kubernetes_pods_name_their_group_and_share_its_priority():
    job = gang_job(schedulingPolicy={"priorityClass": "high"})
    plan = run(job, Observed(priority_values={"high": 1000}), ctx=ctx("kubernetes"))
    assert plan.create_group["spec"]["priorityClassName"] == "high"
    assert names(plan.create) == SERVICES + PODS
    for pod in plan.create[3:]:
        assert pod["spec"]["schedulingGroup"] == {"podGroupName": "tf-job"}
        assert pod["spec"]["priorityClassName"] == "high"


def _placed_group(job):
    return group_of(desired_group("kubernetes", job), conditions=[
        {"type": "PodGroupInitiallyScheduled", "status": "True", "reason": "Scheduled", "message": ""}])


def test_kubernetes_gang_restart_renews_the_group():
    """The PodGroup that placed a gang judges no other: after a whole-gang restart it is deleted and,
    once gone, created again before the new pods."""
    job, _ = _running_gang("kubernetes", restart_count=1)
    placed = _placed_group(job)
    going = gang_pods(job, "kubernetes", ps_0=dict(deleting=True), worker_0=dict(deleting=True),
                      worker_1=dict(deleting=True))
    plan = run(job, Observed(pods=going, services=all_services(job), group=placed), ctx=ctx("kubernetes"))
    assert refs(plan) == ["PodGroup/tf-job"] and plan.create == [] and plan.create_group is None
    assert plan.status["gang"]["message"] == ("waiting for pods: 0 of the gang's 3 exist, and kubernetes places "
                                              "none of them until all do")
    waiting = with_status(job, **plan.status)
    # the old group terminating (its finalizer goes with the last pod that names it): nothing is made
    plan = run(waiting, Observed(services=all_services(job), group=group_of(placed, deleting=True)),
               ctx=ctx("kubernetes"))
    assert plan.create == [] and plan.create_group is None and plan.delete == []
    assert plan.status is None or "waiting for the previous PodGroup" in plan.status["gang"]["schedulerMessage"]
    # gone: the group anew, then the pods, in one pass (the group is created first)
    plan = run(waiting, Observed(services=all_services(job)), ctx=ctx("kubernetes"))
    assert plan.create_group["metadata"]["name"] == "tf-job" and names(plan.create) == PODS


def test_kubernetes_gang_short_of_refused_pods_says_it_waits_for_them():
    """kube-scheduler places none of a gang's pods until all exist, and says nothing meanwhile."""
    job = with_status(gang_job(), conditions=[cond(S.CREATED)], startTime=ago(5))
    quota = FailedWrite("create", "Pod", "tf-job-worker-1", 403,
                        'pods "tf-job-worker-1" is forbidden: exceeded quota: pods, requested: pods=1, used: pods=2, '
                        'limited: pods=2')
    first = [p for p in gang_pods(job, "kubernetes", phase="Pending") if not p["metadata"]["name"].endswith("worker-1")]
    plan = run(job, Observed(pods=first, services=all_services(job), group=group_of(desired_group("kubernetes", job)),
                             refusals=(quota,), refused_at=NOW - timedelta(seconds=0.5)), ctx=ctx("kubernetes"))
    assert plan.status["gang"]["message"] == ("waiting for pods: 2 of the gang's 3 exist, and kubernetes places none "
                                              "of them until all do")
    assert ("Blocked", "True") in ctypes(plan.status)


def test_kubernetes_keeps_the_group_of_a_gang_it_placed():
    job, _ = _running_gang("kubernetes")
    plan = run(job, Observed(pods=gang_pods(job, "kubernetes"), services=all_services(job),
                             group=_placed_group(job)), ctx=ctx("kubernetes"))
    assert plan.delete == [] and plan.create_group is None and plan.patch == []


# (group phase, pods created?)
VOLCANO_PHASES = [(None, False), ("", False), ("Pending", False), ("Inqueue", True), ("Running", True)]


@pytest.mark.parametrize("phase,admitted", VOLCANO_PHASES)
def test_volcano_pods_only_after_pending(phase, admitted):
    job = gang_job()
    job = with_status(job, conditions=[cond(S.CREATED)], startTime=ago(5))
    group = None if phase is None else group_of(desired_group("volcano"), phase=phase or None)
    plan = run(job, Observed(services=all_services(job), group=group), ctx=ctx("volcano"))
    assert names(plan.create) == (PODS if admitted else [])
    assert (plan.create_group is not None) == (phase is None)
    assert plan.status["gang"]["backend"] == "volcano"
    assert plan.status["gang"]["reason"] == ("Pending" if admitted else "PodGroupPending")


@pytest.mark.parametrize("phase", [None, "", "Pending", "Inqueue"])
def test_volcano_pods_with_the_group_when_no_webhook_refuses_them(phase):
    """Context.pods_before_admission (the operator's dry-run probe found no Volcano pod webhook):
    the pods go with the group, even in the pass that creates it (the group is created first)."""
    job = with_status(gang_job(), conditions=[cond(S.CREATED)], startTime=ago(5))
    group = None if phase is None else group_of(desired_group("volcano"), phase=phase or None)
    context = replace(ctx("volcano"), pods_before_admission=True)
    plan = run(job, Observed(services=all_services(job), group=group), ctx=context)
    assert names(plan.create) == PODS
    assert (plan.create_group is not None) == (phase is None)
    for pod in plan.create:
        assert pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "tf-job"


def test_volcano_admission_probe_names_a_group_that_does_not_exist():
    backend, _ = load_backend("volcano")
    probe = backend.admission_probe("ml")
    assert probe["metadata"]["namespace"] == "ml" and probe["spec"]["schedulerName"] == "volcano"
    assert probe["metadata"]["annotations"]["scheduling.k8s.io/group-name"] != "tf-job"
    assert all(load_backend(n)[0].admission_probe("ml") is None for n in BACKENDS if n != "volcano")


@pytest.mark.parametrize("name", BACKENDS)
def test_group_not_recreated_or_patched_when_unchanged(name):
    job = with_status(gang_job(), **running_status())
    group = group_of(desired_group(name), phase="Running")
    plan = run(job, Observed(pods=gang_pods(job, name), services=all_services(job), group=group), ctx=ctx(name))
    assert plan.create_group is None and plan.patch == [] and plan.create == [] and plan.delete == []


def test_group_patched_when_the_job_changes():
    job = with_status(gang_job(), **running_status())
    group = group_of(desired_group("volcano"), phase="Running")
    bigger = with_status(model(tfjob({"PS": 1, "Worker": rspec(replicas=3, restart_policy="ExitCode")})),
                         **running_status())
    plan = run(bigger, Observed(pods=gang_pods(job), services=all_services(job), group=group), ctx=ctx("volcano"))
    assert [(r.name, body) for r, body in plan.patch] == [
        ("tf-job", {"spec": {"minMember": 4, "minTaskMember": {"ps": 1, "worker": 3}}})]


# -- finished and suspended: the group goes, and never comes back (#1011) -----------------------------------
@pytest.mark.parametrize("name", BACKENDS)
def test_group_deleted_when_job_succeeds_and_not_recreated(name):
    job = with_status(gang_job(), **running_status())
    group = group_of(desired_group(name), phase="Running")
    _, kind, plural, _ = GROUP[name]
    obs = Observed(pods=gang_pods(job, name, worker_0=dict(phase="Succeeded", exit_code=0)),
                   services=all_services(job), group=group)
    plan = run(job, obs, ctx=ctx(name))
    assert last_condition(plan.status)["type"] == "Succeeded"
    assert refs(plan) == [f"{kind}/tf-job"]
    assert plan.delete[0].plural == plural
    assert "gang" not in plan.status
    finished = with_status(job, **plan.status)
    # while the group is terminating: not deleted again
    again = run(finished, Observed(pods=obs.pods, services=obs.services, group=group_of(group, deleting=True)),
                ctx=ctx(name))
    assert again.delete == [] and again.create_group is None
    # once gone: never created again
    gone = run(finished, Observed(pods=obs.pods, services=obs.services), ctx=ctx(name))
    assert gone.create_group is None and gone.create == [] and gone.writes == 0


@pytest.mark.parametrize("name", BACKENDS)
def test_group_deleted_when_suspended(name):
    job = model(tfjob({"PS": 1, "Worker": 2}, runPolicy={"suspend": True}))
    job = with_status(job, **running_status(), gang={"backend": name, "group": "tf-job"})
    group = group_of(desired_group(name), phase="Running")
    _, kind, _, _ = GROUP[name]
    plan = run(job, Observed(pods=gang_pods(job, name), services=all_services(job), group=group), ctx=ctx(name))
    assert refs(plan)[-1] == f"{kind}/tf-job"
    assert len(refs(plan)) == 7 and plan.create_group is None
    assert "gang" not in plan.status
    assert last_condition(plan.status)["type"] == "Suspended"
    suspended = with_status(job, **plan.status)
    assert run(suspended, Observed(), ctx=ctx(name)).create_group is None


def test_terminating_group_of_suspended_job_not_deleted_again():
    job = model(tfjob({"PS": 1, "Worker": 2}, runPolicy={"suspend": True}))
    job = with_status(job, conditions=[cond(S.CREATED), cond(S.RUNNING, "False"), cond(S.SUSPENDED)])
    group = group_of(desired_group("volcano"), phase="Running", deleting=True)
    plan = run(job, Observed(group=group), ctx=ctx("volcano"))
    assert plan.delete == [] and plan.events == []


def test_failed_job_deletes_group():
    job = gang_job()
    job = with_status(job, **running_status())
    group = group_of(desired_group("volcano"), phase="Running")
    obs = Observed(pods=gang_pods(job, worker_1=dict(phase="Failed", exit_code=1)), services=all_services(job),
                   group=group)
    plan = run(job, obs, ctx=ctx("volcano"))
    assert last_condition(plan.status)["type"] == "Failed"
    assert refs(plan) == ["PodGroup/tf-job"]


# -- gang restart -----------------------------------------------------------------------------------------
def _running_gang(name="volcano", annotations=None, restart_count=None):
    job = gang_job(annotations=annotations)
    extra = {"restartCount": restart_count} if restart_count is not None else {}
    job = with_status(job, **running_status(), **extra)
    group = group_of(desired_group(name, job), phase="Running")
    return job, group


# (description, pod overrides making the gang break, why in the event)
BREAK_TABLE = [
    ("member failed with 137", {"worker_1": dict(phase="Failed", exit_code=137)},
     "tf-job-worker-1 exited with code 137"),
    ("member disappeared", {"worker_1": None}, "tf-job-worker-1 disappeared"),
]


@pytest.mark.parametrize("name", BACKENDS)
@pytest.mark.parametrize("desc,overrides,why", BREAK_TABLE, ids=[r[0] for r in BREAK_TABLE])
def test_gang_restart(name, desc, overrides, why):
    job, group = _running_gang(name)
    vanished = frozenset({"tf-job-worker-1"}) if overrides["worker_1"] is None else frozenset()
    obs = Observed(pods=gang_pods(job, name, **overrides), services=all_services(job), group=group,
                   vanished=vanished)
    plan = run(job, obs, ctx=ctx(name))
    survivors = [p for p in PODS if p != "Pod/tf-job-worker-1"] if overrides["worker_1"] is None else PODS
    assert refs(plan) == survivors
    assert plan.create == [] and plan.create_group is None
    assert plan.status["restartCount"] == 1
    assert ctypes(plan.status) == [("Created", "True"), ("Restarting", "True")]
    message = f"TFJob ml/tf-job restarts its whole gang because {why}."
    assert last_condition(plan.status)["message"] == message
    assert plan.events == [
        Event("Normal", "SuccessfulDelete", "deleted " + ", ".join(p.replace("Pod/", "pod ") for p in survivors)),
        Event("Warning", "GangRestart", message)]

    # next reconcile: old pods terminating -> nothing is created
    job = with_status(job, **plan.status)
    types = {"ps": "PS", "worker": "Worker"}
    terminating = [gang_pod(job, types[p.split("-")[-2]], int(p.split("-")[-1]), name, deleting=True)
                   for p in survivors]
    plan2 = run(job, Observed(pods=terminating, services=all_services(job), group=group), ctx=ctx(name))
    assert plan2.create == [] and plan2.delete == []
    assert plan2.status is None or plan2.status["restartCount"] == 1

    # once gone: the whole set, stamped with the new gang generation
    job = with_status(job, **(plan2.status or job.status))
    plan3 = run(job, Observed(services=all_services(job), group=group), ctx=ctx(name))
    assert names(plan3.create) == PODS
    assert {p["metadata"]["annotations"]["tfop.kubeflow.org/gang-generation"] for p in plan3.create} == {"1"}
    assert plan3.delete == [] and plan3.create_group is None


def test_gang_restart_counts_against_backoff_limit():
    job = model(tfjob({"PS": 1, "Worker": rspec(replicas=2, restart_policy="ExitCode")},
                      runPolicy={"backoffLimit": 1}))
    job = with_status(job, **running_status(restartCount=1))
    group = group_of(desired_group("volcano", job), phase="Running")
    obs = Observed(pods=gang_pods(job, worker_1=dict(phase="Failed", exit_code=137)), services=all_services(job),
                   group=group)
    plan = run(job, obs, ctx=ctx("volcano"))
    assert last_condition(plan.status)["type"] == "Failed"
    assert [e.reason for e in plan.events][-1] == "BackoffLimitExceeded"
    assert refs(plan) == ["Pod/tf-job-ps-0", "Pod/tf-job-worker-0", "PodGroup/tf-job"]


# (description, annotations, settings)
SINGLE_RESTART_TABLE = [
    ("annotation gang-restart false", {"tfop.kubeflow.org/gang-restart": "false"}, {}),
    ("annotation gang-restart False", {"tfop.kubeflow.org/gang-restart": "False"}, {}),
    ("--no-gang-restart", None, {"gang_restart": False}),
]


@pytest.mark.parametrize("desc,annotations,settings", SINGLE_RESTART_TABLE, ids=[r[0] for r in SINGLE_RESTART_TABLE])
def test_only_failed_pod_restarts(desc, annotations, settings):
    job, group = _running_gang(annotations=annotations)
    obs = Observed(pods=gang_pods(job, worker_1=dict(phase="Failed", exit_code=137)), services=all_services(job),
                   group=group)
    plan = run(job, obs, ctx=ctx("volcano", **settings))
    assert refs(plan) == ["Pod/tf-job-worker-1"]
    assert plan.status["restartCount"] == 1
    assert [e.reason for e in plan.events] == ["SuccessfulDelete", "TFJobRestarting"]
    assert last_condition(plan.status)["type"] == "Restarting"


def test_disappeared_member_without_gang_restart_is_recreated():
    job, group = _running_gang(annotations={"tfop.kubeflow.org/gang-restart": "false"})
    obs = Observed(pods=gang_pods(job, worker_1=None), services=all_services(job), group=group)
    plan = run(job, obs, ctx=ctx("volcano"))
    assert plan.delete == []
    assert names(plan.create) == ["Pod/tf-job-worker-1"]


def test_pod_never_created_is_not_a_lost_member():
    # e.g. a ResourceQuota refused it: recreate that pod, never restart the whole gang over it
    job, group = _running_gang()
    obs = Observed(pods=gang_pods(job, worker_1=None), services=all_services(job), group=group)
    plan = run(job, obs, ctx=ctx("volcano"))
    assert plan.delete == [] and names(plan.create) == ["Pod/tf-job-worker-1"]


def test_missing_pod_before_running_is_not_a_lost_member():
    job = with_status(gang_job(), conditions=[cond(S.CREATED)], startTime=ago(5))
    group = group_of(desired_group("volcano"), phase="Inqueue")
    obs = Observed(pods=gang_pods(job, phase="Pending", worker_1=None), services=all_services(job), group=group)
    plan = run(job, obs, ctx=ctx("volcano"))
    assert plan.delete == [] and names(plan.create) == ["Pod/tf-job-worker-1"]


# -- scheduleTimeoutSeconds -------------------------------------------------------------------------------------
def _waiting(name="volcano", waited=61, annotations=None, phase="Inqueue"):
    job = gang_job(annotations=annotations, schedulingPolicy={"scheduleTimeoutSeconds": 60})
    job = with_status(job, conditions=[cond(S.CREATED)], startTime=ago(waited),
                      gang={"backend": name, "group": "tf-job", "phase": phase, "reason": "Pending",
                            "message": "3 pods pending", "since": ago(waited)})
    group = group_of(desired_group(name, job), phase=phase)
    obs = Observed(pods=gang_pods(job, name, phase="Pending"), services=all_services(job), group=group)
    return job, obs


@pytest.mark.parametrize("name", BACKENDS)
def test_schedule_timeout_fails(name):
    job, obs = _waiting(name)
    plan = run(job, obs, ctx=ctx(name))
    c = last_condition(plan.status)
    assert (c["type"], c["status"]) == ("Failed", "True")
    assert c["message"].startswith("TFJob ml/tf-job failed: the gang was not scheduled within "
                                   "scheduleTimeoutSeconds=60: ")
    _, kind, _, _ = GROUP[name]
    assert refs(plan) == PODS + [f"{kind}/tf-job"]
    assert [e.reason for e in plan.events] == ["SuccessfulDelete", "GangScheduleTimeout"]
    assert plan.create == []


# (seconds the gang has waited of its 60, requeue after): the timeout, or the waiting gang's recheck
@pytest.mark.parametrize("waited,requeue", [(45, 15), (20, 30)])
def test_schedule_timeout_requeues_before_it(waited, requeue):
    job, obs = _waiting(waited=waited)
    plan = run(job, obs, ctx=ctx("volcano"))
    assert plan.requeue_after == requeue
    assert plan.delete == [] and plan.create == []
    assert plan.status is None or plan.status["gang"]["since"] == ago(waited)


def test_schedule_timeout_requeue_annotation_recreates_pods():
    job, obs = _waiting(annotations={"tfop.kubeflow.org/on-schedule-timeout": "Requeue"})
    plan = run(job, obs, ctx=ctx("volcano"))
    assert refs(plan) == PODS
    assert plan.create == []
    assert [e.reason for e in plan.events] == ["SuccessfulDelete", "GangRequeued"]
    assert plan.status["gang"]["since"] == NOW_S
    assert plan.requeue_after == 30  # the waiting gang's recheck comes before its new timeout (60)
    assert not S.is_finished(plan.status["conditions"])
    # the pods are gone: created again, the gang waits afresh
    job = with_status(job, **plan.status)
    again = run(job, Observed(services=obs.services, group=obs.group), ctx=ctx("volcano"))
    assert names(again.create) == PODS
    assert again.delete == []


def test_running_gang_has_no_timeout():
    job, obs = _waiting()
    obs = Observed(pods=gang_pods(job), services=obs.services, group=obs.group)
    plan = run(job, obs, ctx=ctx("volcano"))
    assert last_condition(plan.status)["type"] == "Running"
    # whole: the group's phase (still Inqueue here) is no longer the job's news, nor a recheck due
    assert plan.status["gang"] == {"backend": "volcano", "group": "tf-job"}
    assert plan.requeue_after is None


# -- status.gang: why the gang waits ------------------------------------------------------------------------------
VOLCANO_UNSCHEDULABLE = {"type": "Unschedulable", "status": "True", "reason": "NotEnoughResources",
                         "message": "3/3 tasks in gang unschedulable: pod group is not ready, 3 minAvailable"}
POD_MESSAGE = "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."

# (backend, group phase, group conditions, pods unschedulable?, expected status.gang): without a capacity
# snapshot tfop's sentence says only what the gang waits for; the scheduler's words are kept beside it.
GANG_STATUS_TABLE = [
    ("volcano", "Pending", [VOLCANO_UNSCHEDULABLE], False,
     {"backend": "volcano", "group": "tf-job", "phase": "Pending", "reason": "NotEnoughResources",
      "message": "waiting for volcano to place 3 pods as one gang",
      "schedulerMessage": "PodGroup is Pending: 3/3 tasks in gang unschedulable: pod group is not ready, 3 minAvailable",
      "since": NOW_S}),
    ("volcano", "Inqueue", [], True,
     {"backend": "volcano", "group": "tf-job", "phase": "Inqueue", "reason": "Unschedulable",
      "message": "waiting for volcano to place 3 pods as one gang",
      "schedulerMessage": f"PodGroup is Inqueue; 3/3 pods unschedulable: {POD_MESSAGE}", "since": NOW_S}),
    ("scheduler-plugins", "Pending", [], True,
     {"backend": "scheduler-plugins", "group": "tf-job", "phase": "Pending", "reason": "Unschedulable",
      "message": "waiting for scheduler-plugins to place 3 pods as one gang",
      "schedulerMessage": f"PodGroup is Pending; 3/3 pods unschedulable: {POD_MESSAGE}", "since": NOW_S}),
    ("kube-arbitrator", None, [], True,
     {"backend": "kube-arbitrator", "group": "tf-job", "reason": "Unschedulable",
      "message": "waiting for kube-arbitrator to place 3 pods as one gang",
      "schedulerMessage": f"3/3 pods unschedulable: {POD_MESSAGE}", "since": NOW_S}),
]


@pytest.mark.parametrize("name,phase,conditions,unschedulable,expected", GANG_STATUS_TABLE,
                         ids=[f"{r[0]}-{r[1]}" for r in GANG_STATUS_TABLE])
def test_gang_status_pending_reason(name, phase, conditions, unschedulable, expected):
    job = with_status(gang_job(), conditions=[cond(S.CREATED)], startTime=ago(5))
    group = group_of(desired_group(name), phase=phase, conditions=conditions)
    pods = [] if name == "volcano" and phase == "Pending" else gang_pods(
        job, name, phase="Pending", **{k: dict(unschedulable=POD_MESSAGE if unschedulable else None)
                                       for k in ("ps_0", "worker_0", "worker_1")})
    plan = run(job, Observed(pods=pods, services=all_services(job), group=group), ctx=ctx(name))
    assert plan.status["gang"] == expected


def test_a_placed_gang_is_on_its_way_whatever_its_scheduler_said_before_binding():
    """Volcano leaves its NotEnoughResources condition on a group it has since placed whole: the gang
    only starts (a reason holding.py lets wait), with no Warning and no write to its group."""
    job = with_status(gang_job(), conditions=[cond(S.CREATED)], startTime=ago(5))
    group = group_of(desired_group("volcano"), phase="Running", conditions=[VOLCANO_UNSCHEDULABLE])
    pods = gang_pods(job, "volcano", phase="Pending")
    for p in pods:
        p["status"]["conditions"].append({"type": "PodScheduled", "status": "True"})
    plan = run(job, Observed(pods=pods, services=all_services(job), group=group), ctx=ctx("volcano"))
    gang = plan.status["gang"]
    assert (gang["reason"], gang["message"]) == ("Pending", "all 3 pods of the gang are placed; waiting for them to start")
    assert gang["schedulerMessage"].startswith("PodGroup is Running: 3/3 tasks in gang unschedulable")
    assert plan.patch == [] and plan.events == []


def test_gang_since_kept_while_waiting():
    job = with_status(gang_job(), conditions=[cond(S.CREATED)], startTime=ago(30),
                      gang={"backend": "volcano", "group": "tf-job", "since": ago(30)})
    group = group_of(desired_group("volcano"), phase="Pending")
    plan = run(job, Observed(services=all_services(job), group=group), ctx=ctx("volcano"))
    assert plan.status["gang"]["since"] == ago(30)


# -- touching an unschedulable gang's group (scheduler-plugins retries it only on a group change) ----------------
RETRY = "tfop.kubeflow.org/gang-retry"


def _unschedulable(name, waited, touched=None, capacity=None, message=POD_MESSAGE):
    job = with_status(gang_job(), conditions=[cond(S.CREATED)], startTime=ago(waited),
                      gang={"backend": name, "group": "tf-job", "since": ago(waited)})
    group = group_of(desired_group(name), phase="Scheduling" if name == "scheduler-plugins" else "Inqueue")
    if touched is not None:
        group["metadata"]["annotations"] = {**group["metadata"].get("annotations", {}), RETRY: ago(touched)}
    pods = gang_pods(job, name, phase="Pending",
                     **{k: dict(unschedulable=message) for k in ("ps_0", "worker_0", "worker_1")})
    return run(job, Observed(pods=pods, services=all_services(job), group=group, capacity=capacity), ctx=ctx(name))


# (backend, waited since the gang began waiting, seconds since the last touch, touch now?, requeue after)
TOUCH_TABLE = [
    ("scheduler-plugins", 10, None, False, 20),
    ("scheduler-plugins", 30, None, True, 30),
    ("scheduler-plugins", 95, 12, False, 18),
    ("scheduler-plugins", 95, 31, True, 30),
    ("volcano", 95, None, False, 95),  # Volcano retries every scheduling period by itself: no touch,
    ("kube-arbitrator", 95, None, False, 95),  # only the waiting gang's recheck (after as long as it waited)
]


@pytest.mark.parametrize("name,waited,touched,touch,requeue", TOUCH_TABLE)
def test_unschedulable_gang_group_touched(name, waited, touched, touch, requeue):
    plan = _unschedulable(name, waited, touched)
    patches = [(ref.kind, ref.name, patch) for ref, patch in plan.patch]
    assert patches == ([("PodGroup", "tf-job", {"metadata": {"annotations": {RETRY: NOW_S}}})] if touch else [])
    assert plan.requeue_after == requeue
    assert plan.delete == [] and plan.create == []


ECHO = "0/4 nodes are available: 4 optimistic rejection in PostFilter."
# (waited since the gang began waiting, seconds since the last touch, touch now?, requeue after): while
# every pod only echoes a sibling's rejection, touches come 1, 2, 4 ... s into the wait, then every 30 s
ECHO_TOUCH_TABLE = [
    (5, None, True, 5),
    (5, 4, True, 5),  # last touched 1 s into the wait
    (10, 2, False, 6),  # last touched 8 s into it: the next 16 s into it
    (95, 12, False, 18),
    (95, 31, True, 30),
]


@pytest.mark.parametrize("waited,touched,touch,requeue", ECHO_TOUCH_TABLE)
def test_unschedulable_gang_group_touched_soon_while_its_pods_only_echo(waited, touched, touch, requeue):
    plan = _unschedulable("scheduler-plugins", waited, touched, message=ECHO)
    assert [ref.name for ref, _ in plan.patch] == (["tf-job"] if touch else [])
    assert plan.requeue_after == requeue


# (seconds waited, looked at again after): as long as it waited, from 30 s to 4 min
@pytest.mark.parametrize("waited,after", [(None, 30), (0, 30), (29, 30), (31, 31), (95, 95), (240, 240),
                                          (3600, 240)])
def test_a_waiting_gang_is_rechecked_after_as_long_as_it_waited(waited, after):
    assert recheck_after(waited) == after


def _freed(seconds_ago, fits=True):
    from tfop.core.room import Capacity, NodeRoom
    big = 10**9  # a gang of pods without requests fits any Ready node; none that is not Ready
    return Capacity((NodeRoom("n", {"cpu": big, "memory": big, "pods": big}, ready=fits),),
                    grew_at=NOW - timedelta(seconds=seconds_ago))


# (seconds since the last touch, since room was freed, does the room fit the gang, touch now?, requeue after)
ROOM_TOUCH_TABLE = [
    (12, 5, True, True, 30),  # room freed since the last touch: the scheduler is told now, not 18 s later
    (3, 10, True, False, 27),  # freed before it: the periodic touch
    (12, 5, False, False, 18),  # freed, but not enough for the gang
]


@pytest.mark.parametrize("touched,freed,fits,touch,requeue", ROOM_TOUCH_TABLE)
def test_unschedulable_gang_group_touched_when_room_it_fits_is_freed(touched, freed, fits, touch, requeue):
    plan = _unschedulable("scheduler-plugins", 95, touched, capacity=_freed(freed, fits))
    assert [ref.name for ref, _ in plan.patch] == (["tf-job"] if touch else [])
    assert plan.requeue_after == requeue
    if not fits:  # its pods request nothing: only the lack of any node keeps them off
        assert plan.status["gang"]["message"] == (
            "waiting for scheduler-plugins to place 3 pods as one gang; no node takes a ps pod (Ready, "
            "schedulable, and matching its nodeSelector, affinity and tolerations)")


def test_running_gang_group_not_touched():
    job = with_status(gang_job(), conditions=[cond(S.CREATED)], startTime=ago(95),
                      gang={"backend": "scheduler-plugins", "group": "tf-job", "since": ago(95)})
    group = group_of(desired_group("scheduler-plugins"), phase="Running")
    plan = run(job, Observed(pods=gang_pods(job, "scheduler-plugins"), services=all_services(job), group=group),
               ctx=ctx("scheduler-plugins"))
    assert plan.patch == []


# -- invalid gangs --------------------------------------------------------------------------------------------------
def test_mixed_priorities_fail_invalid_gang():
    job = model(tfjob({"PS": rspec(template=pod_template(priorityClassName="high")),
                       "Worker": rspec(replicas=2, template=pod_template(priorityClassName="low"))}))
    plan = run(job, Observed(priority_values={"high": 1000, "low": 10}), ctx=ctx("volcano"))
    assert plan.create_group is None and plan.create == []
    c = last_condition(plan.status)
    assert (c["type"], c["status"]) == ("Failed", "True")
    assert c["message"] == (
        "the gang cannot be formed: spec.tfReplicaSpecs.Worker.template.spec.priorityClassName: pods of one gang "
        "must share one priority, but Worker uses 'low' (10) and PS uses 'high' (1000); give every replica type "
        "the same priorityClassName, or none")
    assert [e.reason for e in plan.events] == ["InvalidGang"]
    again = run(with_status(job, **plan.status), Observed(), ctx=ctx("volcano"))
    assert again.writes == 0 and again.create_group is None


def test_warning_shape_problems_do_not_fail():
    job = gang_job(schedulingPolicy={"minAvailable": 10})
    plan = run(job, ctx=ctx("scheduler-plugins"))
    assert not S.is_finished(plan.status["conditions"])
    assert plan.create_group["spec"]["minMember"] == 10


def test_zero_replicas_no_group():
    job = model(tfjob({"Worker": 0}))
    for name in BACKENDS:
        plan = run(job, ctx=ctx(name))
        assert plan.create_group is None and plan.create == []


def test_template_scheduler_name_kept_with_warning():
    job = model(tfjob({"Worker": rspec(replicas=2, template=pod_template(schedulerName="kube-batch"))}))
    plan = run(job, ctx=ctx("scheduler-plugins"))
    pods = [o for o in plan.create if o["kind"] == "Pod"]
    assert {p["spec"]["schedulerName"] for p in pods} == {"kube-batch"}
    warnings = [e for e in plan.events if e.reason == "SchedulerNameKept"]
    assert len(warnings) == 1 and warnings[0].type == "Warning"


def test_resume_creates_the_group_again():
    job = gang_job()
    job = with_status(job, conditions=[cond(S.CREATED), cond(S.RUNNING, "False", reason="TFJobSuspended"),
                                       cond(S.SUSPENDED)], startTime=ago(600))
    plan = run(job, Observed(), ctx=ctx("volcano"))
    assert plan.create_group["kind"] == "PodGroup"
    assert names(plan.create) == SERVICES  # pods once Volcano admits the group
    assert last_condition(plan.status)["reason"] == "TFJobResumed"
    assert plan.status["gang"]["since"] == NOW_S


def test_deadline_exceeded_deletes_group_and_pods():
    job = gang_job(activeDeadlineSeconds=30)
    job = with_status(job, **running_status(start=ago(31)))
    group = group_of(desired_group("volcano"), phase="Running")
    plan = run(job, Observed(pods=gang_pods(job), services=all_services(job), group=group), ctx=ctx("volcano"))
    assert last_condition(plan.status)["type"] == "Failed"
    assert refs(plan) == ["Pod/tf-job-ps-0", "Pod/tf-job-worker-0", "Pod/tf-job-worker-1", "PodGroup/tf-job"]
    assert plan.create_group is None


def test_gang_message_keeps_the_cause_when_pods_only_echo_it():
    """Coscheduling writes the cause on the pod that did not fit and echoes on its siblings; once
    that pod is retried, every pod may show only the echo: status.gang keeps the cause."""
    echo = "0/1 nodes are available: 1 optimistic rejection in PostFilter."
    job = gang_job()
    group = group_of(desired_group("scheduler-plugins"), phase="Pending")
    cause = f"PodGroup is Pending; 3/3 pods unschedulable: {POD_MESSAGE}"
    job = with_status(job, conditions=[cond(S.CREATED)], startTime=ago(5),
                      gang={"backend": "scheduler-plugins", "group": "tf-job", "phase": "Pending",
                            "reason": "Unschedulable", "schedulerMessage": cause, "since": ago(5)})
    pods = gang_pods(job, "scheduler-plugins", phase="Pending",
                     **{k: dict(unschedulable=echo) for k in ("ps_0", "worker_0", "worker_1")})
    plan = run(job, Observed(pods=pods, services=all_services(job), group=group), ctx=ctx("scheduler-plugins"))
    assert plan.status is None or plan.status["gang"]["schedulerMessage"] == cause
    # a new phase is news: the echo is shown then
    moved = group_of(desired_group("scheduler-plugins"), phase="Scheduling")
    plan = run(job, Observed(pods=pods, services=all_services(job), group=moved), ctx=ctx("scheduler-plugins"))
    assert echo in plan.status["gang"]["schedulerMessage"]


@pytest.mark.parametrize("name", BACKENDS)
def test_a_job_its_pods_finished_gets_no_new_group_when_its_status_lagged(name):
    """The operator crashed after the pods succeeded and after `finish` deleted the group, before the
    status said Succeeded: the next pass concludes Succeeded and creates nothing, not the group again."""
    job = with_status(gang_job(), **running_status())
    plan = run(job, Observed(pods=gang_pods(job, name, phase="Succeeded"), services=all_services(job)),
               ctx=ctx(name))
    assert plan.create_group is None and plan.create == []
    assert last_condition(plan.status)["type"] == S.SUCCEEDED


def test_a_refused_group_create_waits_out_the_blockers_backoff():
    """Seen after an apiserver restart: the group's create was refused (403) and tried again in every
    pass; like the pods' creates, it waits 2 s (doubling) after a blocked try."""
    from datetime import timedelta

    from core_fixtures import NOW
    from tfop.core.outcomes import FailedWrite

    refused = FailedWrite("create", "PodGroup", "tf-job", 403, 'podgroups.scheduling.volcano.sh "tf-job" is forbidden: '
                          'User "system:serviceaccount:kubeflow:tfop" cannot create resource "podgroups"',
                          "POST /apis/scheduling.volcano.sh/v1beta1/namespaces/ml/podgroups")
    job = with_status(gang_job(), conditions=[cond(S.CREATED)], startTime=ago(5))
    just_now = Observed(refusals=(refused,), refused_at=NOW - timedelta(seconds=0.5))
    plan = run(job, just_now, ctx=ctx("volcano"))
    assert plan.create_group is None and plan.create == []
    assert plan.requeue_after == pytest.approx(1.5)
    later = run(job, Observed(refusals=(refused,), refused_at=NOW - timedelta(seconds=3)), ctx=ctx("volcano"))
    assert later.create_group is not None  # tried again once the wait is over


# -- tfop's own sentence, and one Warning Event per change of its cause (tfop/core/pending.py) ----------------
def _gpu_job():
    worker = rspec(replicas=2, template=pod_template(
        {"name": "tensorflow", "image": "tf:2", "resources": {"limits": {"nvidia.com/gpu": "4"}}}))
    return with_status(model(tfjob({"Worker": worker})), conditions=[cond(S.CREATED)], startTime=ago(5))


def _room(*free_per_node):
    from tfop.core.room import Capacity, NodeRoom
    return Capacity(tuple(NodeRoom(f"n{i}", {"nvidia.com/gpu": 4000, "cpu": 32000},  # in thousandths
                                   {"nvidia.com/gpu": (4 - free) * 1000}) for i, free in enumerate(free_per_node)))


def _pass(job, capacity):
    group = group_of(desired_group("volcano", job), phase="Pending")
    obs = Observed(services=all_services(job), group=group, capacity=capacity, queues={"default": "Open"})
    return run(job, obs, ctx=ctx("volcano"))


def test_waiting_gang_says_why_in_plain_words_and_posts_one_event_per_cause():
    job = _gpu_job()
    first = _pass(job, _room(1, 2))
    gang = first.status["gang"]
    assert gang["reason"] == "InsufficientResources"
    assert gang["message"] == ("waiting for 8 nvidia.com/gpu for 2 pods as one gang; 3 are free on 2 nodes "
                               "(at most 2 on one node)")
    assert gang["schedulerMessage"].startswith("PodGroup is Pending")
    assert first.status["message"] == gang["message"]  # the Message column
    assert [(e.type, e.reason, e.message) for e in first.events] == [("Warning", "InsufficientResources", gang["message"])]

    job = with_status(job, **first.status)
    more_free = _pass(job, _room(2, 2))  # another count, the same cause: no Event
    assert more_free.status["gang"]["message"].startswith("waiting for 8 nvidia.com/gpu for 2 pods as one gang; 4 are")
    assert more_free.events == []

    job = with_status(job, **more_free.status)
    split = _pass(job, _room(2, 2, 2, 2))  # 8 free, but on no node 4 for one pod: a new cause, one Event
    assert split.status["gang"]["reason"] == "NoNodeFitsPod"
    assert [e.reason for e in split.events] == ["NoNodeFitsPod"]
    job = with_status(job, **split.status)
    assert _pass(job, _room(2, 2, 2, 2)).events == []

    fits = _pass(job, _room(4, 4))  # room now: the scheduler's step again, nothing to warn about
    assert fits.status["gang"]["reason"] == "PodGroupPending"
    assert fits.status["gang"]["message"] == ("waiting for volcano to place 2 pods as one gang; the cluster's free "
                                              "capacity fits them")
    assert fits.events == []


def _held(job, waited_s, phase="Pending"):
    job = with_status(job, gang={"backend": "volcano", "group": "tf-job", "phase": phase, "since": ago(waited_s)})
    group = group_of(desired_group("volcano", job), phase=phase)
    return run(job, Observed(services=all_services(job), group=group, capacity=_room(4, 4),
                             queues={"default": "Open"}), ctx=ctx("volcano"))


def test_a_gang_the_free_capacity_fits_but_volcano_has_long_not_admitted_is_said_held():
    job = _gpu_job()
    fresh = _held(job, 4)  # not yet through a scheduling cycle, maybe: the ordinary sentence, asked again at 10 s
    assert fresh.status["gang"]["message"].endswith("the cluster's free capacity fits them")
    assert fresh.events == [] and fresh.requeue_after == pytest.approx(6)
    held = _held(job, 11)
    assert held.status["gang"]["reason"] == "AdmissionHeld"
    assert held.status["gang"]["message"] == (
        "waiting for volcano to admit 2 pods as one gang; the cluster's free capacity fits them, but volcano "
        "keeps it for gangs it admitted earlier that have not started")
    assert [(e.type, e.reason) for e in held.events] == [("Warning", "AdmissionHeld")]
    unseen = _held(job, 60, phase="")  # no phase: Volcano has not got to the group yet (a burst), no blame
    assert (unseen.status["gang"]["reason"], unseen.events) == ("PodGroupPending", [])
    assert unseen.status["gang"]["message"].endswith("the cluster's free capacity fits them")
    admitted = _held(job, 60, phase="Inqueue")  # admitted: placing it is the scheduler's step
    assert admitted.status["gang"]["message"].endswith("the cluster's free capacity fits them")
    assert [e.reason for e in admitted.events if e.type == "Warning"] == []


def test_a_closed_queue_is_said_before_resources():
    job = _gpu_job()
    group = group_of(desired_group("volcano", job), phase="Pending")
    plan = run(job, Observed(services=all_services(job), group=group, capacity=_room(0),
                             queues={"default": "Closed"}), ctx=ctx("volcano"))
    assert (plan.status["gang"]["reason"], plan.status["gang"]["message"]) == ("QueueClosed", "queue default is closed")
    assert [e.reason for e in plan.events] == ["QueueClosed"]


def test_no_message_column_of_a_gang_that_runs():
    job = _gpu_job()
    plan = run(job, Observed(pods=gang_pods(job), services=all_services(job),
                             group=group_of(desired_group("volcano", job), phase="Running")), ctx=ctx("volcano"))
    assert "reason" not in plan.status["gang"] and plan.status["message"] == last_condition(plan.status)["message"]


def test_a_gang_that_times_out_before_its_group_exists_gets_none():
    """Its group would be created and deleted again (and, its create answer starting no pass, left behind)."""
    job, obs = _waiting()
    plan = run(job, replace(obs, group=None), ctx=ctx("volcano"))
    assert last_condition(plan.status)["type"] == "Failed" and plan.create_group is None


# -- when the group's status is read -----------------------------------------------------------------------------
GROUP_STATUSES_SEEN = [  # what schedulers write as a gang's pods start and run
    {}, {"phase": "Pending", "conditions": [VOLCANO_UNSCHEDULABLE]}, {"phase": "Inqueue"},
    {"phase": "Scheduled", "scheduled": 3}, {"phase": "Running", "scheduled": 3, "running": 2},
    {"phase": "Running", "scheduled": 3, "running": 3}, {"phase": "Finished", "succeeded": 3}, {"phase": "Failed"},
]


def _decided(plan):
    return (plan.status, plan.create_group, plan.create, plan.delete, plan.patch, plan.events, plan.requeue_after,
            plan.delete_job)


@pytest.mark.parametrize("name", BACKENDS)
def test_a_whole_gang_reads_no_group_status(name):
    """What lets the runtime skip a pass for a status-only change of the group (the scheduler counting
    members): once the gang is whole, no status of its group changes what a pass decides."""
    job = with_status(gang_job(), **running_status())
    plans = []
    for status in GROUP_STATUSES_SEEN:
        group = {**group_of(desired_group(name)), "status": status}
        plan = run(job, Observed(pods=gang_pods(job, name), services=all_services(job), group=group), ctx=ctx(name))
        assert plan.reads_group_status is False, status
        plans.append(_decided(plan))
    assert all(p == plans[0] for p in plans)


# (what the pods are, the group's phase, read?)
READS_GROUP_STATUS = [
    ("none yet, no group", None, True),  # the gang waits: its group is created
    ("none yet, group not admitted", "Pending", True),  # pods wait for admission
    ("none yet, group admitted", "Inqueue", True),  # pods created; the gang waits for them
    ("two of three running", "Running", True),
    ("all running", "Running", False),
]


@pytest.mark.parametrize("desc, phase, reads", READS_GROUP_STATUS, ids=[r[0] for r in READS_GROUP_STATUS])
def test_a_waiting_gang_reads_its_group_status(desc, phase, reads):
    job = with_status(gang_job(), conditions=[cond(S.CREATED)], startTime=ago(5))
    pods = []
    if desc.startswith("two"):
        pods = gang_pods(job)[:2] + [gang_pod(job, "Worker", 1, phase="Pending")]
    elif desc.startswith("all"):
        pods = gang_pods(job)
    group = None if phase is None else group_of(desired_group("volcano"), phase=phase)
    plan = run(job, Observed(pods=pods, services=all_services(job), group=group), ctx=ctx("volcano"))
    assert plan.reads_group_status is reads



GROUP_STEPS_SEEN = GROUP_STATUSES_SEEN + [  # and the steps of each scheduler while its gang waits
    {"phase": "Pending"}, {"phase": "Inqueue", "conditions": [{"type": "Scheduled", "status": "True"}]},
    {"phase": "PreScheduling"}, {"phase": "Scheduling", "scheduled": 2},
    {"conditions": [{"type": "PodGroupScheduled", "status": "True", "reason": "Scheduled"}]},
    {"conditions": [{"type": "PodGroupScheduled", "status": "False", "reason": "Unschedulable", "message": "m"}]},
    {"currentHealthy": 1, "desiredHealthy": 3, "expectedPods": 3},
]
MEMBERS_WAITING = {  # every member created, the gang not whole
    "none bound": lambda job, name: gang_pods(job, name, phase="Pending"),
    "two of three running": lambda job, name: gang_pods(job, name)[:2] + [gang_pod(job, "Worker", 1, name,
                                                                                   phase="Pending")],
}


def _writes(plan):
    return plan.create_group, plan.create, plan.delete, plan.patch, plan.events, plan.delete_job


@pytest.mark.parametrize("members", MEMBERS_WAITING)
@pytest.mark.parametrize("name", BACKENDS)
def test_a_waiting_gangs_group_moving_on_changes_only_a_held_status(name, members):
    """What lets the runtime skip a pass for the group's news of mere progress (gang_step.only_progress)
    while the gang waits an ordinary step (Plan.reads_group_progress False): the pass it skips would decide
    the same writes as the last, a status the runtime holds a minute (holding.STARTING_HOLD), and no
    look sooner than the last pass's timer."""
    context = ctx(name)
    backend = context.backend
    job = with_status(gang_job(), conditions=[cond(S.CREATED)], startTime=ago(5))
    pods = MEMBERS_WAITING[members](job, name)
    groups = [{**group_of(desired_group(name)), "status": status} for status in GROUP_STEPS_SEEN]
    skipped = 0
    for seen in groups:
        last = run(job, Observed(pods=pods, services=all_services(job), group=seen), ctx=context)
        if last.reads_group_progress:
            continue
        status = last.status or job.status
        decided = with_status(job, **status)
        settled = run(decided, Observed(pods=pods, services=all_services(job), group=seen), ctx=context)
        for news in filter(partial(only_progress, backend), groups):
            plan = reconcile(decided, Observed(pods=pods, services=all_services(job), group=news), NOW, context)
            assert _writes(plan) == _writes(settled), news["status"]
            # no look sooner than the last pass asked for: its timer comes first
            assert plan.requeue_after is None or settled.requeue_after <= plan.requeue_after, news["status"]
            assert plan.status is None or hold_limits(status, plan.status) == STARTING_HOLD, plan.status
            skipped += 1
    assert skipped  # each backend has such news


WHOLE_GANG_GONE = ("TFJob ml/tf-job restarts its whole gang because all 3 of its members still running disappeared "
                   "at once (deleted by someone else: preemption of the whole gang, an eviction or a user).")


@pytest.mark.parametrize("name", BACKENDS)
def test_a_gang_deleted_whole_restarts_once_and_says_so(name):
    """Preemption with disruptionMode all (or a user) deletes every member at once: no survivor is
    left to delete, yet it is one gang restart, counted and told, as for a member lost alone."""
    job, group = _running_gang(name)
    gone = frozenset(p.removeprefix("Pod/") for p in PODS)
    plan = run(job, Observed(services=all_services(job), group=group, vanished=gone), ctx=ctx(name))
    assert plan.delete == []
    assert plan.status["restartCount"] == 1
    assert ctypes(plan.status) == [("Created", "True"), ("Restarting", "True")]
    assert last_condition(plan.status)["message"] == WHOLE_GANG_GONE
    assert Event("Warning", "GangRestart", WHOLE_GANG_GONE) in plan.events


@pytest.mark.parametrize("name", BACKENDS)
def test_a_gang_deleted_whole_whose_pods_go_in_two_passes_restarts_once(name):
    """Two members gone, the third still terminating: one restart; the third's going later adds none."""
    job, group = _running_gang(name)
    terminating = [gang_pod(job, "Worker", 1, name, deleting=True)]
    plan = run(job, Observed(pods=terminating, services=all_services(job), group=group,
                             vanished=frozenset({"tf-job-ps-0", "tf-job-worker-0"})), ctx=ctx(name))
    assert plan.status["restartCount"] == 1
    job = with_status(job, **plan.status)
    later = run(job, Observed(services=all_services(job), group=group, vanished=frozenset({"tf-job-worker-1"})),
                ctx=ctx(name))
    assert (later.status or job.status)["restartCount"] == 1
    assert not [e for e in later.events if e.reason == "GangRestart"]
