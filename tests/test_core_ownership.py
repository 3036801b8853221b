"""Children claimed by the controller reference to the job's UID, and what blocks a job, as tables."""
import copy
from dataclasses import replace
from datetime import timedelta

import pytest

from core_fixtures import NOW, UID, ago, all_pods, all_services, model, pod, run, tfjob, with_status
from tfop.api import conditions
from tfop.core.context import Observed
from tfop.core.outcomes import (
    NAME_TAKEN, NOT_ATTEMPTED, POD_SECURITY, QUOTA, FailedWrite, blocking, classify, conclude,
)
from tfop.core.ownership import claim
from tfop.api.constants import LABEL_TYPE
from tfop.core.plan import Plan, create_batches

JOB = replace(model(tfjob({"Worker": 2})), creation_timestamp=ago(60))
QUOTA_WORDS = ('pods "tf-job-worker-1" is forbidden: exceeded quota: gpus, requested: requests.nvidia.com/gpu=2, '
               'used: requests.nvidia.com/gpu=3, limited: requests.nvidia.com/gpu=4')


def owned_by(obj, uid=UID, kind="TFJob", name="tf-job"):
    obj = copy.deepcopy(obj)
    obj["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": kind, "name": name, "uid": uid,
                                           "controller": True}] if uid else []
    return obj


def born(obj, seconds_ago):
    obj["metadata"]["creationTimestamp"] = ago(seconds_ago)
    return obj


def worker(index, phase="Running", **kw):
    return pod(JOB, "Worker", index, phase=phase, **kw)


def blocked(status):
    return conditions.find(status.get("conditions") or [], conditions.BLOCKED)


CLAIMS = [  # (description, object, which list)
    ("controlled by the job", worker(0), "ours"),
    ("controlled by an earlier job of the name", owned_by(worker(0), uid="old"), "foreign"),
    ("controlled by a Deployment", owned_by(worker(0), uid="d", kind="Deployment", name="web"), "foreign"),
    ("an orphan created since the job", born(owned_by(worker(0), uid=None), 10), "adopt"),
    ("an orphan older than the job", born(owned_by(worker(0), uid=None), 600), "stale"),
]


@pytest.mark.parametrize("desc,obj,where", CLAIMS, ids=[c[0] for c in CLAIMS])
def test_claim_table(desc, obj, where):
    found = claim(JOB, [obj])
    assert [name for name in ("ours", "adopt", "stale", "foreign") if getattr(found, name)] == \
        (["ours", "adopt"] if where == "adopt" else [where])


def test_an_earlier_jobs_succeeded_pod_is_not_this_jobs_result():
    old = owned_by(worker(0, phase="Succeeded", exit_code=0), uid="old")
    plan = run(JOB, Observed(pods=[old]))
    assert not conditions.is_finished(plan.status["conditions"])
    created = [o["metadata"]["name"] for o in plan.create if o["kind"] == "Pod"]
    assert created == ["tf-job-worker-1"]  # worker 0's name is still the old pod's: created once it is gone
    assert blocked(plan.status) is None  # the garbage collector removes it: nothing to tell


def test_a_name_held_by_another_controller_blocks_and_is_said_once():
    web = owned_by(worker(0), uid="d-uid", kind="Deployment", name="web")
    plan = run(JOB, Observed(pods=[web]))
    condition = blocked(plan.status)
    assert condition["reason"] == "NameTaken"
    assert "pod tf-job-worker-0 belongs to Deployment web (uid d-uid)" in condition["message"]
    assert not any("pod tf-job-worker-0" in e.message for e in plan.events if e.reason == "SuccessfulCreate")
    again = run(with_status(JOB, **plan.status), Observed(pods=[web], services=all_services(JOB)))
    assert not [e for e in again.events if e.reason == "NameTaken"]
    cleared = run(with_status(JOB, **plan.status), Observed(services=all_services(JOB)))
    assert blocked(cleared.status or {}) is None


def test_an_older_orphan_is_deleted_and_a_newer_one_adopted():
    old = born(owned_by(worker(0, phase="Succeeded", exit_code=0), uid=None), 600)
    new = born(owned_by(worker(1), uid=None), 10)
    plan = run(JOB, Observed(pods=[old, new], services=all_services(JOB)))
    assert [(r.kind, r.name) for r in plan.delete] == [("Pod", "tf-job-worker-0")]
    assert [(ref.name, patch["metadata"]["ownerReferences"][-1]["uid"]) for ref, patch in plan.patch] == \
        [("tf-job-worker-1", UID)]
    assert not conditions.is_finished(plan.status["conditions"])
    assert plan.create == []  # worker 0 again once the old one is gone


def refusal(code, message, name="tf-job-worker-1", holder=None):
    return FailedWrite("create", "Pod", name, code, message, "POST /api/v1/namespaces/ml/pods", holder)


def test_a_quota_blocks_says_what_is_missing_and_backs_off():
    denied = refusal(403, QUOTA_WORDS)
    just_now = Observed(services=all_services(JOB), refusals=(denied,), refused_at=NOW - timedelta(seconds=1))
    plan = run(JOB, just_now)
    condition = blocked(plan.status)
    assert condition["reason"] == "QuotaExceeded"
    assert condition["message"].startswith("ResourceQuota gpus lacks 1 requests.nvidia.com/gpu for pod tf-job-worker-1")
    assert plan.create == [] and plan.requeue_after == pytest.approx(1.0)  # not before 2 s after the try
    later = run(with_status(JOB, **plan.status), replace(just_now, refused_at=NOW - timedelta(seconds=5)))
    assert [o["metadata"]["name"] for o in later.create] == ["tf-job-worker-0", "tf-job-worker-1"]
    assert later.status is None  # still blocked, same words: no write
    freed = run(with_status(JOB, **plan.status), Observed(services=all_services(JOB)))
    assert blocked(freed.status) is None


def test_a_terminating_namespace_stops_creating():
    gone = refusal(403, 'pods "x" is forbidden: unable to create new content in namespace ml because it is being '
                        'terminated')
    plan = run(JOB, Observed(refusals=(gone,), refused_at=NOW - timedelta(minutes=5)))
    assert blocked(plan.status)["reason"] == "NamespaceTerminating"
    assert plan.create == [] and plan.requeue_after is None


def test_pod_security_fails_the_job_with_the_policys_words():
    words = ('pods "tf-job-worker-0" is forbidden: violates PodSecurity "restricted:latest": '
             'privileged (container "tensorflow" must not set securityContext.privileged=true)')
    plan = run(JOB)
    failure = FailedWrite("create", "Pod", "tf-job-worker-0", 403, words)
    assert classify(failure, plan) == POD_SECURITY
    done = conclude(JOB, plan, [failure], NOW)
    failed = conditions.find(done.status["conditions"], conditions.FAILED)
    assert failed["status"] == "True" and "violates PodSecurity" in failed["message"]
    assert ("Warning", "PodSecurity") in [(e.type, e.reason) for e in done.events]


def test_a_409_for_the_jobs_own_object_is_a_success():
    ours = refusal(409, "already exists", holder=worker(1))
    web = refusal(409, "already exists", holder=owned_by(worker(1), uid="d", kind="Deployment", name="web"))
    plan = run(JOB)
    assert conclude(JOB, plan, [ours], NOW) is plan
    assert [kind for kind, _ in blocking([ours, web], JOB)] == [NAME_TAKEN]


def obj(kind: str, rtype: str, i: int) -> dict:
    return {"kind": kind, "metadata": {"name": f"{rtype}-{i}", "labels": {LABEL_TYPE: rtype}}}


def test_creates_go_one_of_each_template_first_then_the_rest_in_growing_batches():
    objects = [obj(k, t, i) for k in ("Service", "Pod") for t, n in (("ps", 1), ("worker", 60)) for i in range(n)]
    batches = list(create_batches(objects))
    assert [len(b) for b in batches] == [4, 16, 32, 64, 6]
    assert {(o["kind"], o["metadata"]["name"]) for o in batches[0]} == {
        ("Service", "ps-0"), ("Service", "worker-0"), ("Pod", "ps-0"), ("Pod", "worker-0")}
    assert sorted(map(id, sum(batches, []))) == sorted(map(id, objects))
    assert list(create_batches([])) == []


def test_a_gangs_members_are_created_together():
    objects = [obj(k, t, i) for k in ("Service", "Pod") for t, n in (("ps", 1), ("worker", 60)) for i in range(n)]
    assert list(create_batches(objects, together=True)) == [objects]
    assert list(create_batches([], together=True)) == []
    assert not run(JOB).create_together  # no gang: templates probed one of each first


def test_a_few_objects_go_in_one_batch():
    objects = [obj(k, t, i) for k in ("Service", "Pod") for t, n in (("ps", 1), ("worker", 7)) for i in range(n)]
    assert list(create_batches(objects)) == [objects]  # 16: one round trip
    more = objects + [obj("Pod", "worker", 7)]
    assert [len(b) for b in create_batches(more)] == [4, 13]


def test_a_refused_first_create_claims_nothing_else():
    plan = run(JOB)
    skipped = [FailedWrite("create", o["kind"], o["metadata"]["name"], NOT_ATTEMPTED, "not attempted")
               for o in plan.create[1:]]
    refused = FailedWrite("create", "Service", plan.create[0]["metadata"]["name"], 403, QUOTA_WORDS)
    done = conclude(JOB, plan, [refused, *skipped], NOW)
    assert not any(e.reason == "SuccessfulCreate" for e in done.events)
    assert [kind for kind, _ in blocking([refused, *skipped], JOB)] == [QUOTA]


@pytest.mark.parametrize("blocked_for,last_try,tries_now", [
    (10, 9, True),  # blocked 1 s when it last tried: 2 s later it tries again
    (30, 5, False),  # blocked 25 s when it last tried: not before 25 s after that try
    (400, 100, True),  # the gap never passes 60 s
])
def test_a_blocked_job_tries_again_after_as_long_as_it_had_been_blocked(blocked_for, last_try, tries_now):
    status = {"conditions": [{"type": "Blocked", "status": "True", "reason": "QuotaExceeded", "message": "m",
                              "lastUpdateTime": ago(blocked_for), "lastTransitionTime": ago(blocked_for)}]}
    observed = Observed(services=all_services(JOB), refusals=(refusal(403, QUOTA_WORDS),),
                        refused_at=NOW - timedelta(seconds=last_try))
    plan = run(with_status(JOB, **status), observed)
    assert bool(plan.create) == tries_now


def test_a_group_name_taken_waits_as_a_blocker():
    plan = Plan(create_group={"kind": "PodGroup", "metadata": {"name": "tf-job"}})
    taken = FailedWrite("create", "PodGroup", "tf-job", 409, "already exists")
    assert classify(taken, plan) == NAME_TAKEN
