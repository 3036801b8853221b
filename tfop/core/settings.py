"""Operator settings: parsed once at start-up into one immutable object."""
from __future__ import annotations

from dataclasses import dataclass

DEFAULT_NAMESPACE = "kubeflow"
DEFAULT_DEPLOYMENT = "tfop"
DEFAULT_IMAGE = "tfop:0.1.0"


@dataclass(frozen=True)
class Settings:
    enable_gang_scheduling: bool = False
    # Backend name as given on the command line ("" means upstream's default, volcano).
    gang_scheduler_name: str = ""
    # Overrides the schedulerName stamped on pods (None: the backend's own).
    scheduler_name: str | None = None
    # Namespaces to watch; empty means all namespaces.
    namespaces: tuple[str, ...] = ()
    # Appended to service hosts in TF_CONFIG (e.g. "cluster.local"); empty keeps "<svc>.<ns>.svc".
    cluster_domain: str = ""
    # Restart a running gang as a whole when one member fails or disappears.
    gang_restart: bool = True
    # Concurrent API requests the operator may have in flight.
    max_concurrent_requests: int = 64
    # Create a gang's pods before its scheduler admits the group (Volcano): "auto" does when no
    # admission webhook would refuse them (probed with a dry-run pod at start), "always", "never".
    pods_before_admission_mode: str = "auto"
    # Client-side cap on requests per second (0 = none: the apiserver's priority-and-fairness decides).
    qps: float = 0.0

    @property
    def all_namespaces(self) -> bool:
        return not self.namespaces
