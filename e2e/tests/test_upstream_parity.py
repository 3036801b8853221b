"""Where users of training-operator v1.9 meet tfop's differences, on the real control plane.

- enableDynamicWorker: the sparse TF_CONFIG byte for byte as upstream writes it; a worker that
  exits 137 is restarted (ExitCode), one that exits 1 fails the job, and a Never worker's failure
  is left alone while the job runs on (upstream v1.9's rules).
- A succeeded pod deleted later (garbage collection of completed pods, eviction, a user) is not
  created again, also when it was deleted while the operator was down (upstream bug #1186):
  the memory is in the job's status (`status.succeededIndexes`), not in the process. The
  apiserver's audit log shows there was no create at all, not just none that a poll saw.
- `runPolicy.managedBy`: a job another controller manages (Kueue's MultiKueue) gets no pod,
  service, group, status or Event from tfop; upstream's own value, or none, runs.
"""
from __future__ import annotations

import json

import pytest

from e2e.tests import gang_helpers
from e2e.tests.lifecycle_helpers import Env, active, condition, is_true, names, phase, pod_names, replica, tfjob
from e2e.harness.tfop_operator import OPERATOR_ACCOUNT, OPERATOR_NAMESPACE

pytestmark = pytest.mark.cluster

WRITES = {"create", "update", "patch", "delete", "deletecollection"}


def tf_config(pod: dict) -> str | None:
    for container in pod["spec"]["containers"]:
        if container["name"] == "tensorflow":
            return next((e["value"] for e in container.get("env") or [] if e["name"] == "TF_CONFIG"), None)
    return None


def worker_counts(job: dict) -> tuple[int, int, int]:
    got = ((job.get("status") or {}).get("replicaStatuses") or {}).get("Worker") or {}
    return got.get("active", 0), got.get("succeeded", 0), got.get("failed", 0)


def writes_by(entries: list[dict], account: str, namespace: str) -> list[tuple[str, str, str]]:
    """(verb, resource[/subresource], name) of every write the operator's ServiceAccount made in `namespace`."""
    user = f"system:serviceaccount:{OPERATOR_NAMESPACE}:{account}"
    out = []
    for e in entries:
        ref = e.get("objectRef") or {}
        if (e.get("user") or {}).get("username") != user or e.get("verb") not in WRITES:
            continue
        if ref.get("namespace") != namespace:
            continue
        resource = ref.get("resource", "") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        out.append((e["verb"], resource, ref.get("name") or ""))
    return out


def of_job(writes: list[tuple[str, str, str]], job: str) -> list[tuple[str, str, str]]:
    """The writes about one job: the TFJob itself, its children (job-type-index) and its Events (job.hash)."""
    return [w for w in writes if w[2] == job or w[2].startswith(f"{job}-") or w[2].startswith(f"{job}.")]


def test_dynamic_worker_as_upstream(env: Env):
    ns = env.ns
    env.apply(tfjob("dyn", {"PS": replica(1), "Worker": replica(2, restart_policy="ExitCode")},
                    enableDynamicWorker=True),
              tfjob("dyn-never", {"PS": replica(1), "Worker": replica(2, restart_policy="Never")},
                    enableDynamicWorker=True))
    pods = {p["metadata"]["name"]: p for p in env.wait_pods_running("dyn", pod_names("dyn", PS=1, Worker=2))}
    # upstream v1.9's sparse form: Go's field order (worker, ps), no "environment"
    assert tf_config(pods["dyn-worker-1"]) == (
        f'{{"cluster":{{"worker":{{"1":"dyn-worker-1.{ns}.svc:2222"}},"ps":["dyn-ps-0.{ns}.svc:2222"]}},'
        f'"task":{{"type":"worker","index":1}}}}'), env.msg("dyn")
    assert tf_config(pods["dyn-ps-0"]) == (
        f'{{"cluster":{{"worker":{{}},"ps":["dyn-ps-0.{ns}.svc:2222"]}},"task":{{"type":"ps","index":0}}}}')
    env.wait_condition("dyn", "Running")

    # a retryable code (a signal: 137 is an OOM kill) restarts the worker, as its ExitCode policy says
    first = pods["dyn-worker-1"]["metadata"]["uid"]
    env.mark_exit("dyn-worker-1", 137)
    env.wait("dyn-worker-1 created again and Running", lambda: (lambda p: p is not None and phase(p) == "Running"
             and p["metadata"]["uid"] != first and not p["metadata"].get("deletionTimestamp"))(env.pod("dyn-worker-1")),
             job="dyn")
    assert ("Warning", "TFJobRestarting") in [(e["type"], e["reason"]) for e in env.events("dyn")], env.msg("dyn")
    env.wait_condition("dyn", "Running")

    # any other code under ExitCode fails the job, enableDynamicWorker or not
    env.mark_exit("dyn-worker-1", 1)
    job = env.wait_condition("dyn", "Failed")
    assert "dyn-worker-1 exited with code 1" in condition(job, "Failed")["message"], env.msg("dyn")

    # Never: the failed worker is left as it is and the job runs on
    never = {p["metadata"]["name"]: p for p in
             env.wait_pods_running("dyn-never", pod_names("dyn-never", PS=1, Worker=2))}
    env.mark_exit("dyn-never-worker-1", 1)
    job = env.wait_job("dyn-never", lambda j: worker_counts(j) == (1, 0, 1), "worker-1 counted failed")
    assert is_true(job, "Running") and not is_true(job, "Failed"), env.msg("dyn-never")
    pod = env.pod("dyn-never-worker-1")
    assert pod["metadata"]["uid"] == never["dyn-never-worker-1"]["metadata"]["uid"] and phase(pod) == "Failed"


def test_deleted_succeeded_pod_is_not_created_again(env: Env):
    """Workers 1 and 2 succeed while worker 0 runs; worker-1's pod is deleted under a running operator,
    worker-2's while it is down. Neither comes back; worker 0 then ends the job, all three succeeded."""
    name = "gcd"
    env.apply(tfjob(name, {"Worker": replica(3)}))
    env.wait_pods_running(name, pod_names(name, Worker=3))
    env.wait_condition(name, "Running")
    env.mark_exit(f"{name}-worker-1", 0)
    env.mark_exit(f"{name}-worker-2", 0)
    env.wait_job(name, lambda j: j["status"].get("succeededIndexes") == {"Worker": "1-2"}
                 and worker_counts(j) == (1, 2, 0), "workers 1 and 2 remembered as succeeded")
    offset = env.cluster.audit_offset()

    env.kubectl("delete", "pod", f"{name}-worker-1", "--wait=true")
    env.op.kill()  # the memory must be in the job's status, not in the process
    env.kubectl("delete", "pod", f"{name}-worker-2", "--wait=true")
    env.op.start()
    # A spec change makes the restarted operator write observedGeneration: a pass over the job, with
    # both pods gone, has certainly run.
    env.patch_job(name, {"spec": {"runPolicy": {"ttlSecondsAfterFinished": 600}}})
    generation = env.job(name)["metadata"]["generation"]
    job = env.wait_job(name, lambda j: j["status"].get("observedGeneration") == generation, "observedGeneration")
    assert names(active(env.pods(name))) == {f"{name}-worker-0"}, env.msg(name)
    assert worker_counts(job) == (1, 2, 0) and is_true(job, "Running"), env.msg(name)

    env.mark_exit(f"{name}-worker-0", 0)
    job = env.wait_condition(name, "Succeeded")
    assert worker_counts(job) == (0, 3, 0), env.msg(name)
    assert job["status"]["succeededIndexes"] == {"Worker": "0-2"}, env.msg(name)
    created = [w for w in writes_by(env.cluster.audit_entries(offset), OPERATOR_ACCOUNT, env.ns)
               if w[:2] == ("create", "pods")]
    assert created == [], (created, env.msg(name))


MULTIKUEUE = "kueue.x-k8s.io/multikueue"


def test_managed_by_another_controller_is_left_alone(cluster, namespace):
    gang = "volcano" if "volcano" in cluster.state.get("schedulers", []) else None
    offset = cluster.audit_offset()
    with gang_helpers.operator(cluster, namespace, gang) as op:
        env = Env(cluster, namespace, op)
        env.apply(tfjob("mk", {"Worker": replica(2)}, run_policy={"managedBy": MULTIKUEUE}),
                  tfjob("own", {"Worker": replica(2)}, run_policy={"managedBy": "kubeflow.org/training-operator"}),
                  tfjob("plain", {"Worker": replica(2)}))
        for name in ("own", "plain"):
            env.wait_pods_running(name, pod_names(name, Worker=2), timeout=90)
            env.wait_condition(name, "Running")
        # An update of "mk", then a spec change of "own" the operator answers: its informer delivers
        # them in that order, so it has seen mk's update once own's observedGeneration is written.
        env.patch_job("mk", {"metadata": {"labels": {"poked": "true"}}})
        env.patch_job("own", {"spec": {"runPolicy": {"ttlSecondsAfterFinished": 600}}})
        generation = env.job("own")["metadata"]["generation"]
        env.wait_job("own", lambda j: j["status"].get("observedGeneration") == generation, "observedGeneration")

        mk = env.job("mk")
        assert not mk.get("status"), json.dumps(mk.get("status"))
        assert env.pods("mk") == [] and env.services("mk") == []
        writes = writes_by(cluster.audit_entries(offset), op.account, namespace)
        assert of_job(writes, "mk") == [], of_job(writes, "mk")
        # the others were run: their pods were created by this very operator
        for name in ("own", "plain"):
            assert ("create", "pods", f"{name}-worker-0") in of_job(writes, name), of_job(writes, name)
        if gang:
            groups = [w for w in writes if w[:2] == ("create", "podgroups")]
            assert sorted(w[2] for w in groups) == ["own", "plain"], groups
