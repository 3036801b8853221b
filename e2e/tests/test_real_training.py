"""TFJobs that really train TensorFlow, on a real kubelet, under tfop as deployed.

Every pod here is a runc container on the real node (e2e.harness.realnode) running e2e/workloads/train.py:
TF_CONFIG names the peers by their headless services, CoreDNS resolves them, the processes talk
gRPC over the node's bridge, exit codes and signals are the processes' own. Each test reads the
job's status and Events and the pods' logs (`kubectl logs`, through the kubelet's authenticated
API). The operator runs with the ServiceAccount and ClusterRole of `tfop manifests`.
"""
from __future__ import annotations

import calendar
import json
import time

import pytest

from e2e.harness.processes import free_port
from e2e.pytest_plugin import REAL_CLUSTER_IMAGES
from e2e.tests.lifecycle_helpers import Env, condition, is_true, operator, phase
from e2e.tests.test_metrics import scrape
from e2e.tests.realnode_helpers import (TRAIN_SECONDS, describe_pods, logs, progress, running, sigkill_process,
                                        wait_finished)
from e2e.harness.training import CHECKPOINT_MOUNT, checkpoint_volume, tfjob, workload_configmap
from e2e.harness.training import replica as image_replica

pytestmark = [pytest.mark.cluster, pytest.mark.realnode,
              pytest.mark.images(*REAL_CLUSTER_IMAGES)]
TARGET_LOSS = "0.05"
TRAIN = ["--steps", "60", "--target-loss", TARGET_LOSS]
GANG_SCHEDULER = {"volcano": "volcano", "scheduler-plugins": "scheduler-plugins-scheduler"}


@pytest.fixture
def env(real_cluster, real_namespace):
    real_cluster.apply(workload_configmap(real_namespace))
    yield Env(real_cluster, real_namespace)


def replica(cluster, n: int, args: list[str], restart_policy: str = "Never", **template) -> dict:
    return image_replica(cluster.node_image("tf"), n, args, restart_policy, **template)


def start_operator(env: Env, gang: str | None = None, metrics_port: int | None = None):
    extra = ["--metrics-bind-address", f"127.0.0.1:{metrics_port}"] if metrics_port else []
    op = operator(env.cluster, [env.ns], gang_scheduler_name=gang, extra_args=extra).start()
    env.op = op
    return op


def assert_succeeded(env: Env, name: str) -> dict:
    job = wait_finished(env, name)
    assert is_true(job, "Succeeded"), f"{name} did not succeed: {json.dumps(job.get('status'))}\n" \
                                      f"{describe_pods(env, name)}\n{env.context(name)}"
    return job


def trained(env: Env, pod: str):
    done = progress(env, pod)
    assert done.done and done.final_loss <= float(TARGET_LOSS), f"{pod}: {done}\n{logs(env, pod)[-2000:]}"
    assert done.first_step_time is not None, f"{pod} logged no first step:\n{logs(env, pod)[-2000:]}"
    return done


@pytest.mark.parametrize("gang", ["volcano", "scheduler-plugins"])
def test_parameter_server_job_trains_as_a_gang(env, gang):
    """Chief (the coordinator TF 2's ParameterServerStrategy needs), 1 PS and 2 workers, placed by
    the gang scheduler as one gang; the chief trains to the target loss with variables on the PS.
    cleanPodPolicy Running: the PS and worker servers, still running when the chief is done, go."""
    op = start_operator(env, gang)
    try:
        env.apply(tfjob("ps", {"Chief": replica(env.cluster, 1, TRAIN), "PS": replica(env.cluster, 1, TRAIN),
                               "Worker": replica(env.cluster, 2, TRAIN)}, run_policy={"cleanPodPolicy": "Running"}))
        pods = env.wait("4 pods Running", lambda: running(env, "ps", 4), TRAIN_SECONDS, job="ps")
        assert {p["spec"]["schedulerName"] for p in pods} == {GANG_SCHEDULER[gang]}
        assert_succeeded(env, "ps")
        done = trained(env, "ps-chief-0")
        assert done.strategy == "ParameterServerStrategy", done
        env.wait("PS and worker pods deleted (cleanPodPolicy Running)",
                 lambda: {p["metadata"]["name"] for p in env.pods("ps")} == {"ps-chief-0"}, 60, job="ps")
        assert phase(env.pod("ps-chief-0")) == "Succeeded"
    finally:
        op.stop()


@pytest.mark.parametrize("gang", ["volcano", "scheduler-plugins"])
def test_multi_worker_mirrored_job_trains_as_a_gang(env, gang):
    """Chief and 2 workers, MultiWorkerMirroredStrategy: every replica trains the same model in
    lock step (all-reduce over gRPC) and ends with the same loss; every pod Succeeded."""
    op = start_operator(env, gang)
    try:
        env.apply(tfjob("mw", {"Chief": replica(env.cluster, 1, TRAIN), "Worker": replica(env.cluster, 2, TRAIN)}))
        pods = env.wait("3 pods Running", lambda: running(env, "mw", 3), TRAIN_SECONDS, job="mw")
        assert {p["spec"]["schedulerName"] for p in pods} == {GANG_SCHEDULER[gang]}
        assert_succeeded(env, "mw")
        results = [trained(env, name) for name in ("mw-chief-0", "mw-worker-0", "mw-worker-1")]
        assert {r.strategy for r in results} == {"MultiWorkerMirroredStrategy"}
        assert len({r.final_loss for r in results}) == 1, results  # mirrored: the same weights everywhere
        env.wait("every pod Succeeded", lambda: {phase(p) for p in env.pods("mw")} == {"Succeeded"}, 30, job="mw")
    finally:
        op.stop()


def test_killed_worker_restarts_the_gang_which_resumes_from_its_checkpoint(env):
    """A worker's training process SIGKILLed mid-run exits 137 (the process's own status): tfop
    restarts the whole gang, once, and the new pods resume from the checkpoint on a volume that
    outlives them. The restart shows in status.restartCount, a GangRestart Event and the metrics."""
    port = free_port()
    op = start_operator(env, "volcano", metrics_port=port)
    steps = ["--steps", "400", "--target-loss", TARGET_LOSS, "--checkpoint-dir", CHECKPOINT_MOUNT,
             "--checkpoint-every", "20", "--step-delay", "0.05"]
    volume = checkpoint_volume(env.ns, "resume")
    try:
        env.apply(tfjob("resume", {
            "Chief": replica(env.cluster, 1, steps, "ExitCode", checkpoints=volume),
            "Worker": replica(env.cluster, 2, steps, "ExitCode", checkpoints=volume)}))
        env.wait("the chief past its second checkpoint",
                 lambda: (progress(env, "resume-chief-0").last_checkpoint or 0) >= 40, TRAIN_SECONDS, job="resume")
        victim = env.pod("resume-worker-1")
        sigkill_process(victim)
        job = env.wait_job("resume", lambda j: (j.get("status") or {}).get("restartCount") == 1,
                           "restartCount 1", 60)
        env.wait("the gang's pods created again", lambda: running(env, "resume", 3), TRAIN_SECONDS, job="resume")
        job = assert_succeeded(env, "resume")
        assert job["status"]["restartCount"] == 1
        resumed = trained(env, "resume-chief-0")
        assert resumed.restored_from and resumed.restored_from >= 20, resumed
        assert resumed.first_step == resumed.restored_from + 1, resumed  # on from the checkpoint, no step again
        restarts = [e for e in env.events("resume") if e["reason"] == "GangRestart"]
        assert len(restarts) == 1 and "resume-worker-1 exited with code 137" in restarts[0]["message"], restarts
        metrics = scrape(port)
        assert metrics.get(("tfop_gang_restarts_total", (("backend", "volcano"),))) == 1, metrics
    finally:
        op.stop()


def test_a_peer_created_seconds_after_the_others_is_waited_for(env):
    """A pod created 10 s after its peers (a ResourceQuota refuses it until raised): its name does
    not resolve and its port refuses until then, and no peer fails on that; the job trains."""
    op = start_operator(env)  # gang off: only then may a member be created apart from the rest
    env.apply({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "pods"},
               "spec": {"hard": {"pods": "2"}}})
    try:
        env.apply(tfjob("late", {"Chief": replica(env.cluster, 1, TRAIN), "Worker": replica(env.cluster, 2, TRAIN)}))
        env.wait("2 pods Running, the third refused", lambda: running(env, "late", 2), TRAIN_SECONDS, job="late")
        time.sleep(10)
        env.apply({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "pods"},
                   "spec": {"hard": {"pods": "10"}}})
        job = assert_succeeded(env, "late")
        created = sorted(pod_created(p) for p in env.pods("late"))
        assert created[-1] - created[0] >= 10, created
        assert not (job.get("status") or {}).get("restartCount"), job["status"]
        assert not condition(job, "Restarting"), job["status"]
        for name in ("late-chief-0", "late-worker-0", "late-worker-1"):
            trained(env, name)
    finally:
        op.stop()


@pytest.mark.parametrize("how", ["deleted", "suspended"])
def test_pods_of_a_stopped_job_go_within_their_grace_period(env, how):
    """SIGTERM reaches the training process (PID 1 in its container), which exits at once: every
    pod is gone well within terminationGracePeriodSeconds of the job being deleted or suspended."""
    grace = 15
    op = start_operator(env, "volcano")
    forever = ["--steps", "1000000", "--target-loss", TARGET_LOSS, "--step-delay", "0.05"]
    try:
        env.apply(tfjob("stop", {"Chief": replica(env.cluster, 1, forever, grace=grace),
                                 "Worker": replica(env.cluster, 2, forever, grace=grace)}))
        env.wait("3 pods Running", lambda: running(env, "stop", 3), TRAIN_SECONDS, job="stop")
        env.wait("training under way", lambda: progress(env, "stop-chief-0").first_step_time, TRAIN_SECONDS, "stop")
        t0 = time.monotonic()
        if how == "deleted":
            env.kubectl("delete", "tfjob", "stop", "--wait=false")
        else:
            env.patch_job("stop", {"spec": {"runPolicy": {"suspend": True}}})
        env.wait("every pod gone", lambda: not env.pods("stop"), grace, job=None if how == "deleted" else "stop")
        assert time.monotonic() - t0 < grace
        if how == "suspended":
            env.wait_condition("stop", "Suspended", 30)
    finally:
        op.stop()


def test_exit_code_policy_fails_the_job_with_the_code(env):
    """restartPolicy ExitCode: exit 1 is the program's own failure, not retried; the job fails and
    its condition names the pod and the code."""
    op = start_operator(env, "volcano")
    try:
        env.apply(tfjob("bad", {"Worker": replica(env.cluster, 2, ["--code", "1"], "ExitCode", script="exit.py")}))
        job = wait_finished(env, "bad")
        failed = condition(job, "Failed")
        assert failed and failed["status"] == "True", job["status"]
        assert "exited with code 1" in failed["message"], failed
        assert not (job.get("status") or {}).get("restartCount"), job["status"]
    finally:
        op.stop()


def test_gang_too_big_for_the_real_node_waits_then_starts_when_room_is_freed(env):
    """The node's real CPU (2 cores): a job holding 1500m leaves 500m, a gang of two 600m pods waits
    whole with the plain sentence, and starts once the holder is deleted."""
    op = start_operator(env, "volcano")
    hold = ["--steps", "1000000", "--target-loss", TARGET_LOSS, "--step-delay", "0.2"]
    try:
        env.apply(tfjob("holder", {"Worker": replica(env.cluster, 1, hold, grace=5,
                                                     requests={"cpu": "1500m", "memory": "400Mi"})}))
        env.wait("the holder Running", lambda: running(env, "holder", 1), TRAIN_SECONDS, job="holder")
        env.apply(tfjob("big", {"Chief": replica(env.cluster, 1, TRAIN, requests={"cpu": "600m", "memory": "400Mi"}),
                                "Worker": replica(env.cluster, 1, TRAIN, requests={"cpu": "600m", "memory": "400Mi"})}))
        sentence = "waiting for 1200m cpu for 2 pods as one gang; 500m are free on 1 node"
        env.wait_job("big", lambda j: (j.get("status") or {}).get("message", "").startswith(sentence),
                     sentence, 60)
        assert not [p for p in env.pods("big") if p["spec"].get("nodeName")], "a member was placed alone"
        env.kubectl("delete", "tfjob", "holder")
        assert_succeeded(env, "big")
        trained(env, "big-chief-0")
    finally:
        op.stop()


def pod_created(pod: dict) -> float:
    return calendar.timegm(time.strptime(pod["metadata"]["creationTimestamp"], "%Y-%m-%dT%H:%M:%SZ"))

