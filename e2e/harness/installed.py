"""The operator as users install it, in a real-node cluster: an image-swapping kustomize overlay, its
pods and their readiness, the Lease they elect a leader with, removing the install again, and the
container's process as this machine sees it. Shared by e2e/tests/test_in_cluster.py and
e2e.bench.operator_figures.
"""
from __future__ import annotations

import json
import os
import time
from datetime import datetime
from pathlib import Path

import yaml

from e2e.harness import realnode

REPO = Path(__file__).resolve().parents[2]
NAMESPACE = "kubeflow"  # the manifests' namespace
DEPLOYMENT = "tfop"
LEASE = "tfop"
SELECTOR = "app.kubernetes.io/name=tfop"
READY_SECONDS = 180  # two pods: an image already on the node, Python start-up, caches synced


def kustomize_overlay(directory: Path, base: Path, ref: str) -> Path:
    """An overlay of `base` that only swaps the image, as a user pins a release's image."""
    name, _, tag = ref.rpartition(":")
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(base, directory)],
        "images": [{"name": "tfop", "newName": name, "newTag": tag}]}))
    return directory


def remove_install(cluster, rendered: list[dict]) -> None:
    """Everything an install made but the CRD (the cluster's other tests keep their TFJobs), and the
    Lease its replicas took."""
    kept = [o for o in rendered if o["kind"] != "CustomResourceDefinition"]
    cluster.kubectl("delete", "--ignore-not-found", "--wait=true", "--timeout=120s", "-f", "-",
                    input=json.dumps({"apiVersion": "v1", "kind": "List", "items": kept}), timeout=150)
    cluster.kubectl("delete", "lease", LEASE, "-n", NAMESPACE, "--ignore-not-found", check=False)


def operator_pods(cluster) -> list[dict]:
    out = cluster.kubectl("get", "pods", "-n", NAMESPACE, "-l", SELECTOR, "-o", "json")
    return [p for p in json.loads(out.stdout)["items"] if not p["metadata"].get("deletionTimestamp")]


def ready(pod: dict) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def wait_ready_pods(cluster, count: int, timeout: float = READY_SECONDS) -> list[dict]:
    deadline = time.monotonic() + timeout
    pods: list[dict] = []
    while time.monotonic() < deadline:
        pods = operator_pods(cluster)
        if len(pods) == count and all(ready(p) for p in pods):
            return pods
        time.sleep(1)
    logs = [cluster.kubectl("logs", "-n", NAMESPACE, p["metadata"]["name"], "--tail", "30", check=False).stdout
            for p in pods]
    raise AssertionError(f"not {count} operator pods Ready in {timeout:.0f}s: "
                         f"{[(p['metadata']['name'], (p.get('status') or {}).get('phase')) for p in pods]}\n"
                         + "\n".join(logs))


def leader_identity(cluster) -> str:
    out = cluster.kubectl("get", "lease", LEASE, "-n", NAMESPACE, "-o", "json", check=False)
    return json.loads(out.stdout)["spec"].get("holderIdentity", "") if out.returncode == 0 else ""


def holder_pod(identity: str) -> str:
    """tfop's identity is `<hostname>_<random>`; a pod's hostname is its name."""
    return identity.rpartition("_")[0]


def wait_leader(cluster, names: set[str], timeout: float = 60) -> str:
    """The pod holding the Lease, once one of `names` does."""
    deadline = time.monotonic() + timeout
    while holder_pod(leader_identity(cluster)) not in names and time.monotonic() < deadline:
        time.sleep(1)
    leader = holder_pod(leader_identity(cluster))
    assert leader in names, f"Lease {NAMESPACE}/{LEASE} held by {leader_identity(cluster)!r}, pods {names}"
    return leader


def host_pid(pod: dict) -> int:
    """The container's main process as this machine sees it (containerd's task)."""
    cid = realnode.container_id(pod)
    for line in realnode.ctr(realnode.PATHS, "tasks", "list").stdout.splitlines()[1:]:
        task, pid, *_ = line.split()
        if task == cid:
            return int(pid)
    raise AssertionError(f"no task {cid} in containerd")


def memory_mb(pod: dict, field: str = "VmRSS") -> float:
    """The container's main process's memory (/proc status: VmRSS now, VmHWM its peak) in MiB."""
    status = Path(f"/proc/{host_pid(pod)}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith(field + ":"))) / 1024


def time_of(stamp: str) -> float:
    """An API timestamp as seconds since the epoch."""
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
