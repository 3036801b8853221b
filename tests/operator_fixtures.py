"""The installed operator as the API returns it (plain dicts): its Deployment, pods and Lease."""
from __future__ import annotations

import datetime as dt

SELECTOR = {"app.kubernetes.io/name": "tfop"}


def deployment(replicas=2, args=("run", "--leader-elect"), ready=None, updated=None, generation=1,
               observed=1, memory_limit="512Mi", namespace="kubeflow"):
    ready = replicas if ready is None else ready
    return {"metadata": {"name": "tfop", "namespace": namespace, "generation": generation},
            "spec": {"replicas": replicas, "selector": {"matchLabels": SELECTOR},
                     "template": {"spec": {"containers": [
                         {"name": "tfop", "args": list(args),
                          "resources": {"limits": {"memory": memory_limit}}}]}}},
            "status": {"observedGeneration": observed, "readyReplicas": ready,
                       "updatedReplicas": replicas if updated is None else updated}}


def pod(name, ready=True, waiting=None, oom_restarts=0, unschedulable=None, deleting=False):
    """waiting: (reason, message) of the container; unschedulable: the PodScheduled=False message."""
    status = {"containerStatuses": [{"name": "tfop", "restartCount": oom_restarts, "state": {}}],
              "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
              "phase": "Running" if ready else "Pending"}
    if waiting:
        status["containerStatuses"][0]["state"] = {"waiting": {"reason": waiting[0], "message": waiting[1]}}
    if oom_restarts:
        status["containerStatuses"][0]["lastState"] = {"terminated": {"reason": "OOMKilled", "exitCode": 137}}
    if unschedulable:
        status["conditions"].append({"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                     "message": unschedulable})
    meta = {"name": name, "namespace": "kubeflow", "labels": dict(SELECTOR)}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T12:00:00Z"
    return {"metadata": meta, "status": status}


def lease(holder, renewed: dt.datetime, duration=15, name="tfop", namespace="kubeflow"):
    return {"metadata": {"name": name, "namespace": namespace},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": duration,
                     "renewTime": renewed.isoformat()}}
