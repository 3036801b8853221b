"""Kueue's MultiKueue across harness clusters: a manager (Kueue; no nodes, no scheduler) queues
TFJobs and dispatches each to a worker (a cluster with its own Kueue, tfop and nodes) that has
room, as Kueue's documentation sets it up:

- on each worker, a ServiceAccount the manager acts as, allowed what MultiKueue does there (create
  and watch TFJobs and Workloads, read their status);
- on the manager, a Secret with that worker's kubeconfig (inline CA and a static token: Kueue
  v0.15 refuses a CA file, a token file or an exec plugin), a MultiKueueCluster naming it, one
  MultiKueueConfig listing the workers, and the AdmissionCheck a ClusterQueue names to dispatch.
"""
from __future__ import annotations

import base64
import json

import yaml

from e2e.harness.kueue import KUEUE_API, KUEUE_NAMESPACE

CONTROLLER = "kueue.x-k8s.io/multikueue"  # the AdmissionCheck controller, and the managedBy it defaults
WORKER_IDENTITY = "multikueue"  # the ServiceAccount (and ClusterRole) on each worker
ORIGIN_LABEL = "kueue.x-k8s.io/multikueue-origin"  # on a worker's copy: which manager made it
PREBUILT_WORKLOAD_LABEL = "kueue.x-k8s.io/prebuilt-workload-name"
_WORKER_RULES = [
    {"apiGroups": ["kubeflow.org"], "resources": ["tfjobs"],
     "verbs": ["create", "delete", "get", "list", "watch", "update", "patch"]},
    {"apiGroups": ["kubeflow.org"], "resources": ["tfjobs/status"], "verbs": ["get"]},
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"],
     "verbs": ["create", "delete", "get", "list", "watch", "update", "patch"]},
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads/status"], "verbs": ["get", "update", "patch"]},
]


def worker_kubeconfig(worker) -> str:
    """The kubeconfig the manager reaches `worker` with: its ServiceAccount WORKER_IDENTITY's
    token and the worker's CA, both inline."""
    identity = {"name": WORKER_IDENTITY}
    worker.apply([
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {**identity, "namespace": KUEUE_NAMESPACE}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": identity,
         "rules": _WORKER_RULES},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": identity,
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": WORKER_IDENTITY},
         "subjects": [{"kind": "ServiceAccount", "name": WORKER_IDENTITY, "namespace": KUEUE_NAMESPACE}]},
    ])
    token = worker.kubectl("create", "token", WORKER_IDENTITY, "-n", KUEUE_NAMESPACE, "--duration=24h").stdout.strip()
    ca = base64.b64encode((worker.pki / "ca.crt").read_bytes()).decode()
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "worker", "cluster": {"server": worker.server, "certificate-authority-data": ca}}],
        "users": [{"name": WORKER_IDENTITY, "user": {"token": token}}],
        "contexts": [{"name": "worker", "context": {"cluster": "worker", "user": WORKER_IDENTITY}}],
        "current-context": "worker",
    })


def connect(manager, workers: dict, check: str = "multikueue") -> None:
    """Make `workers` (name -> Cluster) the manager's MultiKueue workers, behind AdmissionCheck
    `check` (and a MultiKueueConfig of that name)."""
    objects: list[dict] = []
    for name, worker in workers.items():
        secret = f"{name}-kubeconfig"
        objects += [
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": secret, "namespace": KUEUE_NAMESPACE},
             "stringData": {"kubeconfig": worker_kubeconfig(worker)}},
            {"apiVersion": KUEUE_API, "kind": "MultiKueueCluster", "metadata": {"name": name},
             "spec": {"kubeConfig": {"locationType": "Secret", "location": secret}}}]
    objects += [
        {"apiVersion": KUEUE_API, "kind": "MultiKueueConfig", "metadata": {"name": check},
         "spec": {"clusters": list(workers)}},
        {"apiVersion": KUEUE_API, "kind": "AdmissionCheck", "metadata": {"name": check},
         "spec": {"controllerName": CONTROLLER,
                  "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": check}}}]
    manager.apply(objects)


def active(manager, kind: str, name: str) -> bool:
    """Whether a MultiKueueCluster or AdmissionCheck of the manager says Active=True."""
    p = manager.kubectl("get", kind, name, "-o", "json", check=False)
    if p.returncode != 0:
        return False
    conditions = (json.loads(p.stdout).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Active" and c.get("status") == "True" for c in conditions)


def wait_connected(manager, workers, check: str = "multikueue", timeout: float = 60) -> None:
    """Until the manager's Kueue reaches every worker and the AdmissionCheck is active."""
    for name in workers:
        manager.wait(f"MultiKueueCluster {name} Active", lambda n=name: active(manager, "multikueuecluster", n),
                     timeout, "kueue")
    manager.wait(f"AdmissionCheck {check} Active", lambda: active(manager, "admissioncheck", check), timeout, "kueue")
