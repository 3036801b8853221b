"""Why a gang waits, in tfop's own words, on the real control plane (tfop/core/pending.py).

Each test runs the operator as deployed (its ServiceAccount and the ClusterRole `tfop manifests`
renders, gang scheduling on), with its own tainted kwok GPU nodes (gang_helpers.Pool), and checks
the sentence where a user looks: status.gang.message (the scheduler's words kept beside it, in
schedulerMessage), the Message column of `kubectl get tfjob -o wide`, and exactly one Warning Event
per change of cause, however many passes and however the free counts move.
"""
from __future__ import annotations

import json
import time
import uuid

import pytest

from e2e.harness.kwok import GPU_RESOURCE
from e2e.tests.gang_helpers import Api, Pool, ScopedOperator, gpu_pool, operator, wait_all_running, wait_until

pytestmark = pytest.mark.cluster
# A waiting gang is looked at again at least every 30 s (gang_step.WAITING_RECHECK_SECONDS), which is
# when a change of the nodes shows in its sentence; its status is written within 5 s of a pass.
SENTENCE_SECONDS = 50


def needs(cluster, scheduler: str) -> None:
    if scheduler not in cluster.state.get("schedulers", []):
        pytest.skip(f"session cluster runs without {scheduler} (see TFOP_E2E_SCHEDULERS)")


def gpu_job(ns: str, name: str, pool: Pool | None, workers: int, gpus: int, queue: str | None = None,
            priority_class: str | None = None) -> dict:
    spec = {"containers": [{"name": "tensorflow", "image": "registry.example/tf:2",
                            "resources": {"limits": {GPU_RESOURCE: str(gpus)}, "requests": {"cpu": "100m"}}}]}
    if priority_class:
        spec["priorityClassName"] = priority_class
    job = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": name, "namespace": ns},
           "spec": {"tfReplicaSpecs": {"Worker": {"replicas": workers, "restartPolicy": "Never",
                                                  "template": {"spec": spec}}}}}
    if queue:
        job["spec"]["runPolicy"] = {"schedulingPolicy": {"queue": queue}}
    return pool.place(job) if pool else job


def submit(cluster, job: dict) -> None:
    cluster.apply(job)


def gang(api: Api, ns: str, name: str) -> dict:
    return ((api.tfjob(ns, name) or {}).get("status") or {}).get("gang") or {}


def wait_sentence(api: Api, ns: str, name: str, reason: str, message: str) -> dict:
    """status.gang says it, and the Message column (status.message) with it."""
    def said():
        status = (api.tfjob(ns, name) or {}).get("status") or {}
        g = status.get("gang") or {}
        return status if (g.get("reason"), g.get("message"), status.get("message")) == (reason, message, message) \
            else None
    return wait_until(said, SENTENCE_SECONDS, f"TFJob {name}: {reason}: {message}", lambda: gang(api, ns, name))


def wide_message(cluster, ns: str, name: str) -> str:
    """The MESSAGE column of `kubectl get tfjob -o wide` (the last-but-one column, before AGE)."""
    out = cluster.kubectl("get", "tfjob", name, "-n", ns, "-o", "wide").stdout.splitlines()
    header, row = out[0], out[1]
    start, end = header.index("MESSAGE"), header.rindex("AGE")  # MESSAGE holds "AGE" too
    return row[start:end].strip()


def warnings(api: Api, ns: str, name: str) -> list[tuple[str, str, int]]:
    return sorted((e["reason"], e["message"], e.get("count", 1)) for e in api.events(ns)
                  if e.get("type") == "Warning" and e["involvedObject"].get("name") == name
                  and e["involvedObject"].get("kind") == "TFJob")


def assert_said(cluster, api: Api, ns: str, name: str, reason: str, message: str) -> None:
    wait_sentence(api, ns, name, reason, message)
    assert wide_message(cluster, ns, name) == message
    assert gang(api, ns, name).get("schedulerMessage"), "the scheduler's own words are kept beside"


def test_volcano_gpus_short_then_on_too_many_nodes_then_enough(cluster, namespace):
    """Two workers of 4 GPUs: on 2 nodes of 2 GPUs too few in total; on 4 such nodes enough in total
    but no node fits a pod; with two nodes of 4 it runs. One Warning Event per cause, whatever the
    passes and the counts (the first 4-GPU node changes the numbers, not the cause)."""
    needs(cluster, "volcano")
    api = Api(cluster)
    with gpu_pool(cluster, api, namespace) as pool, operator(cluster, namespace, "volcano"):
        pool.add(2, gpus=2)
        job = gpu_job(namespace, "short", pool, workers=2, gpus=4)
        submit(cluster, job)
        short = ("waiting for 8 nvidia.com/gpu for 2 pods as one gang; 4 are free on 2 nodes (at most 2 on one node)")
        assert_said(cluster, api, namespace, "short", "InsufficientResources", short)

        pool.add(2, gpus=2)
        split = ("waiting for 8 nvidia.com/gpu for 2 pods as one gang; 8 are free on 4 nodes (at most 2 on one "
                 "node), but no node has 4 free for one worker pod")
        assert_said(cluster, api, namespace, "short", "NoNodeFitsPod", split)

        pool.add(1, gpus=4)  # one pod would fit now: new numbers, the same cause
        one = ("waiting for 8 nvidia.com/gpu for 2 pods as one gang; 12 are free on 5 nodes (at most 4 on one "
               "node), but only 1 of 2 worker pods fit (4 nvidia.com/gpu each on one node)")
        assert_said(cluster, api, namespace, "short", "NoNodeFitsPod", one)
        # One Event per cause, saying the sentence of the pass that met it (a node the informer has
        # not yet seen Ready may still count as none free then); the status follows every pass.
        events = warnings(api, namespace, "short")
        assert [(reason, count) for reason, _, count in events] == [("InsufficientResources", 1), ("NoNodeFitsPod", 1)]
        assert all(message.startswith("waiting for 8 nvidia.com/gpu for 2 pods as one gang; ") for _, message, _ in events)
        assert "but no node has 4 free for one worker pod" in events[1][1], events

        pool.add(1, gpus=4)
        wait_all_running(api, job, timeout=SENTENCE_SECONDS)
        status = wait_until(lambda: (lambda s: s if "reason" not in (s.get("gang") or {}) else None)(
            (api.tfjob(namespace, "short") or {}).get("status") or {}), 20, "status.gang to stop waiting")
        assert status["message"] == status["conditions"][-1]["message"]
        assert wide_message(cluster, namespace, "short") == status["message"]
        assert [w[0] for w in warnings(api, namespace, "short")] == ["InsufficientResources", "NoNodeFitsPod"]


def test_volcano_queue_closed_and_missing(cluster, namespace):
    needs(cluster, "volcano")
    api = Api(cluster)
    closed, missing = f"closed-{namespace}"[:63], f"missing-{namespace}"[:63]
    cluster.create_volcano_queue(closed)
    cluster.kubectl("patch", "queues.scheduling.volcano.sh", closed, "--subresource=status", "--type=merge",
                    "-p", '{"status":{"state":"Closed"}}')
    try:
        with gpu_pool(cluster, api, namespace) as pool, operator(cluster, namespace, "volcano"):
            pool.add(1, gpus=4)
            submit(cluster, gpu_job(namespace, "in-closed", pool, workers=1, gpus=1, queue=closed))
            submit(cluster, gpu_job(namespace, "in-missing", pool, workers=1, gpus=1, queue=missing))
            assert_said(cluster, api, namespace, "in-closed", "QueueClosed", f"queue {closed} is closed")
            assert_said(cluster, api, namespace, "in-missing", "QueueNotFound", f"queue {missing} does not exist")
            time.sleep(6)  # passes go on (pods, the PodGroup, the resync): the Events do not
            assert warnings(api, namespace, "in-closed") == [("QueueClosed", f"queue {closed} is closed", 1)]
            assert warnings(api, namespace, "in-missing") == [("QueueNotFound", f"queue {missing} does not exist", 1)]

            cluster.open_volcano_queue(closed)  # opened: the gang runs, the sentence goes
            wait_all_running(api, gpu_job(namespace, "in-closed", pool, workers=1, gpus=1), timeout=SENTENCE_SECONDS)
    finally:
        cluster.kubectl("delete", "queues.scheduling.volcano.sh", closed, "--ignore-not-found", check=False)


def blocker(ns: str, gpus: int) -> list[dict]:
    """A Volcano gang no node can take (its pod selects no node): once Volcano admits it (Inqueue),
    Volcano keeps its minResources for it, cluster-wide."""
    group = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
             "metadata": {"name": "held", "namespace": ns},
             "spec": {"minMember": 1, "queue": "default", "minResources": {GPU_RESOURCE: str(gpus)}}}
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "held-0", "namespace": ns, "annotations": {"scheduling.k8s.io/group-name": "held"}},
           "spec": {"schedulerName": "volcano", "nodeSelector": {"tfop.test/nowhere": "true"},
                    "containers": [{"name": "c", "image": "registry.example/tf:2",
                                    "resources": {"limits": {GPU_RESOURCE: str(gpus)}}}]}}
    return [group, pod]


def test_volcano_holding_a_gang_the_free_capacity_fits(cluster, namespace):
    """Another namespace's gang that Volcano admitted but no node can take keeps all but one of the
    cluster's GPUs in Volcano's books: a 2-GPU gang with 2 GPUs free on its own nodes is not admitted.
    After 10 s tfop says so (AdmissionHeld), once; when the other gang goes, it runs."""
    needs(cluster, "volcano")
    api = Api(cluster)
    other = f"held-{uuid.uuid4().hex[:6]}"
    with gpu_pool(cluster, api, namespace) as pool, operator(cluster, namespace, "volcano"):
        pool.add(2, gpus=1)
        total = sum(int((n["status"].get("allocatable") or {}).get(GPU_RESOURCE, "0"))
                    for n in api.get("/api/v1/nodes")["items"])
        cluster.kubectl("create", "namespace", other)
        try:
            cluster.apply(blocker(other, total - 1))
            wait_until(lambda: ((api.group("volcano", other, "held") or {}).get("status") or {}).get("phase")
                       == "Inqueue", 30, "the other gang admitted (Inqueue)")
            job = gpu_job(namespace, "fits", pool, workers=2, gpus=1)
            submit(cluster, job)
            held = ("waiting for volcano to admit 2 pods as one gang; the cluster's free capacity fits them, "
                    "but volcano keeps it for gangs it admitted earlier that have not started")
            assert_said(cluster, api, namespace, "fits", "AdmissionHeld", held)
            assert [(r, c) for r, _, c in warnings(api, namespace, "fits")] == [("AdmissionHeld", 1)]
        finally:
            cluster.kubectl("delete", "namespace", other, "--wait=true", "--timeout=60s", check=False, timeout=70)
        wait_all_running(api, job, timeout=SENTENCE_SECONDS)


def test_scheduler_plugins_missing_priority_class(cluster, namespace):
    needs(cluster, "coscheduling")
    api = Api(cluster)
    name = f"gpu-high-{namespace}"[:63]
    with gpu_pool(cluster, api, namespace) as pool, operator(cluster, namespace, "scheduler-plugins"):
        pool.add(1, gpus=4)
        job = gpu_job(namespace, "urgent", pool, workers=2, gpus=1, priority_class=name)
        submit(cluster, job)
        assert_said(cluster, api, namespace, "urgent", "PriorityClassNotFound", f"priority class {name} does not exist")
        time.sleep(6)  # the pods' creates are refused and retried meanwhile: one Event still
        assert [w for w in warnings(api, namespace, "urgent") if w[0] == "PriorityClassNotFound"] == [
            ("PriorityClassNotFound", f"priority class {name} does not exist", 1)]
        cluster.kubectl("create", "priorityclass", name, "--value=1000")
        try:
            wait_all_running(api, job, timeout=90)  # the refused pods are tried again on a backoff
        finally:
            cluster.kubectl("delete", "priorityclass", name, check=False)


def test_scheduler_plugins_gpus_short(cluster, namespace):
    needs(cluster, "coscheduling")
    api = Api(cluster)
    with gpu_pool(cluster, api, namespace) as pool, operator(cluster, namespace, "scheduler-plugins"):
        pool.add(3, gpus=2)
        submit(cluster, gpu_job(namespace, "wide", pool, workers=4, gpus=2))
        short = "waiting for 8 nvidia.com/gpu for 4 pods as one gang; 6 are free on 3 nodes (at most 2 on one node)"
        assert_said(cluster, api, namespace, "wide", "InsufficientResources", short)
        time.sleep(6)  # passes go on (the pods, the PodGroup): the Event does not repeat
        events = warnings(api, namespace, "wide")
        assert [(reason, count) for reason, _, count in events] == [("InsufficientResources", 1)], events
        assert events[0][1].startswith("waiting for 8 nvidia.com/gpu for 4 pods as one gang; "), events


class WithoutNodes(ScopedOperator):
    """The deployed role less its nodes rule, as on a cluster whose admin removed it."""

    def __init__(self, cluster, namespaces):
        super().__init__(cluster, namespaces, "volcano")
        self.account = "tfop-volcano-without-nodes"

    def deploy(self) -> None:
        super().deploy()
        role = json.loads(self.cluster.kubectl("get", "clusterrole", self.account, "-o", "json").stdout)
        role["rules"] = [r for r in role["rules"] if "nodes" not in r.get("resources", [])]
        self.cluster.kubectl("replace", "-f", "-", input=json.dumps(role))


def test_without_the_nodes_rule_the_sentence_does_without_capacity(cluster, namespace):
    """A missing read degrades the sentence, never the operator: one log line says what is missing."""
    needs(cluster, "volcano")
    api = Api(cluster)
    op = WithoutNodes(cluster, [namespace]).start()
    try:
        with gpu_pool(cluster, api, namespace) as pool:
            pool.add(1, gpus=2)
            job = gpu_job(namespace, "blind", pool, workers=2, gpus=4)
            submit(cluster, job)
            message = "waiting for volcano to place 2 pods as one gang (8 nvidia.com/gpu, 200m cpu)"
            status = wait_until(lambda: (lambda st: st if (st.get("gang") or {}).get("message") == message
                                         and st.get("message") == message else None)(
                (api.tfjob(namespace, "blind") or {}).get("status") or {}), SENTENCE_SECONDS,
                f"the sentence without capacity: {message}", lambda: gang(api, namespace, "blind"))
            assert status["gang"]["reason"] not in ("InsufficientResources", "NoNodeFitsPod"), status
            assert warnings(api, namespace, "blind") == []
            pool.add(1, gpus=8)
            wait_all_running(api, job, timeout=60)
            assert op.process.poll() is None
            lines = [l for l in op.log_path.read_text().splitlines() if "cannot list nodes" in l]
            assert len(lines) == 1, lines
    finally:
        op.stop()


# -- Kueue: its webhooks see every TFJob of a cluster, so this runs on a cluster of its own -------------
@pytest.fixture(scope="module")
def kueue_cluster(tmp_path_factory):
    from e2e.pytest_plugin import own_cluster

    with own_cluster(tmp_path_factory.mktemp("e2e-pending-kueue"), ("default", "volcano", "kueue"), gpu_nodes=4) as c:
        yield c


@pytest.mark.builds("kueue")
def test_kueue_quota_holding_the_job(kueue_cluster):
    """Kueue admits "first" (3 of its ClusterQueue's 4 GPUs) and holds "second" (2 GPUs): tfop says
    which queue holds it and how much is left, in status.admission and the Message column, once."""
    from e2e.tests.kueue_helpers import create, delete_cluster_objects, gpu_job, queue_objects, wait_workload
    from e2e.tests.lifecycle_helpers import Env, operator

    ns = f"kueue-pending-{uuid.uuid4().hex[:5]}"
    kueue_cluster.kubectl("create", "namespace", ns)
    env = Env(kueue_cluster, ns)
    env.wait(f"default ServiceAccount in {ns}", lambda: kueue_cluster.kubectl(
        "get", "sa", "default", "-n", ns, check=False).returncode == 0, 30)
    env.op = operator(kueue_cluster, [ns], gang_scheduler_name="volcano")
    env.op.start()
    api = Api(kueue_cluster)
    try:
        env.apply(*queue_objects(ns, gpus=4))
        create(env, gpu_job("first", ns, workers=3))
        wait_workload(env, "first", "QuotaReserved")
        create(env, gpu_job("second", ns, workers=2))
        sentence = f"queue {ns} (ClusterQueue {ns}) holds the job: it needs 2 nvidia.com/gpu, 1 is left in its quota"

        def held():
            status = (api.tfjob(ns, "second") or {}).get("status") or {}
            admission = status.get("admission") or {}
            return status if (admission.get("reason"), admission.get("message"), status.get("message")) == (
                "QueueQuotaExceeded", sentence, sentence) else None
        status = wait_until(held, SENTENCE_SECONDS, f"TFJob second: {sentence}",
                            lambda: ((api.tfjob(ns, "second") or {}).get("status") or {}).get("admission"))
        assert "insufficient unused quota for nvidia.com/gpu" in status["admission"]["schedulerMessage"], status
        assert (status["admission"]["queue"], status["admission"]["clusterQueue"]) == (ns, ns)
        assert wide_message(kueue_cluster, ns, "second") == sentence
        time.sleep(6)
        assert warnings(api, ns, "second") == [("QueueQuotaExceeded", sentence, 1)]
        assert "admission" not in ((api.tfjob(ns, "first") or {}).get("status") or {})
    finally:
        delete_cluster_objects(env, ns)
        env.op.stop()
        kueue_cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
