"""Nodes fail (issue 55): a gang member on a lost node, a pod stuck terminating there, and pods the
cluster disrupted, on kwok nodes made lost as a dead machine is (Cluster.lose_node: nothing renews
their Lease any more, nothing completes their pods' deletions).

The module runs on a cluster of its own (default and scheduler-plugins, about 15 s to start) whose
kube-controller-manager marks a silent node Ready Unknown after GRACE_SECONDS instead of 50 s: three
nodes are lost here, one at a time, each loss restarts kwok, and the session cluster keeps the
default other tests see. The disruption tests need no lost node but run here too, the cluster being
up anyway. Gangs run on scheduler-plugins. Every test has its own namespace, kwok nodes
(gang_helpers.pool) and operator (the exact role of `tfop manifests`), and gives the node it lost
back to kwok before it ends, so its pods' pending deletions complete and at most one node is lost at
a time: with three or more of a small cluster's nodes down (and 55 % of them), the node lifecycle
controller stops tainting them NoExecute.
"""
from __future__ import annotations

import contextlib
import time
from datetime import datetime, timezone

import pytest

from e2e.harness.kwok import GPU_RESOURCE
from e2e.harness.nodes import OUT_OF_SERVICE_TAINT, UNREACHABLE_TAINT
from e2e.pytest_plugin import own_cluster
from e2e.harness.tfop_operator import OPERATOR_NAMESPACE
from e2e.tests.gang_helpers import (
    Api,
    condition,
    expected_pods,
    gpu_pool,
    new_namespace,
    operator,
    submit,
    wait_all_running,
    wait_until,
)

pytestmark = pytest.mark.cluster
GRACE_SECONDS = 20  # kube-controller-manager's --node-monitor-grace-period here; kwok renews every 10 s
GANG = "scheduler-plugins"
REACTS_SECONDS = 15  # "within seconds": from the node seen Unknown to what tfop does about it
STUCK_WINDOW = 10  # how long the safe default is watched not force-deleting the stuck pod
PODGC_SECONDS = 60  # PodGC looks every 20 s; the out-of-service taint must release the pod by then
FORCE_AFTER = 5  # --force-delete-lost-pods-after of the opt-in test
EVICT_AFTER = 5  # the gang-off pods' tolerationSeconds for the unreachable taint (default 300)


@pytest.fixture(scope="module")
def fault_cluster(tmp_path_factory):
    with own_cluster(tmp_path_factory.mktemp("e2e-node-faults"), ("default", "coscheduling"),
                     gpu_nodes=0, node_monitor_grace_period=GRACE_SECONDS) as c:
        yield c


@pytest.fixture(scope="module")
def api(fault_cluster) -> Api:
    return Api(fault_cluster)


@pytest.fixture
def ns(fault_cluster, request) -> str:
    return new_namespace(fault_cluster, request.node.name)  # gpu_pool deletes it


def gpu_job(ns: str, name: str, p, workers: int, restart_policy: str, backoff_limit: int | None = None,
            grace_seconds: int | None = None) -> dict:
    """Workers of one GPU each on the pool's one-GPU nodes: one member a node."""
    job = {
        "apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": name, "namespace": ns},
        "spec": {"tfReplicaSpecs": {"Worker": {
            "replicas": workers, "restartPolicy": restart_policy,
            "template": {"spec": {"containers": [{
                "name": "tensorflow", "image": "tfop.test/trainer:1",
                "resources": {"limits": {GPU_RESOURCE: 1}}}]}}}}},
    }
    if backoff_limit is not None:
        job["spec"]["runPolicy"] = {"backoffLimit": backoff_limit}
    if grace_seconds is not None:
        job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["terminationGracePeriodSeconds"] = grace_seconds
    return p.place(job)


def parse_time(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def ready_since(node: dict) -> datetime:
    return parse_time(next(c for c in node["status"]["conditions"] if c["type"] == "Ready")["lastTransitionTime"])


def pods_of(api: Api, ns: str, name: str) -> dict[str, dict]:
    return {p["metadata"]["name"]: p for p in api.pods(ns, name)}


def status_of(api: Api, ns: str, name: str) -> dict:
    return (api.tfjob(ns, name) or {}).get("status") or {}


def pod_line(pod: dict) -> str:
    deleting = " Terminating" if pod["metadata"].get("deletionTimestamp") else ""
    return (f"{pod['metadata']['uid'][:8]} {pod['status'].get('phase')}{deleting}"
            f"@{pod['spec'].get('nodeName')}")


def describe(api: Api, ns: str, name: str):
    """What a failed wait shows: the pods (uid, phase, node) and the job's status."""
    def seen() -> dict:
        return {"pods": {n: pod_line(p) for n, p in pods_of(api, ns, name).items()},
                "status": status_of(api, ns, name)}
    return seen


def events(api: Api, ns: str, reason: str, name: str) -> list[dict]:
    return [e for e in api.events(ns, reason) if e["involvedObject"].get("name") == name]


def restart_count(status: dict) -> int:
    return int(status.get("restartCount") or 0)


@contextlib.contextmanager
def lost(cluster, node: str):
    """`node` lost for the block (Cluster.lose_node), then given back to kwok, Ready again, so the
    pods still terminating there complete and the pool can go."""
    cluster.lose_node(node)
    try:
        yield
    finally:
        cluster.kubectl("taint", "nodes", node, f"{OUT_OF_SERVICE_TAINT}-", check=False)
        cluster.recover_node(node)


def wait_lost(cluster, node: str) -> datetime:
    """Wait until the node is Ready Unknown and tainted unreachable; returns when it went Unknown."""
    got = cluster.wait_node_lost(node)
    assert any(t["key"] == UNREACHABLE_TAINT for t in got["spec"]["taints"]), got["spec"]
    return ready_since(got)


def survivors_gone(api: Api, ns: str, name: str, uids: dict[str, str]):
    """No pod of these names with the uid it had (deleted, and its deletion completed)."""
    def gone() -> bool:
        now = pods_of(api, ns, name)
        return all(n not in now or now[n]["metadata"]["uid"] != uid for n, uid in uids.items())
    return gone


def deletes_by(cluster, since: int, account: str, ns: str, pod: str) -> list[dict]:
    """The DELETE requests of pod ns/pod by tfop's ServiceAccount `account` in the audit log since a
    byte offset (PodGC's are kube-system's, which the audit policy leaves out)."""
    user = f"system:serviceaccount:{OPERATOR_NAMESPACE}:{account}"
    return [e for e in cluster.audit_entries(since)
            if e.get("verb") == "delete" and (e.get("user") or {}).get("username") == user
            and (e.get("objectRef") or {}).get("resource") == "pods"
            and (e.get("objectRef") or {}).get("namespace") == ns and (e.get("objectRef") or {}).get("name") == pod]


def running_elsewhere(api: Api, job: dict, lost_node: str, old_uids: dict[str, str]) -> dict[str, str]:
    """Every pod Running again, new, and none on the lost node."""
    ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
    seen = wait_all_running(api, job, timeout=60)
    pods = pods_of(api, ns, name)
    assert all(pods[n]["metadata"]["uid"] != old_uids[n] for n in old_uids), describe(api, ns, name)()
    assert all(not v.endswith(f"@{lost_node}") for v in seen.values()), seen
    return seen


# ------------------------------------------------------------------ gang on: a member's node lost


def test_gang_member_on_lost_node_restarts_gang_and_waits_for_out_of_service(fault_cluster, api, ns):
    """The survivors go within seconds of the node's loss (their GPUs back), one NodeLost Event, a
    disruption not a restart; the member on the dead node stays Terminating (never force-deleted by
    default) and the job says how to end the wait; the out-of-service taint lets PodGC release it,
    and the gang runs again elsewhere and succeeds. The node then recovers."""
    cluster = fault_cluster
    with gpu_pool(cluster, api, ns) as p, operator(cluster, ns, GANG) as op:
        p.add(4, gpus=1)
        job = gpu_job(ns, "lost-node", p, workers=3, restart_policy="ExitCode")
        name = job["metadata"]["name"]
        submit(cluster, job)
        wait_all_running(api, job)
        before = pods_of(api, ns, name)
        uids = {n: pod["metadata"]["uid"] for n, pod in before.items()}
        victim = f"{name}-worker-1"
        node = before[victim]["spec"]["nodeName"]
        seen = describe(api, ns, name)

        audit_from = cluster.audit_offset()
        with lost(cluster, node):
            lost_at = wait_lost(cluster, node)
            survivors = {n: uid for n, uid in uids.items() if n != victim}
            wait_until(survivors_gone(api, ns, name, survivors), REACTS_SECONDS,
                       f"the survivors {sorted(survivors)} deleted once {node} is lost", seen)
            took = (datetime.now(timezone.utc) - lost_at).total_seconds()
            print(f"survivors gone {took:.1f}s after {node}'s Ready condition went Unknown")
            assert took < REACTS_SECONDS + 1, f"the survivors went {took:.1f}s after the node's loss"  # stamps: whole s

            def restarting() -> dict | None:
                status = status_of(api, ns, name)
                cond = condition({"status": status}, "Restarting")
                return status if cond and cond.get("reason") == "NodeLost" and \
                    (status.get("nodeLoss") or {}).get("node") == node else None
            status = wait_until(restarting, REACTS_SECONDS, f"Restarting NodeLost and status.nodeLoss.node {node}",
                                seen)
            assert status.get("disruptionCount") == 1, status
            assert restart_count(status) == 0, status
            assert victim in status["nodeLoss"].get("pods", []), status["nodeLoss"]
            node_lost = events(api, ns, "NodeLost", name)
            assert len(node_lost) == 1, node_lost
            assert node_lost[0]["type"] == "Warning" and node in node_lost[0]["message"] \
                and victim in node_lost[0]["message"], node_lost[0]

            # The member on the dead node: deleted with the gang, its deletion never completed.
            def says_how_to_end_the_wait() -> str | None:
                message = status_of(api, ns, name).get("message") or ""
                return message if all(w in message for w in (victim, node, "out-of-service", "--force")) else None
            message = wait_until(says_how_to_end_the_wait, REACTS_SECONDS,
                                 "status.message naming the stuck pod, its node, out-of-service and --force", seen)
            print(f"while it waits: {message}")
            stuck_until = time.monotonic() + STUCK_WINDOW
            while time.monotonic() < stuck_until:  # the safe default: tfop never force-deletes it
                pod = pods_of(api, ns, name).get(victim)
                assert pod and pod["metadata"]["uid"] == uids[victim] and pod["metadata"].get("deletionTimestamp"), \
                    f"{victim} should stay Terminating on {node}: {seen()}"
                time.sleep(1)
            assert not condition(api.tfjob(ns, name), "Failed"), seen()

            # The admin says the node is down: PodGC force-deletes the pod, the gang starts again.
            cluster.kubectl("taint", "nodes", node, f"{OUT_OF_SERVICE_TAINT}=nodeshutdown:NoExecute")
            t_taint = time.monotonic()
            wait_until(survivors_gone(api, ns, name, {victim: uids[victim]}), PODGC_SECONDS,
                       f"PodGC releasing {victim} once {node} is out of service", seen)
            print(f"{victim} released {time.monotonic() - t_taint:.1f}s after the out-of-service taint")
            # tfop deleted it once, with the gang (gracefully: it stayed); PodGC did the rest.
            assert len(deletes_by(cluster, audit_from, op.account, ns, victim)) == 1, \
                deletes_by(cluster, audit_from, op.account, ns, victim)
            running_elsewhere(api, job, node, uids)
            wait_until(lambda: not status_of(api, ns, name).get("nodeLoss"), REACTS_SECONDS,
                       "status.nodeLoss gone once no pod is on a lost node", seen)
            for pod in expected_pods(job):
                api.exit_pod(ns, pod, 0)
            wait_until(lambda: condition(api.tfjob(ns, name), "Succeeded"), 30, "job Succeeded", seen)
            status = status_of(api, ns, name)
            assert status.get("disruptionCount") == 1 and restart_count(status) == 0, status
            assert len(events(api, ns, "NodeLost", name)) == 1
        # lost() gave the node back: Ready, untainted (Cluster.recover_node waited for it)


# ------------------------------------------------------------------ the opt-in force delete


def test_force_delete_lost_pods_after_opt_in(fault_cluster, api, ns):
    """With --force-delete-lost-pods-after, tfop itself force-deletes the member stuck on the lost
    node after that long, says so in a ForceDeleted Event, and the gang runs again elsewhere."""
    cluster = fault_cluster
    with gpu_pool(cluster, api, ns) as p, \
            operator(cluster, ns, GANG, ["--force-delete-lost-pods-after", str(FORCE_AFTER)]) as op:
        p.add(3, gpus=1)
        # The wait is measured from the later of the node's loss and the pod's deletionTimestamp, which
        # is the end of its grace period (30 s by default): 1 s keeps the test short.
        job = gpu_job(ns, "force-delete", p, workers=2, restart_policy="ExitCode", grace_seconds=1)
        name = job["metadata"]["name"]
        submit(cluster, job)
        wait_all_running(api, job)
        uids = {n: pod["metadata"]["uid"] for n, pod in pods_of(api, ns, name).items()}
        victim = f"{name}-worker-1"
        node = pods_of(api, ns, name)[victim]["spec"]["nodeName"]
        seen = describe(api, ns, name)

        audit_from = cluster.audit_offset()
        with lost(cluster, node):
            lost_at = wait_lost(cluster, node)

            def deleted_at() -> datetime | None:
                pod = pods_of(api, ns, name).get(victim) or {}
                stamp = pod.get("metadata", {}).get("deletionTimestamp")
                return parse_time(stamp) if stamp and pod["metadata"]["uid"] == uids[victim] else None
            deletion = wait_until(deleted_at, REACTS_SECONDS, f"{victim} deleted with its gang", seen)
            wait_until(survivors_gone(api, ns, name, {victim: uids[victim]}), FORCE_AFTER + 30,
                       f"tfop force-deleting {victim} about {FORCE_AFTER}s after {node} was lost", seen)
            waited = (datetime.now(timezone.utc) - max(lost_at, deletion)).total_seconds()
            print(f"{victim} force-deleted {waited:.1f}s after the later of its node's loss and its deletionTimestamp")
            # Both stamps are whole seconds, rounded down.
            assert waited >= FORCE_AFTER - 1, f"force-deleted after {waited:.1f}s, sooner than {FORCE_AFTER}s"
            # tfop's two deletes: with the gang, then the force-delete (nothing else releases it here).
            assert len(deletes_by(cluster, audit_from, op.account, ns, victim)) == 2, \
                deletes_by(cluster, audit_from, op.account, ns, victim)
            forced = events(api, ns, "ForceDeleted", name)
            assert forced and forced[0]["type"] == "Warning", forced
            assert victim in forced[0]["message"] and node in forced[0]["message"], forced[0]
            running_elsewhere(api, job, node, uids)
            status = status_of(api, ns, name)
            assert status.get("disruptionCount") == 1 and restart_count(status) == 0, status


# ------------------------------------------------------------------ gang off: left to Kubernetes


def test_gang_off_pod_on_lost_node_is_left_to_the_taint_manager(fault_cluster, api, ns):
    """Without gangs tfop reads no nodes and deletes nothing early: the pod on the lost node runs on
    until the taint manager evicts it after its tolerationSeconds (here 5 s, as a user shortens the
    default 300 s); then status.nodeLoss names the node and the pod, and once the pod is released
    (the node back) it is created again, counted as a disruption."""
    cluster = fault_cluster
    with gpu_pool(cluster, api, ns) as p, operator(cluster, ns, None) as op:
        p.add(2, gpus=1)
        job = gpu_job(ns, "gang-off", p, workers=2, restart_policy="ExitCode")
        job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["tolerations"].append(
            {"key": UNREACHABLE_TAINT, "operator": "Exists", "effect": "NoExecute",
             "tolerationSeconds": EVICT_AFTER})
        name = job["metadata"]["name"]
        submit(cluster, job)
        wait_all_running(api, job)
        uids = {n: pod["metadata"]["uid"] for n, pod in pods_of(api, ns, name).items()}
        victim, other = f"{name}-worker-1", f"{name}-worker-0"
        node = pods_of(api, ns, name)[victim]["spec"]["nodeName"]
        seen = describe(api, ns, name)
        audit_from = cluster.audit_offset()

        with lost(cluster, node):
            lost_at = wait_lost(cluster, node)

            def evicted() -> bool:
                pod = pods_of(api, ns, name).get(victim) or {"metadata": {}, "status": {}}
                return bool(pod["metadata"].get("deletionTimestamp")) and any(
                    c["type"] == "DisruptionTarget" and c.get("reason") == "DeletionByTaintManager"
                    for c in pod["status"].get("conditions") or [])
            wait_until(evicted, EVICT_AFTER + 20, f"the taint manager evicting {victim}", seen)
            print(f"{victim} evicted {(datetime.now(timezone.utc) - lost_at).total_seconds():.1f}s after {node} "
                  "went Unknown")

            def said() -> dict | None:
                loss = status_of(api, ns, name).get("nodeLoss") or {}
                return loss if loss.get("node") == node else None
            loss = wait_until(said, REACTS_SECONDS, f"status.nodeLoss naming {node}", seen)
            assert victim in loss.get("message", "") and node in loss.get("message", ""), loss
            for pod in (victim, other):  # the taint manager deleted it, not tfop
                assert not deletes_by(cluster, audit_from, op.account, ns, pod), deletes_by(
                    cluster, audit_from, op.account, ns, pod)
            assert pods_of(api, ns, name)[other]["metadata"]["uid"] == uids[other], seen()

        def created_again() -> bool:  # lost() gave the node back: kwok completed the deletion
            pods = pods_of(api, ns, name)
            return victim in pods and pods[victim]["metadata"]["uid"] != uids[victim] and \
                all(pod["status"].get("phase") == "Running" for pod in pods.values())
        wait_until(created_again, 30, f"{victim} created again and Running once released", seen)
        assert pods_of(api, ns, name)[other]["metadata"]["uid"] == uids[other], seen()
        status = wait_until(lambda: (s := status_of(api, ns, name)).get("disruptionCount") == 1 and s,
                            REACTS_SECONDS, "status.disruptionCount 1", seen)
        assert restart_count(status) == 0 and not status.get("nodeLoss"), status


# ------------------------------------------------------------------ disruptions are not failures


@pytest.mark.parametrize("restart_policy,gang", [("Never", None), ("ExitCode", GANG)], ids=["Never-gang-off",
                                                                                            "ExitCode-gang-on"])
def test_evicted_pod_is_a_disruption_not_a_failure(fault_cluster, api, ns, restart_policy, gang):
    """A pod evicted through the Eviction API (DisruptionTarget EvictionByEvictionAPI) is retried
    under restartPolicy Never and ExitCode alike, and backoffLimit 0 does not fail the job: counted
    in status.disruptionCount, not restartCount, and the Event says it was a disruption."""
    cluster = fault_cluster
    with gpu_pool(cluster, api, ns) as p, operator(cluster, ns, gang):
        p.add(2, gpus=1)
        job = gpu_job(ns, "evicted", p, workers=2, restart_policy=restart_policy, backoff_limit=0)
        name = job["metadata"]["name"]
        submit(cluster, job)
        wait_all_running(api, job)
        uids = {n: pod["metadata"]["uid"] for n, pod in pods_of(api, ns, name).items()}
        victim = f"{name}-worker-1"
        seen = describe(api, ns, name)

        # Evicted before tfop has seen its pods run, a member is only created again (seen: worker-1 created
        # twice 0.45 s apart, no restart, no disruption): evict a running job, as a drain would.
        wait_until(lambda: status_of(api, ns, name).get("ready") == f"{len(uids)}/{len(uids)}", 20,
                   "tfop seeing every pod ready", seen)
        answer = api.create(f"/api/v1/namespaces/{ns}/pods/{victim}/eviction", {
            "apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": victim, "namespace": ns}})
        print(f"eviction of {victim}: {answer}")
        wait_until(survivors_gone(api, ns, name, {victim: uids[victim]}), 10,
                   f"{victim}'s eviction completed (kwok ends its deletion at once)", seen)
        again = {victim: uids[victim]} if gang is None else uids  # a gang restarts whole

        def retried_or_failed() -> str | None:
            if condition(api.tfjob(ns, name), "Failed"):
                return "failed"
            pods = pods_of(api, ns, name)
            new = all(n in pods and pods[n]["metadata"]["uid"] != uid for n, uid in again.items())
            running = len(pods) == len(uids) and all(
                pod["status"].get("phase") == "Running" and not pod["metadata"].get("deletionTimestamp")
                for pod in pods.values())
            return "retried" if new and running else None
        outcome = wait_until(retried_or_failed, 60, f"{sorted(again)} created again and Running after the eviction",
                             seen)
        assert outcome == "retried", f"the job failed on a disruption: {seen()}"
        status = wait_until(lambda: (s := status_of(api, ns, name)).get("disruptionCount") == 1 and s, 15,
                            "status.disruptionCount 1", seen)
        assert restart_count(status) == 0, status
        said = events(api, ns, "GangRestart" if gang else "Disrupted", name)
        assert said and said[0]["type"] == "Warning", api.events(ns)
        assert "disruption" in said[0]["message"] and "EvictionByEvictionAPI" in said[0]["message"], said[0]
        time.sleep(3)  # and the job stays unfailed once the pass after the retry has run
        assert not condition(api.tfjob(ns, name), "Failed"), seen()
