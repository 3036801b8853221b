"""Prometheus metrics: upstream's job counters under their own names, and tfop's own.

Kubeflow training-operator's counters keep their names and labels (`training_operator_jobs_*_total`
with `job_namespace` and `framework`), so dashboards and alerts made for it keep working. They
count transitions of a job's status (tfop/core/transitions.py), so a restart of the operator
counts nothing twice. Everything else is `tfop_*`. One registry per operator: nothing global.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from tfop.api import conditions
from tfop.core.transitions import Transitions
from tfop.runtime.jobs import JobRecord

FRAMEWORK = "tensorflow"
JOB_LABELS = ["job_namespace", "framework"]
# A pass waits on the API: milliseconds when nothing changes, seconds for a big job's batches.
PASS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
# A gang waits from a second (room for it) to hours (a queue behind other jobs).
GANG_BUCKETS = (0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800, 3600, 7200)
STATES = (conditions.SUSPENDED, conditions.FAILED, conditions.SUCCEEDED, conditions.RESTARTING,
          conditions.RUNNING, conditions.CREATED)
VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


def job_state(status: dict) -> str:
    """The state a job is in, as `kubectl get tfjob` shows it: its most decisive true condition."""
    conds = list(status.get("conditions") or [])
    return next((s for s in STATES if conditions.is_true(conds, s)), "Pending")


def api_call(method: str, path: str) -> tuple[str, str]:
    """(verb, resource) of a request path: /api/v1/namespaces/ns/pods/x -> ("get", "pods")."""
    parts = [p for p in path.split("?")[0].split("/") if p]
    parts = parts[2:] if parts[:1] == ["api"] else parts[3:]  # drop api/v1 or apis/group/version
    if parts[:1] == ["namespaces"] and len(parts) > 2:
        parts = parts[2:]
    resource = "/".join(parts[:1] + parts[2:3]) or "none"  # pods, tfjobs/status
    if method == "GET":
        return ("list" if len(parts) == 1 else "get"), resource
    return VERBS.get(method, method.lower()), resource


class StateCollector:
    """Jobs by state and the work queue's depth, read at scrape time (on the event loop)."""

    def __init__(self, jobs: Callable[[], Iterable[JobRecord]], depth: Callable[[], int]):
        self.jobs, self.depth = jobs, depth

    def collect(self):
        counts = dict.fromkeys((*STATES, "Pending"), 0)
        for record in self.jobs():
            counts[job_state(record.status())] += 1
        by_state = GaugeMetricFamily("tfop_jobs", "TFJobs this operator knows, by state", labels=["state"])
        for state, count in counts.items():
            by_state.add_metric([state], count)
        yield by_state
        yield GaugeMetricFamily("tfop_workqueue_depth", "Jobs waiting for a reconcile", value=self.depth())


class WatchCollector:
    """What the watches received, by resource, read at scrape time from the client's tallies
    (KubeClient.watch_received): where the operator's input comes from, and how much of it."""

    def __init__(self, received: Mapping[str, list[int]]):
        self.received = received

    def collect(self):
        events = CounterMetricFamily("tfop_watch_events", "Watch events received (bookmarks included)",
                                     labels=["resource"])
        size = CounterMetricFamily("tfop_watch_bytes", "Bytes of watch events received", labels=["resource"])
        reads = CounterMetricFamily("tfop_watch_reads", "Reads of the watch streams (one read may carry many "
                                    "events): each is a wake-up of the event loop", labels=["resource"])
        for resource, (count, received, read) in sorted(self.received.items()):
            events.add_metric([resource], count)
            size.add_metric([resource], received)
            reads.add_metric([resource], read)
        yield events
        yield size
        yield reads


class Metrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.jobs_created = Counter("training_operator_jobs_created", "Jobs created", JOB_LABELS, registry=r)
        self.jobs_deleted = Counter("training_operator_jobs_deleted", "Jobs deleted", JOB_LABELS, registry=r)
        self.jobs_successful = Counter("training_operator_jobs_successful", "Jobs succeeded", JOB_LABELS, registry=r)
        self.jobs_failed = Counter("training_operator_jobs_failed", "Jobs failed", JOB_LABELS, registry=r)
        self.jobs_restarted = Counter("training_operator_jobs_restarted", "Job restarts (members or whole gangs)",
                                      JOB_LABELS, registry=r)
        self.reconcile_seconds = Histogram("tfop_reconcile_duration_seconds", "One pass over a job, writes included",
                                           ["outcome"], buckets=PASS_BUCKETS, registry=r)
        self.reconcile_errors = Counter("tfop_reconcile_errors", "Passes that ended in an error (retried)",
                                        registry=r)
        self.queue_wait = Histogram("tfop_workqueue_wait_seconds", "From a job's first event to its pass starting",
                                    buckets=PASS_BUCKETS, registry=r)
        self.queue_retries = Counter("tfop_workqueue_retries", "Passes retried after an error", registry=r)
        self.api_requests = Counter("tfop_api_requests", "Requests to the apiserver (429s included)",
                                    ["verb", "resource", "code"], registry=r)
        self.gang_wait = Histogram("tfop_gang_wait_seconds", "From a gang waiting (or its job created) to "
                                   "every member running", ["backend"], buckets=GANG_BUCKETS, registry=r)
        self.gang_restarts = Counter("tfop_gang_restarts", "Restarts of gang-scheduled jobs", ["backend"], registry=r)
        self.restarts = Counter("tfop_restarts", "Restarts by cause: failure (counted against backoffLimit), "
                                "disruption and node_lost (the cluster's: not counted), in_place (a container "
                                "the kubelet restarted inside its pod)", ["job_namespace", "reason"], registry=r)
        self.leader = Gauge("tfop_leader", "1 while this replica reconciles (holds the Lease, or runs alone)",
                            registry=r)

    def watch_state(self, jobs: Callable[[], Iterable[JobRecord]], depth: Callable[[], int]) -> None:
        self.registry.register(StateCollector(jobs, depth))

    def watch_traffic(self, received: Mapping[str, list[int]]) -> None:
        self.registry.register(WatchCollector(received))

    def api_response(self, method: str, path: str, code: int) -> None:
        verb, resource = api_call(method, path)
        self.api_requests.labels(verb, resource, str(code)).inc()

    def job_changed(self, namespace: str, changed: Transitions, backend: str | None) -> None:
        labels = (namespace, FRAMEWORK)
        if changed.created:
            self.jobs_created.labels(*labels).inc()
        if changed.succeeded:
            self.jobs_successful.labels(*labels).inc()
        if changed.failed:
            self.jobs_failed.labels(*labels).inc()
        if changed.restarts:
            self.jobs_restarted.labels(*labels).inc(changed.restarts)
            if backend:
                self.gang_restarts.labels(backend).inc(changed.restarts)
        for reason, count in changed.restarts_by_reason.items():
            self.restarts.labels(namespace, reason).inc(count)
        if changed.gang_waited is not None and backend:
            self.gang_wait.labels(backend).observe(changed.gang_waited)

    def job_deleted(self, namespace: str) -> None:
        self.jobs_deleted.labels(namespace, FRAMEWORK).inc()
