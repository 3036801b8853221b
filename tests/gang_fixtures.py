"""Small TFJob models for the gang tests, built directly (no normalize step)."""
from __future__ import annotations

from tfop.api.model import ReplicaSpec, RunPolicy, SchedulingPolicy, TFJob

UID = "0b5c3f2e-1d4a-4c8e-9f00-123456789abc"


def container(limits=None, requests=None, name="tensorflow", **extra):
    resources = {}
    if limits:
        resources["limits"] = limits
    if requests:
        resources["requests"] = requests
    return {"name": name, "image": "tf:latest", "resources": resources, **extra}


def template(*containers, labels=None, annotations=None, **spec):
    meta = {}
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    return {"metadata": meta, "spec": {"containers": list(containers), **spec}}


def replica(rtype, replicas, tmpl, restart_policy="OnFailure"):
    return ReplicaSpec(type=rtype, replicas=replicas, restart_policy=restart_policy, template=tmpl)


def job(*replicas, name="tf-job", namespace="ml", uid=UID, annotations=None, **policy):
    return TFJob(name=name, namespace=namespace, uid=uid, api_version="kubeflow.org/v1",
                 replicas=tuple(replicas), annotations=annotations or {},
                 run_policy=RunPolicy(scheduling=SchedulingPolicy(**policy)))


def seed003(**policy):
    """ACK's example: 1 PS with cpu 1, 4 workers with 2 GPUs each (limits only)."""
    return job(
        replica("PS", 1, template(container(limits={"cpu": "1"}))),
        replica("Worker", 4, template(container(limits={"nvidia.com/gpu": 2}))),
        name="tf-smoke-gpu", **policy)


def seed000(**policy):
    """kube-arbitrator's example (v1alpha2): 1 GPU worker, 1 CPU PS."""
    return job(
        replica("Worker", 1, template(container(limits={"nvidia.com/gpu": 1}),
                                      schedulerName="kube-batchd")),
        replica("PS", 1, template(container(limits={"cpu": "1"}), schedulerName="kube-batchd")),
        name="tfjob-gang-scheduling", namespace="default", **policy)


def crd_file(pattern: str):
    """A scheduler's own CRD from the Go module cache (the e2e build fetches it), or None."""
    import glob
    import os
    root = os.environ.get("GOMODCACHE") or os.path.expanduser("~/go/pkg/mod")
    found = sorted(glob.glob(os.path.join(root, pattern)))
    return found[-1] if found else None
