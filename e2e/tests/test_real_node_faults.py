"""The real node's faults, with real TensorFlow: a kubelet restarted, a process the kernel's OOM killer
ends, the node lost for good in the middle of a gang and back, and the seeds' TF 1 shape surviving a
worker's kill.

Every job here is the seeds' shape: PS and Worker replicas and no Chief, trained by TF 1 between-graph
replication (e2e/workloads/train_between_graph.py: tf.compat.v1 replica_device_setter and a
MonitoredTrainingSession whose chief, worker 0, checkpoints to a hostPath that outlives the pods).
The operator runs as in test_real_training.py: the ServiceAccount and ClusterRole of `tfop
manifests`, one per test. The faults are real: the kubelet process stopped and started
(Cluster.stop_kubelet, start_kubelet), a container over its memory limit, a process SIGKILLed through
containerd. A lost node takes kube-controller-manager's --node-monitor-grace-period (50 s) to be
marked Unknown: that test alone takes about two minutes.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from e2e.harness import realnode
from e2e.pytest_plugin import REAL_CLUSTER_IMAGES
from e2e.tests.lifecycle_helpers import Env, condition, phase
from e2e.tests.realnode_helpers import (TRAIN_SECONDS, describe_pods, finished, logs, progress, running,
                                        sigkill_process, wait_finished)
from e2e.tests.test_real_training import assert_succeeded, start_operator
from e2e.harness.training import CHECKPOINT_MOUNT, checkpoint_volume, tfjob, workload_configmap
from e2e.harness.training import replica as image_replica

pytestmark = [pytest.mark.cluster, pytest.mark.realnode,
              pytest.mark.images(*REAL_CLUSTER_IMAGES)]
SCRIPT = "train_between_graph.py"
TARGET_LOSS = "0.05"
NODE_LOSS_NOTICE_SECONDS = 60  # the job says it lost the node within a minute of the node's Unknown
NODE_MONITOR_GRACE_SECONDS = 50  # kube-controller-manager's default: the real-node cluster's
# A run resumed from a checkpoint trains this many global steps more: the first run of a fault's job
# is long (--steps), so it is still training when the fault comes, and the resumed one ends soon.
RESUMED_STEPS = "30"
UNTIL_FAULT = ["--steps", "100000", "--resumed-steps", RESUMED_STEPS, "--target-loss", TARGET_LOSS,
               "--step-delay", "0.1", "--checkpoint-dir", CHECKPOINT_MOUNT, "--checkpoint-every", "10"]


@pytest.fixture
def env(real_cluster, real_namespace):
    real_cluster.apply(workload_configmap(real_namespace))
    yield Env(real_cluster, real_namespace)


@pytest.fixture
def kubelet_back(real_cluster):
    """However a test ends, the real node's kubelet runs again for the tests after it."""
    yield
    if not real_cluster.alive_components().get("kubelet"):
        real_cluster.start_kubelet()


def between_graph(env: Env, n: int, args: list[str], restart_policy: str = "ExitCode", **template) -> dict:
    return image_replica(env.cluster.node_image("tf"), n, args, restart_policy, script=SCRIPT, **template)


def seeds_shape(env: Env, job: str, workers: int, args: list[str], restart_policy: str = "ExitCode",
                **worker_template) -> dict:
    """PS 1 and Worker `workers`, no Chief, the checkpoints on a hostPath of the job's own; cleanPodPolicy
    Running: the PS, serving until stopped, goes once worker 0 has succeeded."""
    volume = checkpoint_volume(env.ns, job)
    return tfjob(job, {"PS": between_graph(env, 1, args, restart_policy, checkpoints=volume),
                       "Worker": between_graph(env, workers, args, restart_policy, checkpoints=volume,
                                               **worker_template)},
                 run_policy={"cleanPodPolicy": "Running"})


def status(job: dict | None) -> dict:
    return (job or {}).get("status") or {}


def events(env: Env, job: str, reason: str) -> list[dict]:
    return [e for e in env.events(job) if e["reason"] == reason]


def uid(pod: dict | None) -> str | None:
    return (pod or {}).get("metadata", {}).get("uid")


def container(pod: dict) -> dict:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    assert statuses, f"{pod['metadata']['name']} has no container status: {pod.get('status')}"
    return statuses[0]


def node_ready_status(env: Env, name: str) -> str | None:
    node = json.loads(env.cluster.kubectl("get", "node", name, "-o", "json").stdout)
    return next((c["status"] for c in node["status"].get("conditions", []) if c["type"] == "Ready"), None)


def resumed(env: Env, pod: str, after: int = 1):
    """The pod's run resumed from a checkpoint at a global step >= after, and trained on from there."""
    run = progress(env, pod)
    assert run.restored_from is not None and run.restored_from >= after, f"{pod}: {run}\n{logs(env, pod)[-2000:]}"
    assert run.first_step is not None and run.first_step > run.restored_from, run
    assert run.done and run.final_loss <= float(TARGET_LOSS), run
    return run


def test_kubelet_restarted_under_a_training_job_leaves_its_pods_running(env, kubelet_back):
    """The kubelet stops and starts again while a gang trains: the same containers keep running (no
    container restart, no new pod), the job Succeeds, and nothing is counted: restartCount 0, no
    disruption, no GangRestart."""
    op = start_operator(env, "volcano")
    args = ["--steps", "300", "--target-loss", TARGET_LOSS, "--step-delay", "0.1"]
    try:
        env.apply(seeds_shape(env, "steady", 1, args))
        env.wait("2 pods Running", lambda: running(env, "steady", 2), TRAIN_SECONDS, job="steady")
        env.wait("training under way", lambda: progress(env, "steady-worker-0").first_step_time, TRAIN_SECONDS,
                 job="steady")
        before = {p["metadata"]["name"]: (uid(p), container(p)["containerID"]) for p in env.pods("steady")}
        env.cluster.stop_kubelet()
        env.cluster.start_kubelet()
        kubelet_back_at = time.time()
        job = env.job("steady")
        assert not finished(job), f"the job ended before the kubelet was back: lengthen its --steps\n{status(job)}"
        job = assert_succeeded(env, "steady")
        worker = env.pod("steady-worker-0")
        assert (uid(worker), container(worker)["containerID"]) == before["steady-worker-0"], \
            f"worker 0 is another pod or container after the kubelet's restart: {before}\n" \
            f"{describe_pods(env, 'steady')}"
        assert container(worker)["restartCount"] == 0, container(worker)
        run = progress(env, "steady-worker-0")
        assert run.runs == 1 and run.done and run.done_time > kubelet_back_at, \
            f"one run, training on after the kubelet came back at {kubelet_back_at:.3f}: {run}"
        assert not status(job).get("restartCount"), status(job)
        assert not status(job).get("disruptionCount"), status(job)
        assert not events(env, "steady", "GangRestart"), events(env, "steady", "GangRestart")
        assert not condition(job, "Restarting"), status(job)
    finally:
        op.stop()


def test_a_worker_the_oom_killer_ends_fails_the_job_naming_its_memory_limit(env):
    """Worker 0 fills a tensor past its container's 600Mi memory limit: the kernel's OOM killer ends it,
    the kubelet reports OOMKilled with exit code 137, and under restartPolicy Never the job fails
    with a message that names OOMKilled and the memory limit to raise."""
    op = start_operator(env)
    limit = "600Mi"
    try:
        env.apply(seeds_shape(env, "oom", 1, ["--steps", "20", "--fill-memory-mb", "1024"], "Never",
                              requests={"cpu": "100m", "memory": limit}, limits={"memory": limit}))
        job = wait_finished(env, "oom")
        worker = env.pod("oom-worker-0")
        terminated = container(worker).get("state", {}).get("terminated") or {}
        assert (terminated.get("reason"), terminated.get("exitCode")) == ("OOMKilled", 137), \
            f"not the kernel's OOM kill:\n{describe_pods(env, 'oom')}"
        assert any(line.startswith("tfop-train fill-memory") for line in logs(env, "oom-worker-0").splitlines()), \
            f"the worker was killed before it began to fill its tensor:\n{logs(env, 'oom-worker-0')[-2000:]}"
        failed = condition(job, "Failed")
        assert failed and failed["status"] == "True", f"{status(job)}\n{env.context('oom')}"
        for words in ("oom-worker-0", "OOMKilled", "137", "memory", limit):
            assert words in failed["message"], f"{words!r} not in the Failed condition: {failed['message']!r}"
        assert not status(job).get("restartCount"), status(job)
    finally:
        op.stop()


def test_node_lost_for_good_mid_gang_is_said_then_the_gang_resumes_when_it_is_back(env, kubelet_back):
    """The real node's kubelet stops for good while a gang trains: once Kubernetes marks the node
    Unknown, the job says within a minute that it lost the node (status.nodeLoss, a NodeLost
    Warning); when the kubelet starts again the gang runs again, resumes from its last checkpoint
    (a global step past 0) and Succeeds. A node loss is a disruption, not a restart against
    backoffLimit."""
    op = start_operator(env, "volcano")
    node = realnode.NODE_NAME
    try:
        env.apply(seeds_shape(env, "lost", 1, UNTIL_FAULT))
        env.wait("2 pods Running", lambda: running(env, "lost", 2), TRAIN_SECONDS, job="lost")
        env.wait("worker 0 past its first checkpoint after step 0",
                 lambda: (progress(env, "lost-worker-0").last_checkpoint or 0) >= 10, TRAIN_SECONDS, job="lost")
        old_pods = {p["metadata"]["name"]: uid(p) for p in env.pods("lost")}
        env.cluster.stop_kubelet()
        # Not wait_node_lost: the real node is its cluster's only node, so the node lifecycle controller
        # enters full disruption once it is Unknown and adds no NoExecute taint.
        env.wait(f"node {node} Ready Unknown (its kubelet stopped posting status)",
                 lambda: node_ready_status(env, node) == "Unknown", NODE_MONITOR_GRACE_SECONDS + 30, job="lost")
        job = env.wait_job("lost", lambda j: (status(j).get("nodeLoss") or {}).get("node") == node,
                           f"status.nodeLoss.node {node}", NODE_LOSS_NOTICE_SECONDS)
        loss = status(job)["nodeLoss"]
        assert set(loss.get("pods") or []) & set(old_pods), loss
        lost_events = env.wait("a NodeLost Warning Event naming the node",
                               lambda: [e for e in events(env, "lost", "NodeLost")
                                        if e["type"] == "Warning" and node in e["message"]],
                               NODE_LOSS_NOTICE_SECONDS, job="lost")
        assert len(lost_events) == 1 and lost_events[0].get("count", 1) == 1, lost_events
        env.cluster.start_kubelet()
        env.wait("the gang's pods created again and Running",
                 lambda: (pods := running(env, "lost", 2)) and not {uid(p) for p in pods} & set(old_pods.values()),
                 TRAIN_SECONDS, job="lost")
        job = assert_succeeded(env, "lost")
        resumed(env, "lost-worker-0", after=10)
        assert not status(job).get("restartCount"), env.context("lost")
        assert status(job).get("disruptionCount") == 1, env.context("lost")
    finally:
        op.stop()


def test_seeds_tf1_shape_survives_a_killed_worker_by_resuming_from_its_checkpoint(env):
    """PS 1 and Worker 2, no Chief, as a Volcano gang: worker 1's process SIGKILLed mid-run exits 137,
    tfop restarts the whole gang once, and worker 0 (TensorFlow's chief) resumes from its checkpoint
    and the job Succeeds. graph.pbtxt, which the chief writes at every start, is in the checkpoint
    directory (protobuf 7 broke that write under TensorFlow 2.20)."""
    op = start_operator(env, "volcano")
    try:
        env.apply(seeds_shape(env, "seeds", 2, UNTIL_FAULT))
        env.wait("3 pods Running", lambda: running(env, "seeds", 3), TRAIN_SECONDS, job="seeds")
        env.wait("worker 0 past its second checkpoint after step 0",
                 lambda: (progress(env, "seeds-worker-0").last_checkpoint or 0) >= 20, TRAIN_SECONDS, job="seeds")
        sigkill_process(env.pod("seeds-worker-1"))
        env.wait_job("seeds", lambda j: status(j).get("restartCount") == 1, "restartCount 1", 60)
        job = assert_succeeded(env, "seeds")
        assert status(job)["restartCount"] == 1, status(job)
        resumed(env, "seeds-worker-0", after=20)
        restarts = events(env, "seeds", "GangRestart")
        assert len(restarts) == 1 and "seeds-worker-1 exited with code 137" in restarts[0]["message"], restarts
        graph = Path(checkpoint_volume(env.ns, "seeds")["hostPath"]["path"]) / "graph.pbtxt"
        assert graph.is_file() and "global_step" in graph.read_text(), f"no graph.pbtxt with the model at {graph}"
        assert phase(env.pod("seeds-worker-0")) == "Succeeded"
    finally:
        op.stop()
