"""TFJobs across clusters with Kueue's MultiKueue (e2e.harness.multikueue): a manager cluster
(Kueue and tfop; no nodes, no scheduler) queues each job and dispatches it to a worker cluster with
room, whose Kueue admits it and whose tfop runs it; Kueue copies the worker's status back.

Three control planes: the manager, worker-a (Volcano for gangs) and worker-b. Every cluster runs
tfop as deployed, watching the test's namespace; a job's pods, Services and gang group may only
ever exist on the worker that runs it.
"""
from __future__ import annotations

import contextlib
import json
import re
import time
import uuid

import pytest

from e2e.harness import multikueue
from e2e.harness.kwok import GPU_RESOURCE
from e2e.pytest_plugin import own_cluster
from e2e.tests.gang_helpers import GROUP_APIS, Api
from e2e.tests.kueue_helpers import create, delete_cluster_objects, gpu_job, queue_objects, wait_workload, wl_condition
from e2e.tests.lifecycle_helpers import Env, is_true, operator, pod_names

pytestmark = [pytest.mark.cluster, pytest.mark.builds("kueue")]
WORKERS = ("worker-a", "worker-b")
# What a manager must never get for a dispatched job, and no worker but the one that runs it.
CHILDREN = ("pods", "services", GROUP_APIS["volcano"][1])
ADMITTED_WITHIN = 90  # MultiKueue dispatch: a reservation on the manager, then on a worker


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """{"manager": Cluster, "worker-a": ..., "worker-b": ...}, the workers connected."""
    base = tmp_path_factory.mktemp("e2e-multikueue")
    with contextlib.ExitStack() as stack:
        clusters = {"manager": stack.enter_context(own_cluster(base / "manager", ("kueue",), gpu_nodes=0)),
                    "worker-a": stack.enter_context(own_cluster(base / "worker-a", ("default", "volcano", "kueue"),
                                                                gpu_nodes=4)),
                    "worker-b": stack.enter_context(own_cluster(base / "worker-b", ("default", "kueue"),
                                                                gpu_nodes=4))}
        multikueue.connect(clusters["manager"], {w: clusters[w] for w in WORKERS})
        multikueue.wait_connected(clusters["manager"], WORKERS)
        yield clusters


@pytest.fixture
def envs(fleet, request):
    """make(gangs) -> {cluster name: Env}: one fresh namespace on every cluster, a tfop on each
    (gangs: cluster name -> gang backend), and the namespace's queues (see queues())."""
    made: list[dict[str, Env]] = []

    def make(gangs: dict[str, str] | None = None) -> dict[str, Env]:
        base = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower()).strip("-")[:30].strip("-")
        ns = f"{base}-{uuid.uuid4().hex[:5]}"
        out = {}
        for name, cluster in fleet.items():
            cluster.kubectl("create", "namespace", ns)
            env = out[name] = Env(cluster, ns)
            env.wait(f"default ServiceAccount in {ns}", lambda c=cluster: c.kubectl(
                "get", "sa", "default", "-n", ns, check=False).returncode == 0, 30)
            env.op = operator(cluster, [ns], gang_scheduler_name=(gangs or {}).get(name))
            env.op.start()
        made.append(out)
        return out

    yield make
    for out in made:
        for env in out.values():
            delete_cluster_objects(env, env.ns)
            env.cluster.kubectl("delete", "namespace", env.ns, "--wait=false", check=False)
            env.op.stop()


def queues(envs: dict[str, Env], worker_gpus: dict[str, int]) -> None:
    """The manager's ClusterQueue dispatches through MultiKueue (quota for anything); each worker's
    ClusterQueue of the same name admits what its GPUs quota allows."""
    ns = envs["manager"].ns
    envs["manager"].apply(*queue_objects(ns, gpus=100, checks=("multikueue",)))
    for worker, gpus in worker_gpus.items():
        envs[worker].apply(*queue_objects(ns, gpus=gpus))


def children(env: Env) -> dict[str, list[str]]:
    """The namespace's pods, Services and PodGroups (by name), as listed now; a cluster without
    Volcano's API has no PodGroup."""
    found = {}
    for kind in CHILDREN:
        p = env.kubectl("get", kind, "-o", "jsonpath={.items[*].metadata.name}", check=False)
        if p.returncode != 0 and "doesn't have a resource type" not in p.stderr:
            raise AssertionError(f"kubectl get {kind}: {p.stderr}")
        found[kind] = p.stdout.split() if p.returncode == 0 else []
    return found


def creations(cluster, since: int, ns: str) -> list[tuple[str, str, str]]:
    """(user, resource, verb) of every write to `ns` the audit log holds from `since` on."""
    return [(e["user"]["username"], e["objectRef"].get("resource", ""), e["verb"])
            for e in cluster.audit_entries(since)
            if (e.get("objectRef") or {}).get("namespace") == ns and e["verb"] in ("create", "update", "patch")
            and e["objectRef"].get("resource") in CHILDREN]


def mirrored(local: dict | None, remote: dict | None) -> bool:
    """The manager's job shows the worker's conditions, start time and replica counts (Kueue's copy
    leaves out a count of 0: upstream's Go type omits it)."""
    ours, theirs = (local or {}).get("status") or {}, (remote or {}).get("status") or {}

    def counts(status: dict) -> dict:
        return {rtype: tuple(int(r.get(k) or 0) for k in ("active", "succeeded", "failed"))
                for rtype, r in (status.get("replicaStatuses") or {}).items()}
    return bool(theirs) and all(ours.get(k) == theirs.get(k) for k in ("conditions", "startTime")) \
        and counts(ours) == counts(theirs)


def wait_mirrored(manager: Env, worker: Env, job: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not mirrored(local := manager.job(job), remote := worker.job(job)):
        if time.monotonic() > deadline:
            raise AssertionError(f"the worker's status of {job} not mirrored on the manager in {timeout:.0f}s:\n"
                                 f"manager: {json.dumps((local or {}).get('status'))}\n"
                                 f"worker: {json.dumps((remote or {}).get('status'))}")
        time.sleep(0.5)


def copy_created(worker, since: int, ns: str, job: str) -> dict | None:
    """The create of the job's copy on `worker`, as its audit log holds it (with the request body)."""
    for e in worker.audit_entries(since):
        ref = e.get("objectRef") or {}
        if (ref.get("resource"), ref.get("namespace"), ref.get("name"), e["verb"]) == ("tfjobs", ns, job, "create"):
            return e
    return None


def test_a_gang_job_runs_on_the_worker_with_quota_and_succeeds_on_the_manager(envs):
    """worker-b has no GPU quota: the job goes to worker-a, whose tfop runs it as a Volcano gang once
    worker-a's Kueue admits it. The gang waits whole there, then runs; its conditions, counts and
    end show on the manager."""
    env = envs({"worker-a": "volcano"})
    manager, worker, idle = env["manager"], env["worker-a"], env["worker-b"]
    ns = manager.ns
    queues(env, {"worker-a": 8, "worker-b": 0})
    since = {name: e.cluster.audit_offset() for name, e in env.items()}

    job = gpu_job("train", ns, workers=3)
    job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resources"] = {
        "requests": {GPU_RESOURCE: 2}, "limits": {GPU_RESOURCE: 2}}  # 6 GPUs; worker-a's nodes have 1 each
    stored = create(manager, job)
    assert stored["spec"]["runPolicy"]["suspend"] is True, stored["spec"]
    assert stored["spec"]["runPolicy"].get("managedBy") == multikueue.CONTROLLER, stored["spec"]["runPolicy"]

    remote = worker.wait("the job's copy on worker-a", lambda: worker.job("train"), ADMITTED_WITHIN, job="train")
    labels = remote["metadata"]["labels"]
    assert labels.get(multikueue.ORIGIN_LABEL) and labels.get(multikueue.PREBUILT_WORKLOAD_LABEL), labels
    assert not remote["spec"]["runPolicy"].get("managedBy"), "Kueue clears managedBy on the worker's copy"
    created = copy_created(worker.cluster, since["worker-a"], ns, "train")
    assert created is not None, "worker-a's audit log holds the copy's create"
    assert created["requestObject"]["spec"]["runPolicy"]["suspend"] is True, "the copy is created suspended"
    admitted = wl_condition(wait_workload(worker, "train", "Admitted"), "Admitted")

    # Admitted on quota, but no node of worker-a has 2 GPUs: tfop's sentence on the worker. Kueue
    # copies the status fields of upstream's TFJob (conditions, replicaStatuses, times) to the manager.
    api = Api(worker.cluster)
    waiting = worker.wait("tfop's waiting sentence on worker-a", lambda: (
        ((worker.job("train") or {}).get("status") or {}).get("gang") or {}).get("message"), 60, job="train")
    assert waiting.startswith("waiting for 6 nvidia.com/gpu for 3 pods as one gang"), waiting
    wait_mirrored(manager, worker, "train")
    group = api.group("volcano", ns, "train")
    assert group is not None, "the gang's PodGroup on worker-a"
    assert group["metadata"]["creationTimestamp"] >= admitted["lastTransitionTime"], (group, admitted)
    assert not [p for p in worker.pods("train") if (p["spec"].get("nodeName"))], "no member placed alone"

    worker.cluster.add_gpu_nodes(3, gpus=2)
    pods = worker.wait_pods_running("train", pod_names("train", Worker=3), timeout=60)
    assert all(p["metadata"]["creationTimestamp"] >= admitted["lastTransitionTime"] for p in pods)
    for p in pods:
        worker.mark_exit(p["metadata"]["name"], 0)
    manager.wait_condition("train", "Succeeded", timeout=60)
    assert manager.job("train")["status"].get("completionTime")
    worker.wait("worker-a's copy cleaned up", lambda: worker.job("train") is None, 60, job="train")

    for name in ("manager", "worker-b"):
        assert not any(children(env[name]).values()), (name, children(env[name]))
        assert creations(env[name].cluster, since[name], ns) == [], name
    assert idle.job("train") is None and copy_created(idle.cluster, since["worker-b"], ns, "train") is None
    assert is_true(manager.job("train"), "Succeeded")
