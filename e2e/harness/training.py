"""TFJobs that really train TensorFlow on the real node (e2e.harness.realnode), and what their logs say.

The scripts of e2e/workloads reach the pods by a ConfigMap mounted at /workload, so the TensorFlow
image (e2e.harness.images "tf") never changes with them. Checkpoints go to a hostPath under the real node's
root, which outlives the pods and goes with the node's teardown. `parse_progress` reads the
`tfop-train ...` lines the scripts print (their format: e2e/workloads/progress_log.py).
Used by the real-node tests, the demo and the benchmark.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from e2e.harness import realnode

WORKLOADS_DIR = Path(__file__).resolve().parents[1] / "workloads"
WORKLOAD_CONFIGMAP = "tfop-workloads"
WORKLOAD_MOUNT = "/workload"
CHECKPOINT_MOUNT = "/checkpoints"
# Two real CPUs for every pod of a job: each asks for little; TensorFlow uses few threads a pod.
POD_REQUESTS = {"cpu": "100m", "memory": "400Mi"}


def workload_configmap(namespace: str) -> dict:
    """Every script in one ConfigMap, no subPath: train.py imports its neighbours from /workload."""
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": WORKLOAD_CONFIGMAP, "namespace": namespace},
            "data": {p.name: p.read_text() for p in sorted(WORKLOADS_DIR.glob("*.py"))}}


def checkpoint_volume(namespace: str, job: str) -> dict:
    """A hostPath on the real node, one per job: it outlives every pod of the job."""
    path = realnode.PATHS.root / "volumes" / namespace / job
    return {"name": "checkpoints", "hostPath": {"path": str(path), "type": "DirectoryOrCreate"}}


def pod_template(image: str, args: list[str], *, script: str = "train.py", grace: int = 10,
                 checkpoints: dict | None = None, requests: dict | None = None,
                 limits: dict | None = None) -> dict:
    resources = {"requests": dict(requests or POD_REQUESTS), **({"limits": dict(limits)} if limits else {})}
    container: dict[str, Any] = {
        "name": "tensorflow", "image": image,
        "command": ["python3", f"{WORKLOAD_MOUNT}/{script}", *args],
        "ports": [{"name": "tfjob-port", "containerPort": 2222}],
        "resources": resources,
        "volumeMounts": [{"name": "workload", "mountPath": WORKLOAD_MOUNT, "readOnly": True}],
    }
    volumes = [{"name": "workload", "configMap": {"name": WORKLOAD_CONFIGMAP}}]
    if checkpoints:
        container["volumeMounts"].append({"name": "checkpoints", "mountPath": CHECKPOINT_MOUNT})
        volumes.append(checkpoints)
    return {"spec": {"containers": [container], "volumes": volumes,
                     "terminationGracePeriodSeconds": grace, **realnode.placement()}}


def replica(image: str, n: int, args: list[str], restart_policy: str = "Never", **template: Any) -> dict:
    return {"replicas": n, "restartPolicy": restart_policy, "template": pod_template(image, args, **template)}


def tfjob(name: str, replicas: dict[str, dict], run_policy: dict | None = None) -> dict:
    spec: dict[str, Any] = {"tfReplicaSpecs": replicas}
    if run_policy:
        spec["runPolicy"] = run_policy
    return {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": name}, "spec": spec}


# ---------- what a training pod's log says ----------
_LINE = re.compile(r"(?:^|\s)tfop-train (.*)$")


@dataclass
class Progress:
    """One training process as its log tells it (the last run when the log holds several)."""

    runs: int = 0                          # start lines seen
    task: str | None = None                # e.g. "worker:1", "chief:0", "local"
    strategy: str | None = None            # local, MultiWorkerMirroredStrategy or ParameterServerStrategy
    duty: str | None = None                # train, coordinate, serve or idle
    started_time: float | None = None      # the start line (TensorFlow imported)
    restored_from: int | None = None       # the checkpoint's step it resumed from
    first_step_time: float | None = None
    first_step: int | None = None
    steps: int = 0                         # the last step seen
    last_loss: float | None = None         # the last step line's loss
    losses: dict[int, float] = field(default_factory=dict)
    checkpoints: list[int] = field(default_factory=list)
    done: bool = False
    final_loss: float | None = None        # the done line's (evaluation) loss
    done_time: float | None = None
    serving: bool = False                  # a PS job's ps or worker task is up
    terminated: bool = False               # it left on SIGTERM
    errors: list[str] = field(default_factory=list)

    @property
    def last_checkpoint(self) -> int | None:
        """The step of the chief's latest save, None before its first."""
        return self.checkpoints[-1] if self.checkpoints else None


def _fields(words: list[str]) -> dict[str, str]:
    return dict(word.split("=", 1) for word in words if "=" in word)


def parse_progress(log_text: str) -> Progress:
    """Reads the `tfop-train` lines of a container's log (other lines, and a `kubectl logs
    --timestamps` prefix, are skipped); a new start line begins a new run."""
    progress = Progress()
    for line in log_text.splitlines():
        match = _LINE.search(line)
        if not match:
            continue
        rest = match.group(1).strip()
        if rest.startswith("error:"):
            progress.errors.append(rest[len("error:"):].strip())
            continue
        words = rest.split()
        event = words[0] if words and "=" not in words[0] else "step"
        values = _fields(words)
        if event == "start":
            progress = Progress(runs=progress.runs + 1, task=values.get("task"), strategy=values.get("strategy"),
                                duty=values.get("duty"), started_time=_float(values.get("time")))
        elif event == "restored":
            progress.restored_from = int(values["step"])
            progress.steps = progress.restored_from
        elif event == "first-step":
            progress.first_step = int(values["step"])
            progress.first_step_time = float(values["time"])
        elif event == "step":
            progress.steps = int(values["step"])
            progress.last_loss = float(values["loss"])
            progress.losses[progress.steps] = progress.last_loss
        elif event == "checkpoint":
            progress.checkpoints.append(int(values["step"]))
        elif event == "done":
            progress.done = True
            progress.steps = int(values["steps"])
            progress.final_loss = float(values["loss"])
            progress.done_time = _float(values.get("time"))
        elif event == "serve":
            progress.serving = True
        elif event == "terminated":
            progress.terminated = True
    return progress


def _float(text: str | None) -> float | None:
    return float(text) if text is not None else None
