"""The capacity snapshot the runtime hands a waiting gang's pass (tfop/runtime/capacity.py): each node's
allocatable, and the requests of the pods bound to it, kept as pods come, change and go."""
import asyncio
from fractions import Fraction

import pytest

from tests import virtual_time
from tfop.gang.registry import load_backend
from tfop.kube.client import ApiError, KubeClient
from tfop.runtime import capacity
from tfop.runtime.capacity import ClusterRoom, wake_delay

GPU = "nvidia.com/gpu"


class Clock:
    now = 0.0

    def __call__(self):
        return self.now


def node(name, rv, gpus=4, ready="True", taints=(), unschedulable=False):
    return {"metadata": {"name": name, "resourceVersion": str(rv), "uid": name},
            "spec": {"taints": list(taints), "unschedulable": unschedulable},
            "status": {"allocatable": {"cpu": "32", GPU: str(gpus), "pods": "110"},
                       "conditions": [{"type": "Ready", "status": ready}]}}


def pod(name, rv, node_name, gpus=1, namespace="ns", init_cpu=None):
    spec = {"nodeName": node_name, "containers": [{"name": "c", "resources": {"limits": {GPU: str(gpus)},
                                                                              "requests": {"cpu": "500m"}}}]}
    if init_cpu:
        spec["initContainers"] = [{"name": "i", "resources": {"requests": {"cpu": init_cpu}}}]
    return {"metadata": {"name": name, "namespace": namespace, "resourceVersion": str(rv), "uid": name},
            "spec": spec, "status": {"phase": "Running"}}


def room(backend="volcano"):
    clock = Clock()
    r = ClusterRoom(KubeClient(None), load_backend(backend)[0], clock=clock)
    for informer in r.informers:
        informer.synced.set()
    return r, clock


def free(r, name):
    found = {n.name: n for n in r.snapshot().nodes}[name]
    return found.free(GPU), found.free("cpu")


def test_requests_follow_the_pods_bound_to_each_node():
    r, clock = room()
    r.nodes.upsert(node("a", 1))
    r.nodes.upsert(node("b", 2, taints=[{"key": "k", "effect": "NoSchedule"}, {"key": "p", "effect": "PreferNoSchedule"}]))
    r.pods.upsert(pod("p1", 3, "a", gpus=2))
    r.pods.upsert(pod("p2", 4, "a", gpus=1, init_cpu="4"))  # an init container's peak counts, as the scheduler's
    assert free(r, "a") == (Fraction(1), Fraction(32) - Fraction(1, 2) - 4)
    b = {n.name: n for n in r.snapshot().nodes}["b"]
    assert [t.key for t in b.taints] == ["k"] and b.ready and not b.unschedulable

    r.pods.upsert(pod("p3", 5, "a", gpus=1))
    clock.now += 1
    assert free(r, "a")[0] == 1, "a snapshot is rebuilt at most every SNAPSHOT_SECONDS"
    clock.now += 2
    assert free(r, "a")[0] == 0
    r.pods.remove(pod("p1", 6, "a"))  # finished (the field selector drops it) or deleted: room freed,
    r.pods.remove(pod("p3", 7, "a"))
    assert free(r, "a")[0] == 3  # which the waiting gangs woken for it read at once
    r.pods.upsert(pod("p2", 8, "a", gpus=4))  # its requests changed: counted once, anew
    clock.now += 2
    assert free(r, "a")[0] == 0
    assert r.requested == {"a": {GPU: 4000, "cpu": 500}} and len(r.counted) == 1  # in thousandths


def test_room_freed_wakes_the_waiting_gangs_and_says_when():
    woken = []
    r, _ = room()
    r.on_room_grew = lambda: woken.append(r.snapshot().grew_at)
    r.nodes.upsert(node("a", 1))
    assert len(woken) == 1 and woken[0] is not None  # a new node
    r.nodes.upsert(node("a", 2))  # a heartbeat: nothing it offers changed
    r.pods.upsert(pod("p1", 3, "a"))  # room taken
    assert len(woken) == 1
    r.nodes.upsert(node("a", 4, gpus=8))
    r.pods.remove(pod("p1", 5, "a"))
    assert len(woken) == 3 and woken[2] >= woken[1] >= woken[0]
    r.nodes.remove(node("a", 6))
    assert len(woken) == 3


@pytest.mark.parametrize("now, woken_at, delay", [
    (100.0, float("-inf"), capacity.WAKE_SECONDS),  # the first room freed: soon
    (100.0, 90.0, capacity.WAKE_SECONDS),  # long after the last wake: as soon
    (100.0, 100.0, capacity.WAKE_GAP_SECONDS),  # right after one: a gap's wait
    (100.0, 99.0, capacity.WAKE_GAP_SECONDS - 1.0),
    (100.0, 100.0 - capacity.WAKE_GAP_SECONDS + 0.1, capacity.WAKE_SECONDS),  # the gap all but over
])
def test_wake_delay(now, woken_at, delay):
    assert wake_delay(now, woken_at) == pytest.approx(delay)


def test_pods_ending_one_after_another_wake_the_gangs_once_per_gap(monkeypatch):
    """Bound pods ending one after another (a namespace deleted: 2000 pods over 80 s) wake the waiting
    gangs once per WAKE_GAP_SECONDS, the first time soon; not once per WAKE_SECONDS."""
    monkeypatch.setattr(capacity, "WAKE_SECONDS", 0.01)
    monkeypatch.setattr(capacity, "WAKE_GAP_SECONDS", 0.2)

    async def churn():
        loop = asyncio.get_running_loop()
        r = ClusterRoom(KubeClient(None), load_backend("volcano")[0], clock=loop.time)
        woken = []
        r.on_room_grew = lambda: woken.append(loop.time())
        r.nodes.upsert(node("a", 1, gpus=1000))
        await asyncio.sleep(0.25)  # the gap after that wake is over
        first = loop.time()
        for rv in range(2, 302, 2):  # a pod bound and gone every 5 ms, for 0.75 s
            r.pods.upsert(pod(f"p{rv}", rv, "a"))
            r.pods.remove(pod(f"p{rv}", rv + 1, "a"))
            await asyncio.sleep(0.005)
        last = loop.time()
        await asyncio.sleep(0.25)
        return first, last, woken[1:]  # after the node's own wake

    first, last, woken = virtual_time.run(churn())  # on a clock of its own: a busy machine delays no wake
    assert woken[0] - first < 0.1
    # about one wake per 0.2 s of churn (0.75 s on an idle machine, longer under load), not one per 0.01 s
    assert 3 <= len(woken) <= (last - first) / 0.2 + 2, woken
    assert all(b - a >= 0.19 for a, b in zip(woken, woken[1:]))


def test_unknown_until_listed_and_none_when_refused():
    r, _ = room()
    r.pods.synced.clear()
    assert r.snapshot() is None
    r.pods.synced.set()
    r.nodes.denied = ApiError(403, {"message": "nodes is forbidden"}, "GET", "/api/v1/nodes")
    assert r.snapshot() is None and r.for_status({}) == (None, {})


def test_queues_for_volcano_only_and_only_for_a_gang_that_may_wait():
    r, _ = room()
    r.queues.upsert({"metadata": {"name": "research", "resourceVersion": "1"}, "status": {"state": "Closed"}})
    assert r.queue_states() == {"research": "Closed"}
    assert r.for_status({"gang": {"backend": "volcano", "phase": "Running"}}) == (None, None)
    assert r.for_status({"gang": {"reason": "Unschedulable"}})[1] == {"research": "Closed"}
    other, _ = room("scheduler-plugins")
    assert other.queues is None and other.queue_states() is None



def room_counting_own_pods():
    """A room on node "a" fed by a pod cache like the controller's (tfop's own pods)."""
    from tfop.kube.informer import Cache
    from tfop.runtime.trim import trim_child

    r, clock = room()
    own = Cache("v1", "Pod", **r.counting_own_pods(trim_child))
    r.nodes.upsert(node("a", 1))
    return r, clock, own


def test_tfops_own_pods_are_counted_from_the_controllers_pod_informer():
    """The controller's pod informer (tfop's pods in its namespaces) counts them here: bound and not
    finished, with the same requests as the bound-pod watch; pods of one template share one dict."""
    r, clock, own = room_counting_own_pods()
    unbound = pod("w0", 2, None)
    own.upsert(unbound)
    assert free(r, "a") == (4, 32)
    own.upsert(pod("w0", 3, "a", gpus=2))
    own.upsert(pod("w1", 4, "a", gpus=2))
    clock.now += 10
    assert free(r, "a") == (0, 31)
    assert own.get("ns", "w0")["requests"] is own.get("ns", "w1")["requests"]
    done = pod("w0", 5, "a", gpus=2)
    done["status"]["phase"] = "Succeeded"
    own.upsert(done)
    clock.now += 10
    assert free(r, "a") == (2, Fraction(63, 2))
    own.remove(pod("w1", 6, "a", gpus=2))
    clock.now += 10
    assert free(r, "a") == (4, 32)


def test_a_counted_pods_status_changes_no_count_and_no_snapshot():
    """Most events of a running pod say only its status: its node's total stays, and so does the last
    snapshot, however old, until something that makes room changes."""
    r, clock, own = room_counting_own_pods()
    own.upsert(pod("w0", 2, "a", gpus=2))
    clock.now += 10
    before = r.snapshot()
    ready = pod("w0", 3, "a", gpus=2)
    ready["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    own.upsert(ready)
    clock.now += 10
    assert r.snapshot() is before and free(r, "a") == (2, Fraction(63, 2))
    own.upsert(pod("w0", 4, "a", gpus=3))  # resized in place: counted anew
    clock.now += 10
    assert r.snapshot() is not before and free(r, "a") == (1, Fraction(63, 2))


def test_a_namespaced_operator_watches_its_own_pods_elsewhere_but_not_twice():
    r = ClusterRoom(KubeClient(None), load_backend("volcano")[0], ["team-a", "team-b"])
    assert [(i.label_selector, i.field_selector) for i in r.bound_pods] == [
        ("training.kubeflow.org/operator-name!=tfjob-controller",
         "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"),
        ("training.kubeflow.org/operator-name=tfjob-controller",
         "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed,metadata.namespace!=team-a,"
         "metadata.namespace!=team-b")]
    everywhere = ClusterRoom(KubeClient(None), load_backend("volcano")[0])
    assert [i.label_selector for i in everywhere.bound_pods] == ["training.kubeflow.org/operator-name!=tfjob-controller"]
