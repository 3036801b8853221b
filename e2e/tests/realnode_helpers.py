"""Helpers of the tests whose pods really run on the real node (e2e.harness.realnode, e2e.harness.training)."""
from __future__ import annotations

import json

from e2e.harness import realnode
from e2e.tests.lifecycle_helpers import Env, active, phase
from e2e.harness.training import parse_progress

# A TF pod's first step comes after `import tensorflow` (4-6 s) and its peers: a job of 3-4 pods on
# 2 CPUs takes 10-30 s; the waits leave room for a machine busy with other work.
TRAIN_SECONDS = 240


def logs(env: Env, pod: str) -> str:
    p = env.kubectl("logs", pod, check=False)
    return p.stdout if p.returncode == 0 else ""


def progress(env: Env, pod: str):
    return parse_progress(logs(env, pod))


def sigkill_process(pod: dict) -> None:
    """SIGKILL the container's own process through containerd (not a shell in it): it exits 137."""
    realnode.ctr(realnode.PATHS, "tasks", "kill", "--signal", "SIGKILL", realnode.container_id(pod))


def finished(job: dict) -> bool:
    return any(c.get("type") in ("Succeeded", "Failed") and c.get("status") == "True"
               for c in (job.get("status") or {}).get("conditions") or [])


def wait_finished(env: Env, name: str, timeout: float = TRAIN_SECONDS) -> dict:
    return env.wait_job(name, finished, "Succeeded or Failed", timeout)


def running(env: Env, job: str, count: int) -> list[dict] | None:
    pods = active(env.pods(job))
    return pods if len(pods) == count and all(phase(p) == "Running" for p in pods) else None


def describe_pods(env: Env, job: str) -> str:
    """Every pod's phase, node and container state, and the end of its log: what a failure shows."""
    parts = []
    for pod in env.pods(job):
        name = pod["metadata"]["name"]
        state = json.dumps([s.get("state") for s in (pod.get("status") or {}).get("containerStatuses") or []])
        parts.append(f"--- {name} {phase(pod)} on {pod['spec'].get('nodeName')}: {state}\n"
                     + "\n".join(logs(env, name).splitlines()[-15:]))
    return "\n".join(parts)
