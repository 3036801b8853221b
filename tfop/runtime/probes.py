"""What /healthz and /readyz check of a controller (served by tfop/kube/health.py).

Alive means making progress: every informer running and hearing from the apiserver, no reconcile
stuck. Ready means the caches are synced, so a standby can lead at once.
"""
from __future__ import annotations

from tfop.kube.health import Check
from tfop.runtime.controller import Controller

# A reconcile running longer is stuck (its requests time out after 30 s each).
STUCK_AFTER_SECONDS = 300.0
# A watch ends within 320 s and the apiserver sends bookmarks: an informer silent this long is hung.
SILENT_INFORMER_SECONDS = 600.0


def liveness_checks(controller: Controller) -> dict[str, Check]:
    def informers() -> str | None:
        stopped = [name for name, task in controller.watches.items() if task.done()]
        if stopped:
            return f"stopped: {', '.join(stopped)}"
        silent = [f"{i.plural} for {i.clock() - i.last_contact:.0f}s" for i in controller.informers
                  if i.clock() - i.last_contact > SILENT_INFORMER_SECONDS]
        return f"no answer from the apiserver: {', '.join(silent)}" if silent else None

    def workers() -> str | None:
        longest = controller.queue.longest_running()
        if longest is not None and longest[1] > STUCK_AFTER_SECONDS:
            return f"the reconcile of {longest[0][0]}/{longest[0][1]} has run for {longest[1]:.0f}s"
        return None
    return {"informers": informers, "workers": workers}


def readiness_checks(controller: Controller) -> dict[str, Check]:
    return {"caches": lambda: None if controller.synced.is_set() else "caches not synced yet"}
