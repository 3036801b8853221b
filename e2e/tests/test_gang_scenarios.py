"""The seeds' gang scenarios, on real schedulers (Volcano, scheduler-plugins
Coscheduling) and, for backends whose scheduler cannot run here, against the
real apiserver.

Every test has its own namespace, its own operator process (its own
ServiceAccount identity and the RBAC `tfop manifests` renders) and, when GPU
capacity matters, its own kwok nodes (gang_helpers.Pool), so tests sharing
the session cluster never compete for GPUs.
"""
from __future__ import annotations

import concurrent.futures
import time

import pytest

from e2e.tests.gang_helpers import (
    GROUP_APIS,
    PENDING_WINDOW,
    POLL,
    SCHEDULER_OF,
    Api,
    all_running,
    condition,
    expected_pods,
    gpu_pods,
    operator,
    phase_counts,
    phases,
    pool,
    prepare_job,
    seed,
    submit,
    wait_all_running,
    wait_until,
    watch_gang_waits,
)

pytestmark = pytest.mark.cluster
REAL_GANGS = ["volcano", "scheduler-plugins"]


@pytest.fixture
def api(cluster) -> Api:
    return Api(cluster)


def gang_status(api: Api, ns: str, name: str) -> dict:
    return ((api.tfjob(ns, name) or {}).get("status") or {}).get("gang") or {}


def assert_no_group_objects(api: Api, ns: str) -> None:
    for backend, (prefix, plural) in GROUP_APIS.items():
        got = api.get(f"{prefix}/namespaces/{ns}/{plural}")
        items = (got or {}).get("items") or []
        assert not items, f"gang scheduling is off, yet {backend} objects exist: " \
                          f"{[i['metadata']['name'] for i in items]}"


# ------------------------------------------------------------------ 1. seed 003 (ACK)


def seed003(ns, p):
    return prepare_job(seed("003-0"), ns, p)


def test_seed003_without_gang_half_runs(cluster, api, namespace):
    """ACK's table without gang: PS + 2 workers Running, 2 workers Pending, GPUs held idle."""
    with pool(cluster, api, namespace) as p, operator(cluster, namespace, None):
        p.add(2, gpus=2)
        job = seed003(namespace, p)
        submit(cluster, job)
        name = job["metadata"]["name"]

        def settled():
            c = phase_counts(api, namespace, name)
            return c == {"Running": 3, "Pending": 2}
        wait_until(settled, 60, "PS + 2 workers Running, 2 Pending", lambda: phases(api, namespace, name))
        time.sleep(3)  # and it stays that way: nothing else can fit
        seen = phases(api, namespace, name)
        assert seen[f"{name}-ps-0"].startswith("Running@")
        assert sorted(v.split("@")[0] for k, v in seen.items() if "-worker-" in k) == \
            ["Pending", "Pending", "Running", "Running"]
        for pod in api.pods(namespace, name):
            assert pod["spec"]["schedulerName"] == "default-scheduler"
        assert_no_group_objects(api, namespace)


@pytest.mark.parametrize("backend", REAL_GANGS)
def test_seed003_gang_waits_whole_then_runs_when_gpus_added(cluster, api, namespace, backend):
    """ACK's table with gang: all 5 Pending on 4 GPUs; add 4 GPUs -> all 5 Running."""
    with pool(cluster, api, namespace) as p, operator(cluster, namespace, backend):
        p.add(2, gpus=2)
        job = seed003(namespace, p)
        submit(cluster, job)
        name = job["metadata"]["name"]
        # Volcano's enqueue action admits the PodGroup (and tfop then creates the
        # pods) from cluster-wide idle GPUs, so its pods may or may not exist yet.
        watch_gang_waits(api, job, require_pods=backend == "scheduler-plugins")
        for pod in api.pods(namespace, name):
            assert pod["spec"]["schedulerName"] == SCHEDULER_OF[backend]
        grp = api.group(backend, namespace, name)
        assert grp is not None and grp["spec"]["minMember"] == 5
        assert grp["spec"]["minResources"]["nvidia.com/gpu"] == "8"

        # The job's status says why, in the scheduler's words.
        def explained():
            gang = gang_status(api, namespace, name)
            msg = gang.get("message", "").lower()
            return gang if ("unschedulable" in msg or "insufficient nvidia.com/gpu" in msg) else None
        gang = wait_until(explained, 20, "status.gang explaining the wait",
                          lambda: gang_status(api, namespace, name))
        assert gang["backend"] == backend and gang["group"] == name
        assert gang.get("reason"), gang

        p.add(2, gpus=2)
        seen = wait_all_running(api, job, timeout=60)
        assert len(seen) == 5
        wait_until(lambda: "message" not in gang_status(api, namespace, name), 20,
                   "status.gang to stop reporting a wait", lambda: gang_status(api, namespace, name))


# ------------------------------------------------------------------ 2. seed 004 (blog)


def seed004_jobs(ns, p):
    base = seed("004-1")  # Worker + PS (cpu), v1beta1: cleanPodPolicy defaults to Running
    job1 = prepare_job(base, ns, p, name="tfjob-gang-scheduling", replicas={"Worker": 3, "PS": 1})
    job2 = prepare_job(base, ns, p, name="tfjob-gang-scheduling2", replicas={"Worker": 2, "PS": 1})
    return job1, job2


def test_seed004_without_gang_second_job_partly_runs(cluster, api, namespace):
    with pool(cluster, api, namespace) as p, operator(cluster, namespace, None):
        p.add(4, gpus=1)
        job1, job2 = seed004_jobs(namespace, p)
        submit(cluster, job1)
        wait_all_running(api, job1)
        submit(cluster, job2)
        name2 = job2["metadata"]["name"]
        wait_until(lambda: phase_counts(api, namespace, name2) == {"Running": 2, "Pending": 1}, 60,
                   "job 2: PS + 1 worker Running, 1 worker Pending", lambda: phases(api, namespace, name2))
        seen = phases(api, namespace, name2)
        assert seen[f"{name2}-ps-0"].startswith("Running@")
        assert sorted(v.split("@")[0] for k, v in seen.items() if "-worker-" in k) == ["Pending", "Running"]
        assert all_running(api, job1)


@pytest.mark.parametrize("backend", REAL_GANGS)
def test_seed004_gang_second_job_waits_until_first_finishes(cluster, api, namespace, backend):
    with pool(cluster, api, namespace) as p, operator(cluster, namespace, backend):
        p.add(4, gpus=1)
        job1, job2 = seed004_jobs(namespace, p)
        name1, name2 = job1["metadata"]["name"], job2["metadata"]["name"]
        submit(cluster, job1)
        wait_all_running(api, job1)
        submit(cluster, job2)
        watch_gang_waits(api, job2, require_pods=backend == "scheduler-plugins")
        assert all_running(api, job1)

        api.exit_pod(namespace, f"{name1}-worker-0", 0)
        wait_until(lambda: condition(api.tfjob(namespace, name1), "Succeeded"), 30, "job 1 Succeeded",
                   lambda: phases(api, namespace, name1))
        seen = wait_all_running(api, job2, timeout=60)
        assert len(seen) == 3
        # cleanPodPolicy Running freed job 1's GPUs; only its finished worker-0 is left.
        left = phases(api, namespace, name1)
        assert set(left) == {f"{name1}-worker-0"} and left[f"{name1}-worker-0"].startswith("Succeeded"), left
        assert api.group(backend, namespace, name1) is None


# ------------------------------------------------------------------ 3. seeds 000-002: N pods, N-2 fit


@pytest.mark.parametrize("backend", REAL_GANGS)
def test_gang_of_n_where_n_minus_2_fit_stays_pending(cluster, api, namespace, backend):
    with pool(cluster, api, namespace) as p, operator(cluster, namespace, backend):
        p.add(2, gpus=1)
        # Seed 002's job (Worker 1 GPU, PS cpu) with 4 workers: N=5, and PS + 2 workers (N-2) fit.
        job = prepare_job(seed("002-0"), namespace, p, replicas={"Worker": 4})
        submit(cluster, job)
        assert len(expected_pods(job)) == 5
        watch_gang_waits(api, job, require_pods=backend == "scheduler-plugins")


# ------------------------------------------------------------------ 4. two jobs, each fits alone


@pytest.mark.parametrize("backend", REAL_GANGS)
def test_two_gangs_never_split_capacity(cluster, api, namespace, backend):
    with pool(cluster, api, namespace) as p, operator(cluster, namespace, backend):
        p.add(4, gpus=1)
        base = seed("002-0")
        jobs = [prepare_job(base, namespace, p, name=n, replicas={"Worker": 3}) for n in ("gang-a", "gang-b")]
        submit(cluster, *jobs)  # at once
        samples = []
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            pods = api.pods(namespace)
            bound = {j["metadata"]["name"]: {p["metadata"]["name"] for p in pods
                                             if p["spec"].get("nodeName")
                                             and not p["metadata"].get("deletionTimestamp")}
                     & set(gpu_pods(j)) for j in jobs}
            samples.append(bound)
            for j in jobs:
                n, want = j["metadata"]["name"], set(gpu_pods(j))
                assert bound[n] in (set(), want), \
                    f"{n} has {len(bound[n])}/{len(want)} GPU pods bound after {len(samples) * POLL:.1f}s: {bound}"
            time.sleep(POLL)
        running = [j for j in jobs if all_running(api, j)]
        assert len(running) == 1, {j["metadata"]["name"]: phases(api, namespace, j["metadata"]["name"])
                                   for j in jobs}
        waiting = next(j for j in jobs if j is not running[0])
        assert all(v == "Pending" for v in phases(api, namespace, waiting["metadata"]["name"]).values())


# ------------------------------------------------------------------ 5. gang restart


def restart_job(ns, p, exit_code_policy: bool):
    job = prepare_job(seed("002-0"), ns, p, replicas={"Worker": 2}, name="gang-restart")
    if exit_code_policy:
        job["spec"]["tfReplicaSpecs"]["Worker"]["restartPolicy"] = "ExitCode"
    return job


@pytest.mark.parametrize("backend", REAL_GANGS)
@pytest.mark.parametrize("how", ["delete-pod", "exit-137"])
def test_gang_restart_recreates_every_member(cluster, api, namespace, backend, how):
    with pool(cluster, api, namespace) as p, operator(cluster, namespace, backend):
        p.add(2, gpus=1)
        job = restart_job(namespace, p, exit_code_policy=how == "exit-137")
        name = job["metadata"]["name"]
        submit(cluster, job)
        wait_all_running(api, job)
        wait_until(lambda: condition(api.tfjob(namespace, name), "Running"), 20, "job Running")
        before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in api.pods(namespace, name)}
        assert set(before) == set(expected_pods(job))

        victim = f"{name}-worker-1"
        if how == "delete-pod":
            cluster.kubectl("delete", "pod", victim, "-n", namespace, "--wait=false")
        else:
            api.exit_pod(namespace, victim, 137)

        def recreated():
            pods = {p["metadata"]["name"]: p for p in api.pods(namespace, name)}
            return set(pods) == set(before) and all(
                pods[n]["metadata"]["uid"] != before[n] and pods[n]["status"].get("phase") == "Running"
                and not pods[n]["metadata"].get("deletionTimestamp") for n in before)
        wait_until(recreated, 60, "every member recreated (new uid) and Running again",
                   lambda: {p["metadata"]["name"]: (p["metadata"]["uid"][:8], p["status"].get("phase"))
                            for p in api.pods(namespace, name)})
        obj = api.tfjob(namespace, name)
        assert obj["status"].get("restartCount") == 1, obj["status"]
        events = [e for e in api.events(namespace, "GangRestart")
                  if e["involvedObject"].get("name") == name]
        assert events, "no GangRestart Event"
        assert victim in events[0]["message"], events[0]["message"]
        assert not condition(obj, "Failed")
        assert all_running(api, job)
        for pod in api.pods(namespace, name):
            assert pod["metadata"]["annotations"].get("tfop.kubeflow.org/gang-generation") == "1"
        wait_until(lambda: condition(api.tfjob(namespace, name), "Running"), 20, "job Running again")


# ------------------------------------------------------------------ 6. schedule timeout


def test_schedule_timeout_fails_the_job(cluster, api, namespace):
    backend = "volcano"
    with pool(cluster, api, namespace) as p, operator(cluster, namespace, backend):
        p.add(1, gpus=1)
        job = prepare_job(seed("002-0"), namespace, p, replicas={"Worker": 3})
        job["apiVersion"] = "kubeflow.org/v1"  # runPolicy.schedulingPolicy is v1's
        job["spec"]["runPolicy"] = {"schedulingPolicy": {"scheduleTimeoutSeconds": 5}}
        name = job["metadata"]["name"]
        t0 = time.monotonic()
        submit(cluster, job)
        failed = wait_until(lambda: condition(api.tfjob(namespace, name), "Failed"), 30, "job Failed",
                            lambda: (api.tfjob(namespace, name) or {}).get("status"))
        took = time.monotonic() - t0
        assert 4.5 <= took <= 20, f"failed after {took:.1f}s, expected about 5s"
        assert "scheduleTimeoutSeconds=5" in failed["message"], failed
        assert not any(v.split("@")[0] == "Running" for v in phases(api, namespace, name).values())
        events = api.events(namespace, "GangScheduleTimeout")
        assert events and "scheduleTimeoutSeconds=5" in events[0]["message"]
        wait_until(lambda: api.group(backend, namespace, name) is None, 20, "PodGroup deleted")
