"""TFJobs behind Kueue's quota (sigs.k8s.io/kueue v0.15.0, its kubeflow.org/tfjob integration).

Kueue's webhook suspends every TFJob labelled kueue.x-k8s.io/queue-name at create; Kueue makes a
Workload of it, admits it within its ClusterQueue's quota by setting spec.runPolicy.suspend to
false, and preempts it by setting suspend again, then waits until replicaStatuses count no active
pod before it gives the quota to another job. tfop runs as deployed (its own role) and only
follows spec.runPolicy.suspend.

Kueue's webhooks see every TFJob of the cluster, so these tests run on a cluster of this module
only, with Volcano and scheduler-plugins for the gang cases.
"""
from __future__ import annotations

import itertools
import json
import re
import time
import uuid
from datetime import datetime

import pytest

from e2e.harness import kueue as kueue_harness
from e2e.pytest_plugin import own_cluster
from e2e.tests.gang_helpers import SCHEDULER_OF, Api
from e2e.tests.kueue_helpers import (
    active_counts,
    create,
    delete_cluster_objects,
    finish_pods,
    gpu_job,
    hold_window,
    live_pods,
    priority_class,
    queue_objects,
    suspended,
    wait_workload,
    wl_condition,
    wl_true,
    workload,
)
from e2e.tests.test_in_cluster import doctor
from e2e.tests.lifecycle_helpers import Env, condition, is_true, operator, pod_names, replica, tfjob
from tfop.tools.doctor import kueue as doctor_kueue

pytestmark = [pytest.mark.cluster, pytest.mark.builds("kueue")]


@pytest.fixture(scope="module")
def kueue_cluster(tmp_path_factory):
    with own_cluster(tmp_path_factory.mktemp("e2e-kueue"), ("default", "coscheduling", "volcano", "kueue"),
                     gpu_nodes=4) as c:
        yield c


@pytest.fixture
def make_env(kueue_cluster, request):
    """make_env(gang) -> Env: a fresh namespace and a tfop (gang backend or none) watching it."""
    made: list[tuple[Env, tuple[str, ...]]] = []

    def make(gang: str | None, priority_classes: tuple[str, ...] = ()) -> Env:
        base = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower()).strip("-")[:30].strip("-")
        ns = f"{base}-{uuid.uuid4().hex[:5]}"
        kueue_cluster.kubectl("create", "namespace", ns)
        env = Env(kueue_cluster, ns)
        made.append((env, priority_classes))
        env.wait(f"default ServiceAccount in {ns}", lambda: kueue_cluster.kubectl(
            "get", "sa", "default", "-n", ns, check=False).returncode == 0, 30)
        env.op = operator(kueue_cluster, [ns], gang_scheduler_name=gang)
        env.op.start()
        return env

    yield make
    for env, classes in made:
        delete_cluster_objects(env, env.ns, classes)
        if env.op is not None:
            env.op.stop()
        kueue_cluster.kubectl("delete", "namespace", env.ns, "--wait=false", check=False)


def _time(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def _admitted_and_running(env: Env, job: str, workers: int) -> None:
    wait_workload(env, job, "Admitted")
    env.wait_job(job, lambda j: not suspended(j), "unsuspended by Kueue")
    env.wait_pods_running(job, pod_names(job, Worker=workers), timeout=60)
    env.wait_condition(job, "Running")


def test_jobs_are_admitted_within_quota_and_the_next_waits_without_pods(make_env):
    env = make_env(gang=None)
    env.apply(*queue_objects(env.ns, gpus=4))

    first = create(env, gpu_job("first", env.ns, workers=3))
    assert suspended(first), f"Kueue's webhook must suspend a queued TFJob at create: {first['spec']}"
    _admitted_and_running(env, "first", 3)

    second = create(env, gpu_job("second", env.ns, workers=2))  # 3 + 2 GPUs > 4
    assert suspended(second)
    env.wait_condition("second", "Suspended")  # tfop's word for a job Kueue holds
    pending = env.wait("the second Workload found no quota", lambda: (
        (w := workload(env, "second")) and (c := wl_condition(w, "QuotaReserved"))
        and c["status"] == "False" and w), 30, job="second")
    assert "nvidia.com/gpu" in wl_condition(pending, "QuotaReserved")["message"], pending["status"]
    assert hold_window(env, "second", 3) > 5
    assert not wl_true(workload(env, "second"), "QuotaReserved")

    finish_pods(env, "first", pod_names("first", Worker=3))
    wait_workload(env, "first", "Finished")
    _admitted_and_running(env, "second", 2)
    resumed = condition(env.job("second"), "Suspended")
    assert resumed and resumed["status"] == "False" and resumed["reason"] == "TFJobResumed", resumed
    finish_pods(env, "second", pod_names("second", Worker=2))
    wait_workload(env, "second", "Finished")


def test_a_higher_priority_job_preempts_and_the_preempted_one_resumes(make_env):
    low_class, high_class = f"low-{uuid.uuid4().hex[:5]}", f"high-{uuid.uuid4().hex[:5]}"
    env = make_env(gang=None, priority_classes=(low_class, high_class))
    env.apply(priority_class(low_class, 100), priority_class(high_class, 1000),
              *queue_objects(env.ns, gpus=4, preempt=True))

    create(env, gpu_job("low", env.ns, workers=4, priority=low_class))
    _admitted_and_running(env, "low", 4)

    create(env, gpu_job("high", env.ns, workers=2, priority=high_class))
    released = None
    deadline = time.monotonic() + 90
    while True:  # until the high job runs, never both jobs' pods at once
        # High's first: low's pods seen after high's existed when high's were read too.
        high_pods = live_pods(env, "high")
        low_pods = live_pods(env, "low")
        both = [p["metadata"]["name"] for p in low_pods + high_pods] if low_pods and high_pods else []
        assert not both, f"both jobs had pods at once: {both}"
        low = env.job("low")
        if released is None and suspended(low) and is_true(low, "Suspended") and not low_pods:
            released = low
        if released is not None and len(high_pods) == 2 and all(
                (p.get("status") or {}).get("phase") == "Running" for p in high_pods):
            break
        assert time.monotonic() < deadline, f"high never ran:\n{env.context('low')}\n{env.context('high')}"
        time.sleep(0.2)
    low = env.job("low")  # Kueue gave the quota away only once this said no pod is active
    assert suspended(low) and is_true(low, "Suspended"), low["status"]
    assert active_counts(low) and set(active_counts(low).values()) == {0}, low["status"]
    evicted = wl_condition(workload(env, "low"), "Evicted")
    assert evicted and evicted["status"] == "True" and evicted["reason"] == "Preempted", evicted
    assert wl_true(workload(env, "high"), "Admitted")
    env.wait_condition("high", "Running")

    finish_pods(env, "high", pod_names("high", Worker=2))
    _admitted_and_running(env, "low", 4)
    assert condition(env.job("low"), "Suspended")["status"] == "False"
    finish_pods(env, "low", pod_names("low", Worker=4))
    wait_workload(env, "low", "Finished")


@pytest.mark.parametrize("backend", ["volcano", "scheduler-plugins"])
def test_quota_admission_comes_before_gang_placement(make_env, kueue_cluster, backend):
    env = make_env(gang=backend)
    api = Api(kueue_cluster)
    env.apply(*queue_objects(env.ns, gpus=4, hold=True))  # the ClusterQueue admits nothing yet
    group = lambda: api.group(backend, env.ns, "gang")  # noqa: E731

    assert suspended(create(env, gpu_job("gang", env.ns, workers=2)))
    env.wait_condition("gang", "Suspended")
    assert hold_window(env, "gang", 3, group=group) > 5

    env.kubectl("patch", "clusterqueue", env.ns, "--type=merge", "-p", '{"spec":{"stopPolicy":"None"}}',
                namespaced=False)
    admitted = wait_workload(env, "gang", "Admitted")
    pg = env.wait(f"{backend} PodGroup of gang", group, 30, job="gang")
    assert pg["spec"]["minMember"] == 2, pg["spec"]
    assert _time(pg["metadata"]["creationTimestamp"]) >= _time(
        wl_condition(admitted, "Admitted")["lastTransitionTime"]), (pg["metadata"], admitted["status"])
    pods = env.wait_pods_running("gang", pod_names("gang", Worker=2), timeout=60)
    assert {p["spec"].get("schedulerName") for p in pods} == {SCHEDULER_OF[backend]}

    finish_pods(env, "gang", pod_names("gang", Worker=2))
    wait_workload(env, "gang", "Finished")
    env.wait("the finished job's PodGroup deleted", lambda: group() is None, 30, job="gang")


def test_the_harness_registers_only_the_tfjob_and_kueue_webhooks(kueue_cluster):
    """Kueue's pod, Job, Deployment... webhooks would see every pod of the cluster: never there."""
    rules, urls = set(), set()
    for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
        got = json.loads(kueue_cluster.kubectl("get", kind, "-o", "json").stdout)["items"]
        for hook in (h for cfg in got for h in cfg["webhooks"] if h["name"].endswith(".kb.io")):
            urls.add(hook["clientConfig"]["url"].split("/")[2])
            rules |= {(group, resource) for r in hook["rules"] for group in r["apiGroups"]
                      for resource in r["resources"]}
    assert {g for g, _ in rules} == {"kubeflow.org", "kueue.x-k8s.io"}, rules
    assert {r for g, r in rules if g == "kubeflow.org"} == {"tfjobs"}, rules
    assert len(urls) == 1 and next(iter(urls)).startswith("127.0.0.1:"), urls


def test_a_job_without_a_queue_label_is_left_to_tfop(make_env):
    env = make_env(gang=None)
    job = create(env, tfjob("plain", {"Worker": replica(2, exit_code=0, exit_delay="1s")}))
    assert not suspended(job), job["spec"]
    env.wait_condition("plain", "Succeeded", timeout=60)
    assert workload(env, "plain") is None


def test_lowercase_replica_keys_are_invisible_to_kueue_so_the_job_waits(make_env):
    """tfop reads `worker:` as Worker, but Kueue reads the map with training-operator's Go types,
    where only `Worker` is a worker: it finds no pod set, cannot create the Workload, and the job,
    suspended by its webhook, is never admitted. The same with training-operator v1.9: it also
    defaults the keys in memory only (no mutating webhook). The README tells users to write them
    as Kueue does."""
    env = make_env(gang=None)
    env.apply(*queue_objects(env.ns, gpus=4))
    job = gpu_job("lower", env.ns, workers=1)
    job["spec"]["tfReplicaSpecs"] = {"worker": job["spec"]["tfReplicaSpecs"]["Worker"]}
    assert suspended(create(env, job))
    env.wait_condition("lower", "Suspended")
    assert hold_window(env, "lower", 5) > 10
    assert workload(env, "lower") is None


def _kueue_check(cluster) -> tuple[str, str]:
    """tfop doctor's Kueue check, as its user reads it: (PASS/FAIL/SKIP, the lines under it)."""
    report = doctor(cluster).stdout
    lines = report.splitlines()
    at = next((i for i, line in enumerate(lines) if line.endswith("] " + doctor_kueue.TITLE)), None)
    assert at is not None, report
    under = itertools.takewhile(lambda line: line.startswith(" " * 7), lines[at + 1:])
    return lines[at][1:5], "\n".join(line.strip() for line in under)


def _publish_config(cluster) -> None:
    """Kueue's Configuration where its release manifests keep it (the harness's Kueue reads a file)."""
    namespace, name = doctor_kueue.CONFIG_MAP
    cluster.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace},
                   "data": {doctor_kueue.CONFIG_KEY: kueue_harness.config_text(cluster)}})


def test_doctor_says_when_kueue_does_not_queue_tfjobs(make_env, kueue_cluster):
    """Kueue v0.19+ leaves kubeflow.org/tfjob out of its integrations by default. Then a labelled
    TFJob is neither suspended nor given a Workload, and tfop runs it at once, outside the quota:
    `tfop doctor` says so from Kueue's Configuration, and from the job itself once it has waited
    a minute for its Workload."""
    env = make_env(gang=None)
    env.apply(*queue_objects(env.ns, gpus=4))
    _publish_config(kueue_cluster)
    try:
        assert _kueue_check(kueue_cluster) == ("PASS", "kueue-system/kueue-manager-config lists it")
        kueue_harness.restart_with_frameworks(kueue_cluster, ["batch/job"], 60)
        _publish_config(kueue_cluster)
        job = create(env, gpu_job("unqueued", env.ns, workers=1))
        created = time.monotonic()
        assert not suspended(job), job["spec"]
        env.wait("the job's pod, with no Kueue to hold it", lambda: env.pods("unqueued"), 30)
        mark, said = _kueue_check(kueue_cluster)
        assert mark == "FAIL" and "integrations.frameworks lacks kubeflow.org/tfjob" in said, said
        assert "add kubeflow.org/tfjob to integrations.frameworks" in said, said
        assert workload(env, "unqueued") is None
        kueue_cluster.kubectl("delete", "configmap", "-n", doctor_kueue.CONFIG_MAP[0], doctor_kueue.CONFIG_MAP[1])
        time.sleep(max(0.0, doctor_kueue.WORKLOAD_GRACE_SECONDS + 1 - (time.monotonic() - created)))
        mark, said = _kueue_check(kueue_cluster)
        assert mark == "FAIL" and "have no Workload after 60 s" in said and f"{env.ns}/unqueued" in said, said
    finally:
        kueue_harness.restart_with_frameworks(kueue_cluster, [kueue_harness.KUEUE_FRAMEWORK], 60)
        kueue_cluster.kubectl("delete", "configmap", "-n", doctor_kueue.CONFIG_MAP[0], doctor_kueue.CONFIG_MAP[1],
                              "--ignore-not-found", check=False)
