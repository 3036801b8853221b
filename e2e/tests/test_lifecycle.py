"""TFJob lifecycle on the real local control plane, as upstream clients see it.

Every test gets a fresh namespace and its own operator (gang scheduling off)
watching only that namespace. Pods are CPU-only and end through kwok's
tfop-test-exit stage (e2e/harness/kwok_stages.py). All assertions read what the
Training SDK and dashboards read: `.status.conditions`, `.status.replicaStatuses`,
`startTime`, `completionTime`, and the Events on the TFJob.
"""
from __future__ import annotations

import time
from datetime import datetime, timezone

import pytest

from e2e.tests.lifecycle_helpers import (
    Env, JobWatch, active, condition, conditions, is_true, names, operator, phase, pod_names, replica, summary, tfjob,
)

pytestmark = pytest.mark.cluster


def parse_time(value: str) -> float:
    return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()


def workers(job, key: str) -> int | None:
    return (((job.get("status") or {}).get("replicaStatuses") or {}).get("Worker") or {}).get(key)


def types(job) -> list[str]:
    return [c["type"] for c in conditions(job)]


def reasons(env: Env, job: str) -> list[tuple[str, str]]:
    return [(e["type"], e["reason"]) for e in env.events(job)]


def flags(job) -> list[tuple[str, str]]:
    return [(c["type"], c["status"]) for c in conditions(job)]


PLAIN_SUCCESS = [("Created", "True"), ("Running", "False"), ("Succeeded", "True")]


def assert_succeeded_shape(env: Env, name: str, job: dict) -> None:
    """What the SDK's is_job_succeeded / get_job_conditions expect of a finished job."""
    msg = env.msg(name)
    ts = types(job)
    assert ts[0] == "Created" and ts[-1] == "Succeeded", (summary(job), msg)
    assert condition(job, "Succeeded")["reason"] == "TFJobSucceeded", msg
    assert not is_true(job, "Running") and not is_true(job, "Failed"), (summary(job), msg)
    if condition(job, "Running"):
        assert ts.index("Running") < ts.index("Succeeded"), (summary(job), msg)
    status = job["status"]
    assert status.get("startTime") and status.get("completionTime"), (status, msg)
    assert parse_time(status["completionTime"]) >= parse_time(status["startTime"]), (status, msg)
    assert ("Normal", "TFJobSucceeded") in reasons(env, name), msg


# 1 + 6 -------------------------------------------------------------------------------
@pytest.mark.parametrize("policy", ["Running", "None", "All"])
def test_success_through_worker0_and_clean_pod_policy(env, policy):
    """2 PS + 2 workers, no chief: worker-0 exiting 0 ends the job; cleanPodPolicy decides the leftovers."""
    name = f"w0-{policy.lower()}"
    env.apply(tfjob(name, {"PS": replica(2), "Worker": replica(2)}, run_policy={"cleanPodPolicy": policy}))
    everyone = pod_names(name, PS=2, Worker=2)
    env.wait_pods_running(name, everyone)
    env.wait_condition(name, "Running")
    env.mark_exit(f"{name}-worker-0", 0)
    job = env.wait_condition(name, "Succeeded")
    assert_succeeded_shape(env, name, job)
    assert flags(job) == PLAIN_SUCCESS, (summary(job), env.msg(name))

    if policy == "Running":
        # Still-running PS and worker-1 (and their services) go; the succeeded worker-0 stays.
        env.wait_children(name, {f"{name}-worker-0"})
    elif policy == "All":
        env.wait_children(name, set(), set())
    else:
        env.wait_children(name, everyone)
        pods = {p["metadata"]["name"]: p for p in env.pods(name)}
        assert phase(pods[f"{name}-ps-0"]) == "Running" and phase(pods[f"{name}-ps-1"]) == "Running", env.msg(name)
        assert phase(pods[f"{name}-worker-0"]) == "Succeeded", env.msg(name)
    job = env.job(name)
    # As upstream: on success the replicas still active count as succeeded, and the counts stay as they
    # were when the job finished, whatever cleanPodPolicy deletes afterwards.
    workers, ps = (job["status"]["replicaStatuses"][t] for t in ("Worker", "PS"))
    assert (workers.get("active", 0), workers["succeeded"], ps.get("active", 0), ps["succeeded"]) == (0, 2, 0, 2), \
        env.msg(name)
    assert_succeeded_shape(env, name, job)  # still finished, nothing flipped back


# 2 -----------------------------------------------------------------------------------
def test_success_through_chief(env):
    name = "chief"
    env.apply(tfjob(name, {"Chief": replica(1), "Worker": replica(2)}))
    env.wait_pods_running(name, pod_names(name, Chief=1, Worker=2))
    env.wait_condition(name, "Running")
    env.mark_exit(f"{name}-worker-0", 0)  # worker 0 does not decide when there is a chief
    env.wait(f"{name}-worker-0 Succeeded", lambda: phase(env.pod(f"{name}-worker-0")) == "Succeeded", job=name)
    job = env.job(name)
    assert is_true(job, "Running") and not condition(job, "Succeeded"), env.msg(name)
    env.mark_exit(f"{name}-chief-0", 0)
    job = env.wait_condition(name, "Succeeded")
    assert_succeeded_shape(env, name, job)
    assert flags(job) == PLAIN_SUCCESS, (summary(job), env.msg(name))
    assert job["status"]["replicaStatuses"]["Chief"]["succeeded"] == 1, env.msg(name)


# 3 -----------------------------------------------------------------------------------
def test_failure_never(env):
    name = "fails"
    env.apply(tfjob(name, {"PS": replica(1), "Worker": replica(2, "Never")}))
    env.wait_pods_running(name, pod_names(name, PS=1, Worker=2))
    env.mark_exit(f"{name}-worker-1", 1)
    job = env.wait_condition(name, "Failed")
    failed = condition(job, "Failed")
    assert failed["reason"] == "TFJobFailed", env.msg(name)
    assert "Worker" in failed["message"] and f"{name}-worker-1" in failed["message"], env.msg(name)
    assert flags(job) == [("Created", "True"), ("Running", "False"), ("Failed", "True")], (summary(job), env.msg(name))
    assert job["status"].get("completionTime"), env.msg(name)
    assert job["status"]["replicaStatuses"]["Worker"]["failed"] == 1, env.msg(name)
    assert ("Warning", "TFJobFailed") in reasons(env, name), env.msg(name)
    # Failed is terminal: the failed pod is not recreated, nothing new is created.
    pods = {p["metadata"]["name"]: p for p in env.pods(name)}
    assert phase(pods[f"{name}-worker-1"]) == "Failed", env.msg(name)


# 4 -----------------------------------------------------------------------------------
def test_exit_code_retry_then_success_or_failure(env):
    retry, fatal = "retry", "fatal"
    watch = JobWatch(env.cluster, env.ns, retry)
    try:
        for name in (retry, fatal):
            env.apply(tfjob(name, {"Worker": replica(2, "ExitCode")}))
        for name in (retry, fatal):
            env.wait_pods_running(name, pod_names(name, Worker=2))
            env.wait_condition(name, "Running")
        old_uid = env.pod(f"{retry}-worker-1")["metadata"]["uid"]
        env.mark_exit(f"{retry}-worker-1", 137)
        env.mark_exit(f"{fatal}-worker-1", 1)

        # 137 is retryable: same name, new pod, job Restarting on the way.
        def recreated():
            pod = env.pod(f"{retry}-worker-1")
            return pod and pod["metadata"]["uid"] != old_uid and phase(pod) == "Running" \
                and not pod["metadata"].get("deletionTimestamp")
        env.wait("retry-worker-1 recreated with a new uid", recreated, job=retry)
        env.wait("Restarting seen on the TFJob", lambda: watch.seen(lambda j: is_true(j, "Restarting")), job=retry)
        restarting = next(condition(j, "Restarting") for j in watch.objects() if is_true(j, "Restarting"))
        assert restarting["reason"] == "TFJobRestarting" and f"{retry}-worker-1" in restarting["message"], restarting
        assert ("Warning", "TFJobRestarting") in reasons(env, retry), env.msg(retry)
        job = env.wait_condition(retry, "Running")  # running again once the new pod runs
        assert not is_true(job, "Restarting") and not condition(job, "Failed"), (summary(job), env.msg(retry))

        # exit 1 is not retryable: Failed, naming the replica type.
        job = env.wait_condition(fatal, "Failed")
        assert "Worker" in condition(job, "Failed")["message"], env.msg(fatal)
        assert not watch.seen(lambda j: is_true(j, "Failed")), "retry job must never be Failed"

        env.mark_exit(f"{retry}-worker-0", 0)
        job = env.wait_condition(retry, "Succeeded")
        assert_succeeded_shape(env, retry, job)
        assert not is_true(job, "Restarting"), summary(job)
    finally:
        watch.stop()


# 5 -----------------------------------------------------------------------------------
def test_backoff_limit(env):
    name = "backoff"
    env.apply(tfjob(name, {"Worker": replica(2, "ExitCode")}, run_policy={"backoffLimit": 1}))
    env.wait_pods_running(name, pod_names(name, Worker=2))
    uid = env.pod(f"{name}-worker-1")["metadata"]["uid"]
    env.mark_exit(f"{name}-worker-1", 137)  # restart 1 of 1: allowed

    def recreated():
        pod = env.pod(f"{name}-worker-1")
        return pod and pod["metadata"]["uid"] != uid and phase(pod) == "Running"
    env.wait("worker-1 recreated after the first 137", recreated, job=name)
    job = env.job(name)
    assert not condition(job, "Failed"), (summary(job), env.msg(name))
    env.mark_exit(f"{name}-worker-1", 137)  # restart 2 > backoffLimit 1
    job = env.wait_condition(name, "Failed")
    message = condition(job, "Failed")["message"]
    assert "backoffLimit" in message, env.msg(name)
    assert ("Warning", "BackoffLimitExceeded") in reasons(env, name), env.msg(name)
    # The job's running pods are stopped whatever cleanPodPolicy (default None) says; nothing comes back.
    env.wait(f"{name} has no running or pending pods",
             lambda: not [p for p in active(env.pods(name)) if phase(p) in ("Running", "Pending")], job=name)
    assert f"{name}-worker-0" not in names(active(env.pods(name))), env.msg(name)


# 7 -----------------------------------------------------------------------------------
def test_ttl_seconds_after_finished(env):
    """Deleted by the operator's own timer: nothing else happens to the job after it succeeds."""
    name = "ttl"
    ttl = 3
    env.apply(tfjob(name, {"Worker": replica(1, exit_code=0, exit_delay="1s")},
                    run_policy={"ttlSecondsAfterFinished": ttl, "cleanPodPolicy": "None"}))
    job = env.wait_condition(name, "Succeeded")
    seen_done = time.monotonic()
    completion = parse_time(job["status"]["completionTime"])
    env.wait(f"TFJob {name} deleted by its TTL", lambda: env.job(name) is None, timeout=ttl + 5, job=name)
    gone = time.monotonic()
    # completionTime has 1 s resolution, and we saw Succeeded up to a poll late.
    assert gone - seen_done <= ttl + 5
    assert time.time() - completion >= ttl - 1, "deleted before its TTL ran out"


# 8 -----------------------------------------------------------------------------------
def test_active_deadline_seconds(env):
    name = "deadline"
    deadline = 4
    env.apply(tfjob(name, {"PS": replica(1), "Worker": replica(2)},
                    run_policy={"activeDeadlineSeconds": deadline}))
    env.wait_pods_running(name, pod_names(name, PS=1, Worker=2))
    start = parse_time(env.wait_job(name, lambda j: (j.get("status") or {}).get("startTime"), "startTime")
                       ["status"]["startTime"])
    job = env.wait_condition(name, "Failed", timeout=deadline + 10)
    failed_at = time.time()
    assert failed_at - start <= deadline + 5, f"failed {failed_at - start:.1f}s after startTime\n{env.msg(name)}"
    assert failed_at - start >= deadline - 1, f"failed too early\n{env.msg(name)}"
    assert "activeDeadlineSeconds" in condition(job, "Failed")["message"], env.msg(name)
    assert ("Warning", "DeadlineExceeded") in reasons(env, name), env.msg(name)
    env.wait_children(name, set(), pod_names(name, PS=1, Worker=2))  # pods stopped; cleanPodPolicy None keeps services


# 9 -----------------------------------------------------------------------------------
def test_suspend_and_resume(env):
    name = "susp"
    everyone = pod_names(name, Worker=2)
    env.apply(tfjob(name, {"Worker": replica(2)}))
    before = {p["metadata"]["uid"] for p in env.wait_pods_running(name, everyone)}
    job = env.wait_condition(name, "Running")
    first_start = job["status"]["startTime"]

    env.patch_job(name, {"spec": {"runPolicy": {"suspend": True}}})
    job = env.wait_condition(name, "Suspended")
    assert condition(job, "Suspended")["reason"] == "TFJobSuspended", env.msg(name)
    assert not is_true(job, "Running"), (summary(job), env.msg(name))
    env.wait_children(name, set(), set())
    assert ("Normal", "TFJobSuspended") in reasons(env, name), env.msg(name)

    # startTime has 1 s resolution: let a second pass so a reset is visible.
    env.wait("a new second", lambda: time.time() >= parse_time(first_start) + 1.1)
    env.patch_job(name, {"spec": {"runPolicy": {"suspend": False}}})
    after = env.wait_pods_running(name, everyone)
    assert not before & {p["metadata"]["uid"] for p in after}, "resumed pods must be new pods"
    env.wait_children(name, everyone)
    job = env.wait_condition(name, "Running")
    suspended = condition(job, "Suspended")
    assert suspended["status"] == "False" and suspended["reason"] == "TFJobResumed", (summary(job), env.msg(name))
    assert parse_time(job["status"]["startTime"]) > parse_time(first_start), (job["status"], env.msg(name))
    assert ("Normal", "TFJobResumed") in reasons(env, name), env.msg(name)


# 10 ----------------------------------------------------------------------------------
def test_scale_workers_up_and_down(env):
    name = "scale"
    env.apply(tfjob(name, {"Worker": replica(2)}))
    env.wait_pods_running(name, pod_names(name, Worker=2))
    env.patch_job(name, {"spec": {"tfReplicaSpecs": {"Worker": {"replicas": 4}}}})
    env.wait_pods_running(name, pod_names(name, Worker=4))
    env.wait_children(name, pod_names(name, Worker=4))
    env.wait_job(name, lambda j: workers(j, "active") == 4, "4 active workers")
    env.patch_job(name, {"spec": {"tfReplicaSpecs": {"Worker": {"replicas": 1}}}})
    env.wait_children(name, pod_names(name, Worker=1))
    job = env.wait_job(name, lambda j: workers(j, "active") == 1, "1 active worker")
    assert not condition(job, "Failed") and not condition(job, "Succeeded"), (summary(job), env.msg(name))


# 11 ----------------------------------------------------------------------------------
def test_zero_replicas_create_nothing(env):
    name = "zero"
    env.apply(tfjob(name, {"Chief": replica(1), "Worker": replica(0)}))
    env.wait_pods_running(name, {f"{name}-chief-0"})
    job = env.wait_condition(name, "Running")
    env.wait_children(name, {f"{name}-chief-0"})
    assert not [o for o in env.pods(name) + env.services(name) if "worker" in o["metadata"]["name"]], env.msg(name)
    assert job["status"]["replicaStatuses"]["Worker"] == {
        **job["status"]["replicaStatuses"]["Worker"], "active": 0, "succeeded": 0, "failed": 0}, env.msg(name)


# 12 ----------------------------------------------------------------------------------
def test_delete_cascades_to_children(env):
    name = "cascade"
    env.apply(tfjob(name, {"PS": replica(1), "Worker": replica(2)}))
    env.wait_pods_running(name, pod_names(name, PS=1, Worker=2))
    env.wait_children(name, pod_names(name, PS=1, Worker=2))
    for pod in env.pods(name):
        ref = pod["metadata"]["ownerReferences"][0]
        assert ref["kind"] == "TFJob" and ref["name"] == name and ref["controller"] and ref["blockOwnerDeletion"]
    env.kubectl("delete", "tfjob", name, "--wait=false")
    env.wait(f"{name} children garbage-collected",
             lambda: not env.pods(name) and not env.services(name), job=None)


# 13 ----------------------------------------------------------------------------------
def test_operator_crash_and_restart(cluster, namespace, request):
    """SIGKILL right after submitting 5 jobs; the restarted operator finishes them without duplicates,
    and a further restart with nothing changed writes nothing at all.

    (Measured: the kill usually lands with one job's 4 pods created and the others not yet.)"""
    jobs = [f"crash-{i}" for i in range(5)]
    def start():
        op = operator(cluster, [namespace])
        request.addfinalizer(op.stop)
        return op.start()

    env = Env(cluster, namespace, start())
    env.apply(*[tfjob(j, {"PS": replica(1), "Worker": replica(3)}) for j in jobs])
    env.op.kill()
    at_kill = {p["metadata"]["name"]: p["metadata"]["uid"] for p in env.pods()}

    env.op = start()
    expected = {j: pod_names(j, PS=1, Worker=3) for j in jobs}
    for j in jobs:
        env.wait_pods_running(j, expected[j])
        env.wait_condition(j, "Running")
        env.wait_children(j, expected[j])
    pods = env.pods()
    assert len(pods) == 20 and names(pods) == set().union(*expected.values()), env.msg()
    for p in pods:  # a pod that existed when the operator died was kept, not replaced
        if p["metadata"]["name"] in at_kill:
            assert p["metadata"]["uid"] == at_kill[p["metadata"]["name"]], p["metadata"]["name"]
    for j in jobs:
        assert len([e for e in env.events(j) if e["reason"] == "TFJobCreated"]) <= 1

    # Second restart, nothing changed: no write to any TFJob, pod or service.
    def versions() -> dict[str, str]:
        items = env.json("get", "tfjobs,pods,services")["items"]
        return {f"{o['kind']}/{o['metadata']['name']}": o["metadata"]["resourceVersion"] for o in items}

    def steady() -> dict | None:  # the same versions twice, 1 s apart
        first = versions()
        time.sleep(2)  # the operator holds progress-only status writes until a job is quiet for 1 s
        return first if versions() == first else None
    settled = env.wait("every TFJob, pod and service unchanged for 2 s", steady)
    env.op.stop()
    env.op = start()  # returns once caches are synced and every job is queued
    quiet_until = time.monotonic() + 3  # every job's reconcile runs within milliseconds of the sync
    while time.monotonic() < quiet_until:
        now = versions()
        assert now == settled, (
            "the restarted operator wrote to unchanged objects: "
            f"{ {k: (settled.get(k), v) for k, v in now.items() if settled.get(k) != v} }\n{env.msg()}")
        time.sleep(0.2)

    # And the jobs still progress under the restarted operator.
    for j in jobs:
        env.mark_exit(f"{j}-worker-0", 0)
    for j in jobs:
        assert_succeeded_shape(env, j, env.wait_condition(j, "Succeeded"))


# 14 ----------------------------------------------------------------------------------
def test_invalid_job_fails_and_others_still_run(env):
    """Jobs the CRD accepts but a pod cannot be built from: Failed naming the field; the namespace goes on."""
    bad_qty, bad_mount, good = "bad-qty", "bad-mount", "good"
    qty = replica(2)
    qty["template"]["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "abc"}}
    mount = replica(2)
    mount["template"]["spec"]["containers"][0]["volumeMounts"] = [{"name": "missing", "mountPath": "/data"}]
    env.apply(tfjob(bad_qty, {"Worker": qty}), tfjob(bad_mount, {"Worker": mount}),
              tfjob(good, {"Worker": replica(2)}))

    job = env.wait_condition(bad_qty, "Failed")
    message = condition(job, "Failed")["message"]
    assert "tfReplicaSpecs.Worker" in message and "resources.limits.cpu" in message, env.msg(bad_qty)
    assert any(e["type"] == "Warning" and "cpu" in e["message"] for e in env.events(bad_qty)), env.msg(bad_qty)

    job = env.wait_condition(bad_mount, "Failed")
    message = condition(job, "Failed")["message"]
    assert "tfReplicaSpecs.Worker" in message and "volumeMounts[0].name" in message, env.msg(bad_mount)
    assert any(e["type"] == "Warning" and "volumeMounts" in e["message"] for e in env.events(bad_mount)), \
        env.msg(bad_mount)

    # The apiserver refused every pod: no Event may claim one was created.
    claims = [e["message"] for e in env.events(bad_mount) if f"pod {bad_mount}-worker" in e["message"]
              and e["reason"] in ("SuccessfulCreate", "Reconciled")]
    assert not claims, f"Events claim refused pods were created: {claims}\n{env.msg(bad_mount)}"
    for bad in (bad_qty, bad_mount):
        assert not [p for p in env.pods(bad)], env.msg(bad)
        assert types(env.job(bad))[-1] == "Failed", env.msg(bad)
    env.wait_pods_running(good, pod_names(good, Worker=2))
    env.wait_condition(good, "Running")
    env.mark_exit(f"{good}-worker-0", 0)
    assert_succeeded_shape(env, good, env.wait_condition(good, "Succeeded"))
