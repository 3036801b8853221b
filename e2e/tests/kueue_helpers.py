"""Helpers for the Kueue scenarios (e2e/tests/test_kueue.py) on a cluster running Kueue's manager.

Kueue's objects are cluster-scoped (ResourceFlavor, ClusterQueue, WorkloadPriorityClass) or live
in the test's namespace (LocalQueue, Workload). Each test names its cluster-scoped objects after
its namespace and deletes them afterwards. A TFJob's Workload is found by its owner reference.
"""
from __future__ import annotations

import json
import time
from typing import Any

import yaml

from e2e.harness.kueue import KUEUE_API
from e2e.harness.kwok import GPU_RESOURCE
from e2e.tests.lifecycle_helpers import Env, replica, tfjob

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"


def queue_objects(ns: str, gpus: int, *, preempt: bool = False, hold: bool = False,
                  checks: tuple[str, ...] = ()) -> list[dict]:
    """A ResourceFlavor, a ClusterQueue of `gpus` GPUs (CPU and memory: more than any test asks)
    for this namespace only, with these AdmissionChecks, and the namespace's LocalQueue `ns` on it."""
    spec: dict[str, Any] = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
        "resourceGroups": [{
            "coveredResources": ["cpu", "memory", GPU_RESOURCE],
            "flavors": [{"name": ns, "resources": [
                {"name": "cpu", "nominalQuota": "100"},
                {"name": "memory", "nominalQuota": "100Gi"},
                {"name": GPU_RESOURCE, "nominalQuota": gpus}]}]}],
    }
    if preempt:
        spec["preemption"] = {"withinClusterQueue": "LowerPriority"}
    if hold:  # admits nothing until set back to None
        spec["stopPolicy"] = "Hold"
    if checks:
        spec["admissionChecks"] = list(checks)
    return [
        {"apiVersion": KUEUE_API, "kind": "ResourceFlavor", "metadata": {"name": ns}},
        {"apiVersion": KUEUE_API, "kind": "ClusterQueue", "metadata": {"name": ns}, "spec": spec},
        {"apiVersion": KUEUE_API, "kind": "LocalQueue", "metadata": {"name": ns, "namespace": ns},
         "spec": {"clusterQueue": ns}},
    ]


def priority_class(name: str, value: int) -> dict:
    return {"apiVersion": KUEUE_API, "kind": "WorkloadPriorityClass", "metadata": {"name": name},
            "value": value, "description": "tfop e2e"}


def delete_cluster_objects(env: Env, ns: str, priority_classes: tuple[str, ...] = ()) -> None:
    """The test's jobs and pods first (a ClusterQueue with admitted Workloads keeps its finalizer),
    then its cluster-scoped Kueue objects."""
    env.kubectl("delete", "tfjobs", "--all", "--wait=true", "--timeout=60s", check=False)
    env.kubectl("delete", "pods", "--all", "--wait=true", "--timeout=60s", check=False)
    for kind, name in [("clusterqueue", ns), ("resourceflavor", ns),
                       *[("workloadpriorityclass", p) for p in priority_classes]]:
        env.kubectl("delete", kind, name, "--wait=false", check=False, namespaced=False)


def gpu_job(name: str, queue: str, workers: int, *, priority: str | None = None) -> dict:
    """A TFJob of `workers` workers of 1 GPU each, in LocalQueue `queue`. Its pods run until the
    test makes them exit (Env.mark_exit)."""
    worker = replica(workers)
    container = worker["template"]["spec"]["containers"][0]
    container["resources"]["requests"][GPU_RESOURCE] = 1
    container["resources"]["limits"] = {GPU_RESOURCE: 1}
    job = tfjob(name, {"Worker": worker})
    job["metadata"]["labels"] = {QUEUE_LABEL: queue, **({PRIORITY_LABEL: priority} if priority else {})}
    return job


def create(env: Env, job: dict) -> dict:
    """Create the job; returns the object as stored, i.e. after the admission webhooks."""
    return json.loads(env.kubectl("create", "-o", "json", "-f", "-", input=yaml.safe_dump(job)).stdout)


def suspended(job: dict | None) -> bool:
    return bool(((job or {}).get("spec") or {}).get("runPolicy", {}).get("suspend"))


def workload(env: Env, job: str) -> dict | None:
    """The Workload Kueue made for TFJob `job` (its controller owner reference names the job)."""
    owner = env.job(job)
    if owner is None:
        return None
    uid = owner["metadata"]["uid"]
    for w in env.json("get", "workloads.kueue.x-k8s.io")["items"]:
        if any(r.get("uid") == uid for r in w["metadata"].get("ownerReferences") or []):
            return w
    return None


def wl_condition(w: dict | None, ctype: str) -> dict | None:
    for c in ((w or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return c
    return None


def wl_true(w: dict | None, ctype: str) -> bool:
    c = wl_condition(w, ctype)
    return bool(c) and c.get("status") == "True"


def wait_workload(env: Env, job: str, ctype: str, timeout: float = 60) -> dict:
    def check():
        w = workload(env, job)
        return w if wl_true(w, ctype) else None
    return env.wait(f"Workload of {job}: {ctype}=True", check, timeout, job=job)


def active_counts(job: dict | None) -> dict[str, int]:
    """replicaStatuses[*].active: what Kueue reads to know a job still has pods."""
    statuses = ((job or {}).get("status") or {}).get("replicaStatuses") or {}
    return {rtype: int(s.get("active") or 0) for rtype, s in statuses.items()}


def live_pods(env: Env, job: str) -> list[dict]:
    return [p for p in env.pods(job) if not p["metadata"].get("deletionTimestamp")]


def finish_pods(env: Env, job: str, expected: set[str]) -> None:
    """Every pod of `job` (all Running) exits 0; waits for the job's Succeeded condition."""
    pods = env.wait_pods_running(job, expected, timeout=60)
    for p in pods:
        env.mark_exit(p["metadata"]["name"], 0)
    env.wait_condition(job, "Succeeded", timeout=60)


def hold_window(env: Env, job: str, seconds: float, group=None) -> int:
    """For `seconds`: the job stays suspended with no pod (and no gang group, when `group` reads
    it). Returns how many samples were taken."""
    deadline, samples = time.monotonic() + seconds, 0
    while time.monotonic() < deadline:
        j = env.job(job)
        pods = live_pods(env, job)
        assert suspended(j), f"{job} unsuspended while it should wait: {env.context(job)}"
        assert not pods, f"{job} has pods while suspended: {[p['metadata']['name'] for p in pods]}"
        if group is not None:
            assert group() is None, f"{job} has a gang group while suspended: {group()}"
        samples += 1
        time.sleep(0.2)
    return samples
