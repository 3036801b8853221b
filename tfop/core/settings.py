"""Operator settings: parsed once at start-up into one immutable object."""
from __future__ import annotations

from dataclasses import dataclass

DEFAULT_NAMESPACE = "kubeflow"
DEFAULT_DEPLOYMENT = "tfop"
LEADER_ELECTION_LEASE = "tfop"  # the Lease `tfop run --leader-elect` takes, in its own namespace
DEFAULT_IMAGE = "tfop:0.1.0"
# The most pods one job may ask for before the operator fails it (`tfop run --max-pods-per-job`).
# Real TFJobs have tens to hundreds of pods. At 1000 a pass over the job holds the event loop ~10 ms
# (its pods are read every pass) plus ~25 ms per batch it creates, and the operator stays far inside
# its 512Mi (each pod it creates carries a ~33 KB TF_CONFIG listing every pod). Admission allows up
# to tfop.api.rules.MAX_JOB_REPLICAS, the most this flag may be raised to.
DEFAULT_MAX_PODS_PER_JOB = 1000
# A job disrupted this often is failed: a spot pool reclaimed every few minutes would otherwise keep
# it restarting for ever, with nothing telling its owner.
DEFAULT_MAX_DISRUPTIONS_PER_JOB = 20


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
    # A job asking for more pods fails before any is built (tfop/core/lifecycle.py).
    max_pods_per_job: int = DEFAULT_MAX_PODS_PER_JOB
    # A pod stuck terminating on a lost node is force-deleted after this many seconds (0: never, the
    # default). Unsafe where the node is only cut off: its containers may still run beside the new pod.
    force_delete_lost_pods_after: float = 0.0
    # Restarts a job's disruptions (preemption, eviction, lost nodes) may cause before it fails
    # (DisruptionLimitExceeded); they never count against backoffLimit.
    max_disruptions_per_job: int = DEFAULT_MAX_DISRUPTIONS_PER_JOB
    # Leader election on a coordination.k8s.io Lease (client-go's defaults, in seconds).
    leader_elect: bool = False
    leader_elect_lease_duration: float = 15.0
    leader_elect_renew_deadline: float = 10.0
    leader_elect_retry_period: float = 2.0
    # The Lease's namespace; empty: the namespace the operator runs in (else kubeflow).
    leader_elect_namespace: str = ""
    # /healthz and /readyz, controller-runtime's default address; "0" turns them off.
    health_probe_bind_address: str = ":8081"
    # /metrics (Prometheus), controller-runtime's default address; "0" turns it off.
    metrics_bind_address: str = ":8080"
    # "uvloop" (libuv's loop: a TLS connection costs ~70 KB of memory against ~320 with asyncio's
    # own), "asyncio", or "auto": uvloop where it is installed (tfop/runtime/event_loop.py).
    event_loop: str = "auto"

    @property
    def all_namespaces(self) -> bool:
        return not self.namespaces
