"""Read what the kubelet (or kwok) reports about a pod."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tfop.api.constants import DEFAULT_CONTAINER

Pod = Mapping[str, Any]


def name(pod: Pod) -> str:
    return pod["metadata"]["name"]


def phase(pod: Pod) -> str:
    return (pod.get("status") or {}).get("phase") or "Pending"


def terminating(pod: Pod) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp"))


def is_active(pod: Pod) -> bool:
    return phase(pod) in ("Pending", "Running") and not terminating(pod)


def is_ready(pod: Pod) -> bool:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return False


def _tensorflow_status(pod: Pod) -> Mapping[str, Any] | None:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    for status in statuses:
        if status.get("name") == DEFAULT_CONTAINER:
            return status
    return statuses[0] if statuses else None


def exit_code(pod: Pod) -> int | None:
    """The tensorflow container's exit code, or None when the pod died without one (evicted)."""
    status = _tensorflow_status(pod)
    if not status:
        return None
    for key in ("state", "lastState"):
        terminated = (status.get(key) or {}).get("terminated")
        if terminated and terminated.get("exitCode") is not None:
            return int(terminated["exitCode"])
    return None


def node_name(pod: Pod) -> str:
    return (pod.get("spec") or {}).get("nodeName") or ""


def oom_killed(pod: Pod) -> bool:
    """The kernel's OOM killer ended the tensorflow container (its memory limit exceeded)."""
    status = _tensorflow_status(pod)
    for key in ("state", "lastState"):
        terminated = ((status or {}).get(key) or {}).get("terminated") or {}
        if terminated.get("reason") == "OOMKilled":
            return True
    return False


def restarts(pod: Pod) -> int:
    return sum(int(s.get("restartCount") or 0) for s in (pod.get("status") or {}).get("containerStatuses") or [])


def failure_summary(pod: Pod, memory_limit: str | None = None, replica_type: str = "") -> str:
    """How the pod failed, in a few words; an OOM kill names the memory limit to raise."""
    code = exit_code(pod)
    reason = (pod.get("status") or {}).get("reason")
    if oom_killed(pod):
        limit = f" {memory_limit}" if memory_limit else ""
        return (f"{name(pod)} was OOMKilled (exit code {code if code is not None else 137}): its container "
                f"exceeded its memory limit{limit}; raise resources.limits.memory of "
                f"{replica_type + ' pods' if replica_type else 'its pod template'}")
    if code is not None:
        return f"{name(pod)} exited with code {code}"
    return f"{name(pod)} failed" + (f" ({reason})" if reason else "")
