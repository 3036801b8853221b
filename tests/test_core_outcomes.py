"""conclude(): what failed writes mean for the job, as tables (the runtime only reports them)."""
from core_fixtures import NOW, context, model, observed, run, tfjob, with_status
from tfop.api import conditions
from tfop.core.outcomes import (
    FORBIDDEN, GROUP_REFUSED, OTHER, REFUSED_TEMPLATE, WAITS_FOR_ADMISSION, FailedWrite, classify, conclude,
    needs_retry,
)
from tfop.core.plan import Event
from tfop.gang.registry import load_backend

JOB = model(tfjob({"Worker": 2}))
PLAN = run(JOB)  # creates service 0, service 1, pod 0, pod 1
POST = "POST /api/v1/namespaces/ml/pods"


def volcano_plan():
    backend, _ = load_backend("volcano")
    ctx = context(backend=backend, enable_gang_scheduling=True, gang_scheduler_name="volcano")
    return run(JOB, ctx=ctx)


def pod(code, message, index=0, verb="create"):
    return FailedWrite(verb, "Pod", f"tf-job-worker-{index}", code, message, POST)


def events(plan):
    return [(e.type, e.reason) for e in plan.events]


def test_no_failures_leave_the_plan_as_it_is():
    assert conclude(JOB, PLAN, [], NOW) is PLAN


CLASSES = [
    (pod(422, 'Pod "x" is invalid: spec.containers[0].image: Required value'), REFUSED_TEMPLATE),
    (pod(400, "bad request"), REFUSED_TEMPLATE),
    (pod(400, 'admission webhook "validatepod.volcano.sh" denied the request: podgroup tf-job is Pending'),
     WAITS_FOR_ADMISSION),
    (pod(403, 'pods is forbidden: User "system:serviceaccount:kubeflow:tfop" cannot create resource'), FORBIDDEN),
    (pod(500, "etcdserver: request timed out"), OTHER),
    (pod(0, "connection reset"), OTHER),
    (pod(422, "invalid", verb="delete"), OTHER),
]


def test_classify_table():
    assert [classify(failure, PLAN) for failure, _ in CLASSES] == [kind for _, kind in CLASSES]


def test_a_refused_template_fails_the_job_and_is_not_claimed_created():
    done = conclude(JOB, PLAN, [pod(422, "spec.containers[0].image: Required value")], NOW)
    failed = conditions.find(done.status["conditions"], conditions.FAILED)
    assert failed["status"] == "True"
    assert failed["message"] == ("the apiserver rejected objects built from the pod template; fix "
                                 "spec.tfReplicaSpecs.Worker.template: Pod tf-job-worker-0: "
                                 "spec.containers[0].image: Required value")
    assert done.status["completionTime"] == "2024-05-01T12:00:00Z"
    assert done.events[0] == Event("Normal", "SuccessfulCreate",
                                   "created service tf-job-worker-0, service tf-job-worker-1, pod tf-job-worker-1")
    assert events(done)[-1] == ("Warning", "InvalidPodTemplate")
    assert PLAN.events[0].message.endswith("pod tf-job-worker-0, pod tf-job-worker-1")  # the input is untouched


def test_pods_refused_until_admission_wait_and_say_so():
    refusal = pod(400, 'admission webhook "validatepod.volcano.sh" denied the request: podgroup is Pending', 1)
    done = conclude(JOB, PLAN, [refusal], NOW)
    assert done.pods_wait_for_admission and done.requeue_after == 5.0
    assert done.status == PLAN.status  # not failed
    assert "pod tf-job-worker-1" not in done.events[0].message
    assert needs_retry([refusal], PLAN) == []


def test_forbidden_names_the_request_and_the_fix_and_is_retried():
    denied = pod(403, "pods is forbidden")
    done = conclude(JOB, PLAN, [denied], NOW)
    assert done.events[-1] == Event("Warning", "Forbidden", f"{POST}: 403 pods is forbidden; run `tfop doctor` "
                                    "for the missing ClusterRole rule")
    assert needs_retry([denied], PLAN) == [denied]


def test_a_failed_delete_is_not_claimed():
    three = model(tfjob({"Worker": 3}))
    plan = run(JOB, observed(three))  # scaled from 3 workers to 2: worker 2 and its service go
    assert [r.name for r in plan.delete] == ["tf-job-worker-2", "tf-job-worker-2"]
    failure = FailedWrite("delete", "Pod", "tf-job-worker-2", 500, "etcdserver: request timed out")
    done = conclude(JOB, plan, [failure], NOW)
    assert done.events[0] == Event("Normal", "SuccessfulDelete", "deleted service tf-job-worker-2")
    assert needs_retry([failure], plan) == [failure]


def test_a_refused_group_is_explained_once_and_nothing_else_is_claimed():
    plan = volcano_plan()
    group = plan.create_group["metadata"]["name"]
    refusal = FailedWrite("create", "PodGroup", group, 422, 'queue "research" not found', "POST .../podgroups")
    assert classify(refusal, plan) == GROUP_REFUSED
    done = conclude(JOB, plan, [refusal], NOW)
    gang = done.status["gang"]
    assert gang["reason"] == conditions.GANG_GROUP_REFUSED
    assert gang["message"].startswith(f'the apiserver refused PodGroup {group}: queue "research" not found; ')
    assert ("Warning", "GangGroupRefused") in events(done)
    assert not any(e.reason == "SuccessfulCreate" for e in done.events)
    assert done.create == [] and done.requeue_after == 30.0
    again = conclude(with_status(JOB, **done.status), plan, [refusal], NOW)
    assert ("Warning", "GangGroupRefused") not in events(again)


def test_a_group_that_failed_otherwise_claims_nothing_and_is_retried():
    plan = volcano_plan()
    failure = FailedWrite("create", "PodGroup", plan.create_group["metadata"]["name"], 503, "unavailable")
    done = conclude(JOB, plan, [failure], NOW)
    assert not any(e.reason == "SuccessfulCreate" for e in done.events)
    assert needs_retry([failure], plan) == [failure]


def test_a_failed_create_drops_the_at_once_requeue_for_more_batches():
    plan = run(JOB)
    plan.requeue(0)  # more pods than one pass builds
    done = conclude(JOB, plan, [pod(503, "etcdserver: leader changed")], NOW)
    assert done.requeue_after is None  # the work queue's backoff retries it, not a hot loop
