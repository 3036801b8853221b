"""The seeds' gang scenarios, on real schedulers (Volcano, scheduler-plugins
Coscheduling, Koordinator) and, for backends whose scheduler does not run here,
against the real apiserver.

Every test has its own namespace, its own operator process (its own
ServiceAccount identity and the RBAC `tfop manifests` renders) and, when GPU
capacity matters, its own kwok nodes (gang_helpers.Pool), so tests sharing
the session cluster never compete for GPUs.
"""
from __future__ import annotations

import json
import threading
import time
from datetime import datetime, timezone

import pytest

from e2e.harness.koordinator import KOORDINATOR_SCHEDULER_NAME
from e2e.tests.gang_helpers import (
    Api,
    ConcurrentTests,
    GROUP_APIS,
    JOB_LABEL,
    PENDING_WINDOW,
    POLL,
    POOL_LABEL,
    SCHEDULER_OF,
    all_running,
    condition,
    expected_pods,
    gang_status,
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
from e2e.harness.tfop_operator import wait_established

pytestmark = pytest.mark.cluster
REAL_GANGS = ["volcano", "scheduler-plugins"]
# Group-less gangs on koord-scheduler (test id -> tfop backend, extra operator args):
# Koordinator's own annotations, and the ACK label form of seed 003
# (pod-group.scheduling.sigs.k8s.io/{name,min-available}), which Koordinator's
# Coscheduling plugin reads too when tfop is told to stamp its schedulerName.
KOORD_GANGS = {
    "koordinator": ("koordinator", []),
    "coscheduling-on-koord": ("coscheduling", ["--scheduler-name", KOORDINATOR_SCHEDULER_NAME]),
}


def gang_setup(cluster, backend: str) -> tuple[str, list[str], str]:
    """(tfop backend, extra operator args, the pods' schedulerName) of a test's backend id."""
    if backend in KOORD_GANGS:
        if "koordinator" not in cluster.state.get("schedulers", []):
            pytest.skip("session cluster runs without koordinator (see TFOP_E2E_SCHEDULERS)")
        gang, extra = KOORD_GANGS[backend]
        return gang, extra, KOORDINATOR_SCHEDULER_NAME
    return backend, [], SCHEDULER_OF[backend]


VOLCANO_ONLY = {"test_schedule_timeout_fails_the_job"}  # Volcano's, with no backend parameter
WORKERS = 6  # tests at once: most of their time is spent watching gangs wait


@pytest.fixture(scope="module")
def api(cluster) -> Api:
    return Api(cluster)


@pytest.fixture(scope="module")
def kube_batch_crd_absence_checked(request) -> threading.Event:
    """Set once test_missing_group_crd_is_an_error has run (at once when it is not selected): until then
    test_backend_objects_against_apiserver[kube-batch] does not install the kube-batch CRD."""
    checked = threading.Event()
    if not any(getattr(i, "module", None) is request.module and i.originalname == "test_missing_group_crd_is_an_error"
               for i in request.session.items):
        checked.set()
    return checked


@pytest.fixture(scope="module", autouse=True)
def concurrently(cluster, api, kube_batch_crd_absence_checked, request):
    """The module's selected tests, run at once (gang_helpers.ConcurrentTests), in the order they are
    written: the longest first, so the run ends soon after the longest one."""
    items = [i for i in request.session.items if getattr(i, "module", None) is request.module]
    shared = {"cluster": cluster, "api": api, "kube_batch_crd_absence_checked": kube_batch_crd_absence_checked}
    tests = ConcurrentTests(cluster, items, shared, workers=WORKERS,
                            one_at_a_time=lambda name, params: params.get("backend") == "volcano"
                            or name in VOLCANO_ONLY)
    request.config.pluginmanager.register(tests)
    yield tests
    request.config.pluginmanager.unregister(tests)
    tests.close()


@pytest.fixture
def namespace(concurrently, request) -> str:
    """The namespace the test's run made (and deletes)."""
    return concurrently.namespaces[request.node.nodeid]


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


@pytest.mark.parametrize("backend", REAL_GANGS + list(KOORD_GANGS))
def test_seed003_gang_waits_whole_then_runs_when_gpus_added(cluster, api, namespace, backend):
    """ACK's table with gang: all 5 Pending on 4 GPUs; add 4 GPUs -> all 5 Running."""
    tfop_backend, extra, scheduler = gang_setup(cluster, backend)
    with pool(cluster, api, namespace) as p, operator(cluster, namespace, tfop_backend, extra):
        p.add(2, gpus=2)
        job = seed003(namespace, p)
        submit(cluster, job)
        name = job["metadata"]["name"]
        # Volcano's enqueue action admits the PodGroup (and tfop then creates the
        # pods) from cluster-wide idle GPUs, so its pods may or may not exist yet.
        watch_gang_waits(api, job, require_pods=backend != "volcano")
        for pod in api.pods(namespace, name):
            assert pod["spec"]["schedulerName"] == scheduler
        if backend in GROUP_APIS:
            grp = api.group(backend, namespace, name)
            assert grp is not None and grp["spec"]["minMember"] == 5
            assert grp["spec"]["minResources"]["nvidia.com/gpu"] == "8"
        else:
            assert_no_group_objects(api, namespace)

        # The job's status says why, in the scheduler's words.
        # The scheduler's words when it tried to place the pods; for a Volcano group still
        # Pending (its enqueue action found too few idle GPUs), tfop's account of what it waits for.
        def explained():
            gang = gang_status(api, namespace, name)
            msg = gang.get("schedulerMessage", "").lower()
            tried = "unschedulable" in msg and "insufficient nvidia.com/gpu" in msg
            enqueue = backend == "volcano" and "minresources" in msg and "nvidia.com/gpu 8" in msg
            return gang if tried or enqueue else None
        gang = wait_until(explained, 20, "status.gang explaining the wait",
                          lambda: gang_status(api, namespace, name))
        assert gang["backend"] == tfop_backend and gang["group"] == name
        assert gang.get("reason"), gang

        p.add(2, gpus=2)
        seen = wait_all_running(api, job, timeout=60)
        assert len(seen) == 5
        wait_until(lambda: "message" not in gang_status(api, namespace, name), 20,
                   "status.gang to stop reporting a wait", lambda: gang_status(api, namespace, name))


YUNIKORN_PLACEHOLDER = "internal.yunikorn.apache.org/placeholder"  # on the placeholder pods it creates


def test_yunikorn_seed003_gang_waits_whole_then_runs_when_gpus_added(cluster, api, namespace):
    """Opt-in (TFOP_E2E_SCHEDULERS=...,yunikorn; port 9080 is fixed): the yunikorn backend's
    task groups on the real YuniKorn. Seed 003 on 4 GPUs: YuniKorn's placeholders reserve for
    the gang (some may bind), the job's own 5 pods never bind; add 4 GPUs -> all 5 Running."""
    if "yunikorn" not in cluster.state.get("schedulers", []):
        pytest.skip("session cluster runs without yunikorn (add it to TFOP_E2E_SCHEDULERS)")
    with pool(cluster, api, namespace) as p, operator(cluster, namespace, "yunikorn"):
        p.add(2, gpus=2)
        job = seed003(namespace, p)
        submit(cluster, job)
        name = job["metadata"]["name"]
        watch_gang_waits(api, job)
        for pod in api.pods(namespace, name):
            assert pod["spec"]["schedulerName"] == "yunikorn"

        def placeholders():
            return [q for q in api.pods(namespace)
                    if (q["metadata"].get("annotations") or {}).get(YUNIKORN_PLACEHOLDER) == "true"]
        # YuniKorn read tfop's task groups: one placeholder per gang member (PS 1, Worker 4).
        held = wait_until(lambda: len(placeholders()) == 5 and placeholders(), 30, "5 YuniKorn placeholders",
                          lambda: [q["metadata"]["name"] for q in placeholders()])
        groups = sorted((q["metadata"]["annotations"] or {}).get("yunikorn.apache.org/task-group-name")
                        for q in held)
        assert groups == ["ps", "worker", "worker", "worker", "worker"], groups

        p.add(2, gpus=2)
        seen = wait_all_running(api, job, timeout=90)
        assert len(seen) == 5
        wait_until(lambda: not [q for q in placeholders() if not q["metadata"].get("deletionTimestamp")],
                   30, "placeholders replaced by the job's pods",
                   lambda: [q["metadata"]["name"] for q in placeholders()])


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


@pytest.mark.parametrize("backend", REAL_GANGS + list(KOORD_GANGS))
def test_gang_of_n_where_n_minus_2_fit_stays_pending(cluster, api, namespace, backend):
    tfop_backend, extra, scheduler = gang_setup(cluster, backend)
    with pool(cluster, api, namespace) as p, operator(cluster, namespace, tfop_backend, extra):
        p.add(2, gpus=1)
        # Seed 002's job (Worker 1 GPU, PS cpu) with 4 workers: N=5, and PS + 2 workers (N-2) fit.
        job = prepare_job(seed("002-0"), namespace, p, replicas={"Worker": 4})
        submit(cluster, job)
        assert len(expected_pods(job)) == 5
        watch_gang_waits(api, job, require_pods=backend != "volcano")
        for pod in api.pods(namespace, job["metadata"]["name"]):
            assert pod["spec"]["schedulerName"] == scheduler


# ------------------------------------------------------------------ 4. two jobs, each fits alone


@pytest.mark.parametrize("backend", REAL_GANGS)
def test_two_gangs_never_split_capacity(cluster, api, namespace, backend):
    with pool(cluster, api, namespace) as p, operator(cluster, namespace, backend):
        p.add(4, gpus=1)
        base = seed("002-0")
        jobs = [prepare_job(base, namespace, p, name=n, replicas={"Worker": 3}) for n in ("gang-a", "gang-b")]
        submit(cluster, *jobs)  # at once
        # Binding is one API call per pod, so a gang the scheduler has committed shows up
        # bound pod by pod over a few hundred ms. What must never happen: a job holding
        # some but not all of its GPUs for longer than that, or the job that waits ever
        # holding any.
        in_flight = 3.0
        partial_since: dict[str, float] = {}
        ever_bound: dict[str, float] = {}
        t0 = time.monotonic()
        while time.monotonic() - t0 < 15:
            now = time.monotonic() - t0
            pods = api.pods(namespace)
            for j in jobs:
                n, want = j["metadata"]["name"], set(gpu_pods(j))
                bound = {p["metadata"]["name"] for p in pods if p["spec"].get("nodeName")
                         and not p["metadata"].get("deletionTimestamp")} & want
                if bound:
                    ever_bound.setdefault(n, now)
                if bound and bound != want:
                    since = partial_since.setdefault(n, now)
                    assert now - since <= in_flight, \
                        f"{n} has held {len(bound)}/{len(want)} GPU pods since {since:.1f}s (now {now:.1f}s): {bound}"
                else:
                    partial_since.pop(n, None)
            time.sleep(POLL)
        assert not partial_since, f"a job still holds part of its GPUs: {partial_since}"
        running = [j for j in jobs if all_running(api, j)]
        assert len(running) == 1, {j["metadata"]["name"]: phases(api, namespace, j["metadata"]["name"])
                                   for j in jobs}
        waiting = next(j for j in jobs if j is not running[0])
        assert waiting["metadata"]["name"] not in ever_bound, f"the waiting job held GPUs: {ever_bound}"
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


# ------------------------------------------------------------------ 7. backends without a scheduler here

KUBE_BATCH_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    # *.k8s.io groups are protected; "unapproved, ..." is how non-upstream CRDs say so.
    "metadata": {"name": "podgroups.scheduling.incubator.k8s.io",
                 "annotations": {"api-approved.kubernetes.io": "unapproved, kube-batch's historical API"}},
    "spec": {
        "group": "scheduling.incubator.k8s.io", "scope": "Namespaced",
        "names": {"kind": "PodGroup", "listKind": "PodGroupList", "plural": "podgroups", "singular": "podgroup"},
        "versions": [{"name": "v1alpha1", "served": True, "storage": True,
                      "schema": {"openAPIV3Schema": {"type": "object",
                                                     "x-kubernetes-preserve-unknown-fields": True}}}],
    },
}

# backend -> (seed job, keep the seed's schedulerName, the pods' schedulerName)
APISERVER_ONLY = {
    "kube-arbitrator": ("000-0", True, "kube-batchd"),
    "kube-batch": ("001-0", True, "kube-batch"),
    "koordinator": ("004-0", False, "koord-scheduler"),
    "yunikorn": ("004-0", False, "yunikorn"),
    "coscheduling": ("004-0", False, "default-scheduler"),  # ACK: Coscheduling inside the default scheduler
}


def check_markings(backend: str, job: dict, obj: dict, pods: list[dict]) -> None:
    name, uid = job["metadata"]["name"], obj["metadata"]["uid"]
    total = len(expected_pods(job))
    for pod in pods:
        meta = pod["metadata"]
        labels, ann = meta.get("labels") or {}, meta.get("annotations") or {}
        owner = [o for o in meta.get("ownerReferences") or [] if o.get("controller")]
        assert owner and owner[0]["uid"] == uid and owner[0]["kind"] == "TFJob", meta.get("ownerReferences")
        where = f"{backend}: pod {meta['name']}"
        if backend == "kube-batch":
            assert ann.get("scheduling.k8s.io/group-name") == name, where
        elif backend == "koordinator":
            assert ann.get("gang.scheduling.koordinator.sh/name") == name, where
            assert ann.get("gang.scheduling.koordinator.sh/min-available") == str(total), where
            assert ann.get("gang.scheduling.koordinator.sh/mode") == "Strict", where
        elif backend == "yunikorn":
            assert labels.get("applicationId", "").startswith(f"{job['metadata']['namespace']}-"), where
            assert labels.get("queue") == "root.default", where
            assert ann.get("yunikorn.apache.org/task-group-name") == "worker", where
        elif backend == "coscheduling":
            assert labels.get("pod-group.scheduling.sigs.k8s.io/name") == name, where
            assert labels.get("pod-group.scheduling.sigs.k8s.io/min-available") == str(total), where
    if backend == "yunikorn":
        ids = {p["metadata"]["labels"]["applicationId"] for p in pods}
        assert len(ids) == 1, ids
        first = next(p for p in pods if p["metadata"]["name"] == f"{name}-worker-0")
        groups = json.loads(first["metadata"]["annotations"]["yunikorn.apache.org/task-groups"])
        assert [(g["name"], g["minMember"]) for g in groups] == [("worker", total)], groups
        assert groups[0]["minResource"] == {"nvidia.com/gpu": "1"}, groups
        assert groups[0]["nodeSelector"] == {POOL_LABEL: job["metadata"]["namespace"]}, groups
        assert "gangSchedulingStyle=Hard" in first["metadata"]["annotations"][
            "yunikorn.apache.org/schedulingPolicyParameters"]


def check_group(backend: str, job: dict, obj: dict, grp: dict) -> None:
    name, total = job["metadata"]["name"], len(expected_pods(job))
    owner = grp["metadata"]["ownerReferences"]
    assert len(owner) == 1 and owner[0]["uid"] == obj["metadata"]["uid"] and owner[0]["kind"] == "TFJob" \
        and owner[0]["controller"] is True, owner
    assert grp["metadata"]["name"] == name
    if backend == "kube-arbitrator":
        assert grp["spec"]["minAvailable"] == total, grp["spec"]
        assert grp["spec"]["selector"] == {"matchLabels": {JOB_LABEL: name}}, grp["spec"]
    else:
        assert grp["spec"]["minMember"] == total, grp["spec"]


SENTENCE_SECONDS = 30  # a pod's or group's change is a pass at once; its status is written within 5 s


def refused_and_said(api, backend: str, namespace: str, name: str, pods: list[str]) -> None:
    """Write what kube-batch v0.4.2 writes while a gang does not fit, its pool empty (tried against
    this harness's apiserver; ../shared/reference/real-nodes.md): the PodGroup Pending with an
    Unschedulable condition, and PodScheduled=False on each pod, both with the job's fit error.
    kube-batchd (the kube-arbitrator) has a PodDisruptionBudget, no group status: only the pods say it.
    tfop keeps the scheduler's words beside its own sentence, which says what the gang lacks."""
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    others = len(api.items("/api/v1/nodes"))  # every node belongs to another test's pool, or is none
    fit_error = (f"{len(pods)}/{len(pods)} tasks in gang unschedulable: 0/{others} nodes are available, "
                 f"{others} node(s) had untolerated taint.")
    if backend == "kube-batch":
        prefix, plural = GROUP_APIS[backend]
        api.merge_patch(f"{prefix}/namespaces/{namespace}/{plural}/{name}", {"status": {
            "phase": "Pending", "conditions": [{
                "type": "Unschedulable", "status": "True", "reason": "NotEnoughResources", "message": fit_error,
                "transitionID": "e2e-kube-batch", "lastTransitionTime": now}]}})
    for pod in pods:
        api.merge_patch(f"/api/v1/namespaces/{namespace}/pods/{pod}/status", {"status": {"conditions": [{
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": fit_error,
            "lastTransitionTime": now}]}})

    plain = f"waiting for 1 nvidia.com/gpu for {len(pods)} pods as one gang; none are free"

    def said() -> dict | None:
        status = (api.tfjob(namespace, name) or {}).get("status") or {}
        gang = status.get("gang") or {}
        return status if (gang.get("reason"), gang.get("message"), status.get("message")) == (
            "InsufficientResources", plain, plain) and fit_error in gang.get("schedulerMessage", "") else None
    status = wait_until(said, SENTENCE_SECONDS, f"TFJob {name}: {plain}", lambda: api.tfjob(namespace, name))
    assert status["gang"].get("phase") == ("Pending" if backend == "kube-batch" else None), status["gang"]


def scheduler_runs_here(cluster, scheduler_name: str) -> bool:
    running = cluster.state.get("schedulers", [])
    return any(SCHEDULER_NAMES.get(s) == scheduler_name for s in running)


SCHEDULER_NAMES = {"koordinator": KOORDINATOR_SCHEDULER_NAME, "yunikorn": "yunikorn"}


@pytest.mark.parametrize("backend", list(APISERVER_ONLY))
def test_backend_objects_against_apiserver(cluster, api, namespace, backend, kube_batch_crd_absence_checked):
    if backend != "kube-batch":
        return objects_against_apiserver(cluster, api, namespace, backend)
    kube_batch_crd_absence_checked.wait(timeout=300)  # missing_group_crd_is_an_error needs it absent
    cluster.apply(KUBE_BATCH_CRD)
    wait_established(cluster, KUBE_BATCH_CRD["metadata"]["name"])
    try:
        objects_against_apiserver(cluster, api, namespace, backend)
    finally:  # the cluster as it was: the CRD is absent where other tests look (tfop doctor's)
        cluster.kubectl("delete", "crd", KUBE_BATCH_CRD["metadata"]["name"], "--ignore-not-found", check=False)


def objects_against_apiserver(cluster, api, namespace, backend):
    seed_id, keep_scheduler, scheduler = APISERVER_ONLY[backend]
    # kube-batch and kube-arbitrator find the pool empty at first and refuse the gang, as they say it
    refused_first = backend in ("kube-batch", "kube-arbitrator")
    with pool(cluster, api, namespace) as p, operator(cluster, namespace, backend):
        nodes = [] if refused_first else p.add(2, gpus=1)
        job = prepare_job(seed(seed_id), namespace, p, keep_scheduler_name=keep_scheduler)
        name = job["metadata"]["name"]
        submit(cluster, job)
        want = expected_pods(job)
        wait_until(lambda: set(phases(api, namespace, name)) == set(want), 30, "every pod created",
                   lambda: phases(api, namespace, name))
        obj = api.tfjob(namespace, name)
        pods = api.pods(namespace, name)
        for pod in pods:
            assert pod["spec"]["schedulerName"] == scheduler, (pod["metadata"]["name"], pod["spec"]["schedulerName"])
        check_markings(backend, job, obj, pods)
        has_group = backend in GROUP_APIS
        if has_group:
            grp = wait_until(lambda: api.group(backend, namespace, name), 20, f"{backend} group object")
            check_group(backend, job, obj, grp)
        else:
            assert_no_group_objects(api, namespace)

        if scheduler != "default-scheduler" and not scheduler_runs_here(cluster, scheduler):
            # No such scheduler runs here: the pods wait, unbound.
            time.sleep(2)
            assert all(v == "Pending" for v in phases(api, namespace, name).values()), phases(api, namespace, name)
            if refused_first:
                refused_and_said(api, backend, namespace, name, list(want))
                nodes = p.add(2, gpus=1)
            for i, pod in enumerate(want):  # act as that scheduler
                api.bind(namespace, pod, nodes[i % len(nodes)])
        wait_all_running(api, job)
        worker0 = f"{name}-worker-0"
        api.exit_pod(namespace, worker0, 0)
        wait_until(lambda: condition(api.tfjob(namespace, name), "Succeeded"), 30, "job Succeeded",
                   lambda: phases(api, namespace, name))
        if has_group:
            wait_until(lambda: api.group(backend, namespace, name) is None, 20, "group deleted")
            # upstream #1011: the finished job's group must never come back
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                assert api.group(backend, namespace, name) is None, f"{backend} group re-created after finish"
                time.sleep(POLL)
        else:
            assert_no_group_objects(api, namespace)


# ------------------------------------------------------------------ 8. gang scheduling off


def test_without_gang_scheduling_no_group_and_default_scheduler(cluster, api, namespace):
    with pool(cluster, api, namespace) as p, operator(cluster, namespace, None):
        p.add(1, gpus=1)
        job = prepare_job(seed("002-0"), namespace, p)
        name = job["metadata"]["name"]
        submit(cluster, job)
        wait_all_running(api, job)
        for pod in api.pods(namespace, name):
            meta = pod["metadata"]
            assert pod["spec"]["schedulerName"] == "default-scheduler"
            assert "scheduling.k8s.io/group-name" not in (meta.get("annotations") or {})
            assert not any(k.startswith(("scheduling.x-k8s.io/", "pod-group.scheduling"))
                           for k in meta.get("labels") or {})
        assert_no_group_objects(api, namespace)
        assert "gang" not in (api.tfjob(namespace, name).get("status") or {})


# ------------------------------------------------------------------ 9. start-up: the group object's CRD

GANG_LOG_LINE = "gang scheduling: --gang-scheduler-name={backend};"


def settled_log(op) -> list[str]:
    """The operator's log a moment after it started (the CRD check comes before its caches sync)."""
    time.sleep(2)
    return op.log_path.read_text(errors="replace").splitlines()


def test_built_in_group_kind_starts_without_error(cluster, api, namespace):
    """kube-arbitrator's group object is a PodDisruptionBudget (policy/v1, built into Kubernetes): no
    CRD to check, so no error at start-up."""
    with operator(cluster, namespace, "kube-arbitrator") as op:
        lines = settled_log(op)
    assert any(GANG_LOG_LINE.format(backend="kube-arbitrator") in line for line in lines), "\n".join(lines)
    wrong = [line for line in lines if "ERROR" in line or "is not installed" in line]
    assert not wrong, "\n".join(wrong)


def test_missing_group_crd_is_an_error(cluster, api, namespace, kube_batch_crd_absence_checked):
    """A CRD-based backend whose group CRD is absent: one error line naming the CRD, and the operator
    keeps serving."""
    crd = KUBE_BATCH_CRD["metadata"]["name"]
    try:
        assert api.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd}") is None, \
            f"CRD {crd} is installed already: this scenario needs it absent"
        with operator(cluster, namespace, "kube-batch") as op:
            lines = settled_log(op)
            assert op.process.poll() is None, op.log_tail()
    finally:
        kube_batch_crd_absence_checked.set()
    assert any(GANG_LOG_LINE.format(backend="kube-batch") in line for line in lines), "\n".join(lines)
    missing = [line for line in lines if "is not installed" in line]
    assert len(missing) == 1 and " ERROR tfop: " in missing[0], "\n".join(lines)
    assert missing[0].endswith(
        f"CRD {crd} is not installed: kube-batch gangs cannot be created until it is (see `tfop doctor`)"), missing


def test_built_in_gang_api_not_served_is_an_error(cluster, api, namespace):
    """The kubernetes backend on an apiserver that does not serve scheduling.k8s.io/v1beta1 (1.34): one
    error line saying what to enable, and the operator keeps serving."""
    with operator(cluster, namespace, "kubernetes") as op:
        lines = settled_log(op)
        assert op.process.poll() is None, op.log_tail()
    assert any(GANG_LOG_LINE.format(backend="kubernetes") in line for line in lines), "\n".join(lines)
    said = [line for line in lines if "does not serve" in line]  # the informer's own retries say less
    assert len(said) == 1 and " ERROR tfop: " in said[0] and said[0].endswith(
        "the apiserver does not serve podgroups.scheduling.k8s.io/v1beta1: kubernetes gangs cannot be created "
        "until it does (Kubernetes 1.37+ with the GenericWorkload feature gate and that API enabled; see "
        "`tfop doctor`)"), "\n".join(lines)
