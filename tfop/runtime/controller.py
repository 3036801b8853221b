"""The runtime's loop for every job: observe from the informers, call the pure core, apply its Plan.

event -> informer -> work queue -> observe -> reconcile (pure) -> Plan -> apply -> failed writes
-> conclude (pure) -> status and Events. This file sets no condition and reads no message: the
core decides, the runtime applies and reports.
"""
from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from functools import partial
from typing import Any

from tfop.api import conditions
from tfop.api.constants import KIND, LABEL_OPERATOR, OPERATOR_NAME, PLURAL
from tfop.api.nodes import disruption
from tfop.children.templates import Templates
from tfop.core.context import Context, Observed
from tfop.core.outcomes import FailedWrite, blocking, conclude, needs_retry
from tfop.core.reconcile import reconcile
from tfop.core.settings import Settings
from tfop.core.transitions import transitions
from tfop.gang.base import GangBackend
from tfop.kube.client import ApiError, KubeClient
from tfop.kube.informer import Informer
from tfop.kube.supervisor import first_of, stop_all
from tfop.kube.ticks import PACE
from tfop.kube.workqueue import WorkQueue
from tfop.runtime.apply import Applier
from tfop.runtime.capacity import ClusterRoom
from tfop.runtime.jobs import JobKey, JobRecord, group_news_unread, label_key, owner_key
from tfop.runtime.metrics import Metrics
from tfop.runtime.nodes import NodeHealth, wake_jobs_on
from tfop.runtime.status_writer import TFJOB_API, StatusWriter
from tfop.runtime.trim import SharedParts, trim_child, trim_group, trim_job

log = logging.getLogger("tfop.controller")
# Another controller (e.g. Kueue's MultiKueue) owns jobs with a different managedBy.
OUR_MANAGERS = ("", "kubeflow.org/training-operator", "tfop")
# A job that has not finished is reconciled at least this often (an API call only if something changed):
# a last resort, since the informers relist after any broken watch; what a pass reads beyond the job's
# own objects asks for its own, sooner, look (gang_step.recheck_after). Any shorter makes a long burst
# longer, passing over thousands of running jobs for nothing (e2e/BENCHMARK.md).
RESYNC_SECONDS = 300.0
# A child's event waits this long for the rest of its burst (a gang bound in one cycle, its pods then
# Running one by one): one pass instead of one per event, for a status that waits a second anyway
# (holding.PROGRESS_HOLD). The job's own events, and a gang woken for freed room, go at once.
CHILD_BATCH_SECONDS = 0.2


def passed(metrics: Metrics, key: JobKey, outcome: str, took: float) -> None:
    """Count and time a pass; a log line (with the job's fields for JSON logs) when it wrote or failed."""
    metrics.reconcile_seconds.labels(outcome).observe(took)
    if outcome in ("error", "retry"):
        metrics.reconcile_errors.inc()
    level = logging.DEBUG if outcome in ("skipped", "unchanged") else logging.INFO
    log.log(level, "reconciled %s/%s: %s in %.0f ms", key[0], key[1], outcome, took * 1000,
            extra={"job_namespace": key[0], "job_name": key[1], "outcome": outcome,
                   "duration_ms": round(took * 1000, 1)})


class RetryLater(Exception):
    """Writes failed for a reason a later pass may not meet (a timeout, an RBAC rule being added)."""

    def __init__(self, failures: list[FailedWrite]):
        first = failures[0]
        super().__init__(f"{len(failures)} write(s) failed, first {first.verb} {first.label}: "
                         f"{first.code} {first.message}")


def wake_waiting_gangs(jobs: Mapping[JobKey, JobRecord], wake: Callable[[JobKey], None]) -> None:
    """Freed room may fit a waiting gang: it looks again now (and may nudge its scheduler)."""
    for key, record in jobs.items():
        if "reason" in (record.status().get("gang") or {}):
            wake(key)


async def pods_before_admission(settings: Settings, backend: GangBackend | None, create) -> bool:
    """Whether a gang's pods may be created before its group is admitted: never, always, or (auto) when
    a dry-run pod of an unadmitted group is accepted (no admission webhook refuses it)."""
    mode = settings.pods_before_admission_mode
    probe = backend.admission_probe((list(settings.namespaces) or ["default"])[0]) if backend else None
    if mode == "never" or backend is None or probe is None:
        return False
    if mode == "auto":
        try:
            await create(probe, "pods", dry_run=True)
        except ApiError as err:
            log.info("a dry-run pod of a %s gang was refused (%s), perhaps by its admission webhook: a "
                     "gang's pods are created once its group is admitted", backend.name, err)
            return False
        log.info("no admission webhook of %s refuses pods of an unadmitted group (dry-run pod accepted): a "
                 "gang's pods are created with its group, and it is admitted and bound in one cycle", backend.name)
    return True


class Controller:
    def __init__(self, settings: Settings, client: KubeClient, backend: GangBackend | None,
                 templates: Templates | None = None, metrics: Metrics | None = None):
        self.settings, self.client, self.backend = settings, client, backend
        self.metrics = metrics or Metrics()
        self.ctx = Context(settings=settings, templates=templates or Templates(), backend=backend)
        self.jobs: dict[JobKey, JobRecord] = {}
        # Reconciles wait on the API, not the CPU: enough of them to keep every connection busy.
        self.queue = WorkQueue(self.reconcile, workers=2 * settings.max_concurrent_requests, grid=PACE,
                               on_wait=self.metrics.queue_wait.observe, on_retry=self.metrics.queue_retries.inc)
        self.metrics.watch_state(lambda: self.jobs.values(), lambda: self.queue.depth)
        self.synced = asyncio.Event()
        self.watches: dict[str, asyncio.Task] = {}  # name -> its informer's task
        self.limit = asyncio.Semaphore(settings.max_concurrent_requests)
        self._watch_children(list(settings.namespaces) or [None])
        self.applier = Applier(client, self.call, self.pods, self.services, self.groups)
        self.statuses = StatusWriter(client, self.call, self.queue.add_after)

    def _watch_children(self, namespaces: list[str | None]) -> None:
        child_changed = partial(self.queue.add_soon, delay=CHILD_BATCH_SECONDS)
        # TFJobs: our own informer rather than kopf's watch, whose relist after a 410 never reports
        # the jobs deleted meanwhile (their pods would be re-created and collected in a loop).
        self.tfjobs = Informer(self.client, TFJOB_API, PLURAL, KIND, namespaces, on_event=self.job_event,
                               trim=trim_job)
        shared = SharedParts()  # the parts every child of a template repeats, kept once
        self.groups = self.priorities = self.room = None
        pods: dict[str, Any] = {"trim": partial(trim_child, shared=shared)}  # the pod informer's keywords
        # A node lost, back, deleted or tainted: a pass for every job with a pod on it.
        self.nodes = NodeHealth(lambda node: wake_jobs_on(node, self.pods.objects.values(), label_key, self.queue.add))
        if self.backend is not None:
            wake = partial(wake_waiting_gangs, self.jobs, self.queue.add)  # no pass waits for the room
            self.room = ClusterRoom(self.client, self.backend, namespaces, self.queue.add, on_room_grew=wake,
                                    on_node=self.nodes.node_event)
            pods = self.room.counting_own_pods(pods["trim"])  # each pod watched once
        self.nodes.watch(self.room.nodes if self.room else None)  # each node watched once
        child = partial(Informer, self.client, "v1", label_selector=f"{LABEL_OPERATOR}={OPERATOR_NAME}",
                        key_of=label_key, on_change=child_changed)
        self.pods = child("pods", "Pod", namespaces, on_gone=self._pod_gone, **pods)
        self.services = child("services", "Service", namespaces, trim=partial(trim_child, shared=shared))
        self.informers = [self.tfjobs, self.pods, self.services]
        if self.backend is None:
            return
        if (resource := self.backend.group_resource) is not None:
            # Every group of the namespaces: upstream's carry no label, and tfop may take over their jobs.
            read = partial(trim_group, status_fields=self.backend.group_status_fields)
            self.groups = Informer(self.client, resource.api_version, resource.plural, resource.kind, namespaces,
                                   key_of=owner_key, on_change=child_changed, trim=read,
                                   quiet=partial(group_news_unread, self.jobs, self.backend))
        # Read by each pass; a job refused for a PriorityClass not yet created retries on its own backoff.
        self.priorities = Informer(self.client, "scheduling.k8s.io/v1", "priorityclasses", "PriorityClass")
        self.informers += [informer for informer in (self.groups, self.priorities) if informer is not None]

    # -- inputs -------------------------------------------------------------------
    def job_event(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        """From the TFJob informer, which keeps jobs trimmed already: the record shares its copy."""
        meta = body["metadata"]
        key = (meta["namespace"], meta["name"])
        if event_type == "DELETED":
            if self.jobs.pop(key, None) is not None:
                self.metrics.job_deleted(key[0])
            self.queue.forget(key)
            return
        record = self.jobs.get(key)
        if record is None:
            self.jobs[key] = JobRecord(dict(body))
        elif not record.take_event(dict(body)):
            return  # our own status write coming back
        self.queue.add(key)

    def _pod_gone(self, key: JobKey, name: str, last: Mapping[str, Any] | None) -> None:
        record = self.jobs.get(key)
        if record is not None:
            record.pod_gone(name, disruption(last) if last else None)

    # -- start --------------------------------------------------------------------
    async def decide_pods_before_admission(self) -> None:
        """Settle Context.pods_before_admission once, at start (see Settings.pods_before_admission_mode)."""
        if await pods_before_admission(self.settings, self.backend, partial(self.call, self.client.create)):
            self.ctx = replace(self.ctx, pods_before_admission=True)

    async def run(self, leading: asyncio.Event | None = None) -> None:
        """Fill every cache, wait to lead (a standby keeps its caches warm), then reconcile.

        Reconciling starts only once every cache is filled (no duplicate creates); an informer
        that stops ends this with VitalTaskDied, whatever stage it is at.
        """
        self.watches = {f"informer {i.plural}": asyncio.create_task(i.run(), name=f"tfop-informer-{i.plural}")
                        for i in self.informers}
        self.watches.update(self.room.start() if self.room else {})
        try:
            await first_of(asyncio.gather(*(i.synced.wait() for i in self.informers)), self.watches)
            self.synced.set()
            log.info("caches synced: %d jobs, %d pods, %d services", len(self.jobs), len(self.pods.objects),
                     len(self.services.objects))
            if leading is not None and not leading.is_set():
                log.info("standby: caches warm; reconciling starts when this replica holds the leader Lease")
                await first_of(leading.wait(), self.watches)
            await first_of(self.decide_pods_before_admission(), self.watches)
            log.info("reconciling")
            self.metrics.leader.set(1)
            await first_of(self.queue.run(), self.watches)
        finally:
            self.metrics.leader.set(0)
            await stop_all(self.watches.values())

    # -- one pass -----------------------------------------------------------------
    def observe(self, key: JobKey, record: JobRecord) -> Observed:
        groups = self.groups.for_key(key) if self.groups else []
        priorities = {}
        if self.priorities is not None:
            priorities = {o["metadata"]["name"]: int(o.get("value", 0)) for o in self.priorities.objects.values()}
        explaining = self.room.observed(key, record.status()) if self.room else {}
        job_pods = self.pods.for_key(key)
        vanished, disrupted = record.take_vanished()
        return Observed(pods=job_pods, services=self.services.for_key(key),
                        group=groups[0] if groups else None, priority_values=priorities,
                        vanished=vanished, disrupted=disrupted, nodes=self.nodes.nodes_of(job_pods),
                        refusals=record.refusals, refused_at=record.refused_at, **explaining)

    async def reconcile(self, key: JobKey) -> None:
        """One pass, timed and counted; one log line when it wrote something or failed."""
        started = time.monotonic()
        outcome = "error"
        try:
            outcome = await self._pass(key)
        except RetryLater:
            outcome = "retry"
            raise
        finally:
            passed(self.metrics, key, outcome, time.monotonic() - started)

    async def _pass(self, key: JobKey) -> str:
        """What the pass did: skipped (not ours, or going), unchanged, or applied."""
        record = self.jobs.get(key)
        if record is None or record.body["metadata"].get("deletionTimestamp"):
            return "skipped"
        managed_by = ((record.body.get("spec") or {}).get("runPolicy") or {}).get("managedBy") or ""
        if managed_by not in OUR_MANAGERS:
            return "skipped"
        before = record.status()
        normalized = record.normalized()
        now = datetime.now(UTC)
        plan = reconcile(normalized.job, self.observe(key, record), now, self.ctx,
                         normalized.problems, normalized.notes)
        record.reads_group_status, record.reads_group_progress = plan.reads_group_status, plan.reads_group_progress
        failures = await self.applier.write_objects(record, plan)
        retry = needs_retry(failures, plan)
        if plan.create_group is not None or plan.create:  # what blocked this try, for the next pass to say
            record.refusals = tuple(f for _, f in blocking(failures, normalized.job))
            record.refused_at = now if record.refusals else None
            if record.refusals:
                self.queue.add(key)
        plan = conclude(normalized.job, plan, failures, now)
        if plan.pods_wait_for_admission:
            self._wait_for_admission()
        # The status and the Events go out together: a reconcile holds its worker for one round trip.
        await asyncio.gather(self.statuses.write(key, record, plan.status),
                             self.applier.post_events(record.body, plan.events))
        if plan.delete_job:
            meta = record.body["metadata"]
            await self.call(self.client.delete, TFJOB_API, PLURAL, meta["namespace"], meta["name"], "Background")
        if plan.requeue_after is not None:
            self.queue.add_after(key, plan.requeue_after + 0.05)
        after = plan.status if plan.status is not None else before  # None: the status did not change
        self.metrics.job_changed(key[0], transitions(before, after, record.body["metadata"].get(
            "creationTimestamp"), now), self.backend.name if self.backend else None)
        if retry:
            raise RetryLater(retry)
        if not conditions.is_finished(record.status().get("conditions") or []):
            # Level-triggered safety net: a running job is looked at again even if an event was lost.
            self.queue.add_after(key, RESYNC_SECONDS * (1 + 0.1 * random.random()))
        wrote = plan.writes or plan.events
        return "applied" if wrote else "unchanged"

    def _wait_for_admission(self) -> None:
        if self.ctx.pods_before_admission:
            log.warning("an admission webhook refuses pods of unadmitted groups: from now on a gang's pods "
                        "are created once its group is admitted")
            self.ctx = replace(self.ctx, pods_before_admission=False)

    async def call(self, coro_fn, *args, **kwargs):
        async with self.limit:
            return await coro_fn(*args, **kwargs)

    async def flush_statuses(self, timeout: float = 5.0) -> int:
        """On shutdown: write the held statuses, so `kubectl get tfjob` does not lag behind by a restart.

        Only a replica that may write (the leader, or any without leader election) has any to write.
        """
        gate = self.client.write_gate
        if gate is not None and not gate():
            return 0
        return await self.statuses.flush(list(self.jobs.values()), timeout)
