"""The thin I/O layer: observe from the informers, call the pure core, apply its Plan."""
from __future__ import annotations

import asyncio
import logging
import random
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any, Mapping

from tfop.api import conditions as S
from tfop.api.constants import GROUP, LABEL_OPERATOR, LABEL_TYPE, OPERATOR_NAME, PLURAL, STORAGE_VERSION
from tfop.api.normalize import canonical_type, normalize
from tfop.build.children import Templates
from tfop.core.plan import Event, Plan, Ref
from tfop.core.reconcile import Context, Observed, reconcile
from tfop.core.settings import Settings
from tfop.gang.base import GangBackend
from tfop.kube.client import ApiError, KubeClient
from tfop.kube.trim import trim_job
from tfop.runtime.holding import hold_limits
from tfop.runtime.informer import Informer, JobKey, newer

log = logging.getLogger("tfop.controller")
TFJOB_API = f"{GROUP}/{STORAGE_VERSION}"
# Another controller (e.g. Kueue's MultiKueue) owns jobs with a different managedBy.
OUR_MANAGERS = ("", "kubeflow.org/training-operator", "tfop")
# How often a group object refused at admission is tried again (a missing queue may be created).
GROUP_RETRY_SECONDS = 30.0
# A job that has not finished is reconciled at least this often (an API call only if something changed).
RESYNC_SECONDS = 30.0
# How soon pods refused until their group is admitted are tried again (the group's watch event
# usually comes first).
DEFERRED_RETRY_SECONDS = 5.0


def merge_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict:
    """RFC 7386 patch turning `old` into `new` (removed keys become null)."""
    patch: dict[str, Any] = {}
    for key in old.keys() - new.keys():
        patch[key] = None
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, Mapping) and isinstance(before, Mapping):
            inner = merge_patch(before, value)
            if inner:
                patch[key] = inner
        elif before != value:
            patch[key] = value
    return patch


class Controller:
    def __init__(self, settings: Settings, client: KubeClient, backend: GangBackend | None,
                 templates: Templates | None = None):
        from tfop.runtime.workqueue import WorkQueue

        self.settings, self.client, self.backend = settings, client, backend
        self.ctx = Context(settings=settings, templates=templates or Templates(), backend=backend)
        self.jobs: dict[JobKey, dict] = {}
        # Progress-only statuses not written yet (see holding.py): reconciles read them as the
        # job's status; (first, last) loop times of their changes.
        self.unwritten: dict[JobKey, dict] = {}
        self.unwritten_times: dict[JobKey, tuple[float, float]] = {}
        # Pods this operator deleted, so their disappearance is not mistaken for a lost gang member.
        self.our_deletions: dict[JobKey, set[str]] = {}
        # Reconciles wait on the API, not the CPU: enough of them to keep every connection busy.
        self.queue = WorkQueue(self.reconcile, workers=2 * settings.max_concurrent_requests)
        self.limit = asyncio.Semaphore(settings.max_concurrent_requests)
        namespaces = list(settings.namespaces) or [None]
        selector = f"{LABEL_OPERATOR}={OPERATOR_NAME}"
        self.pods = Informer(client, "v1", "pods", "Pod", namespaces, selector, self.queue.add)
        self.services = Informer(client, "v1", "services", "Service", namespaces, selector, self.queue.add)
        self.informers = [self.pods, self.services]
        self.groups = None
        self.priorities = None
        if backend is not None:
            resource = backend.group_resource
            if resource is not None:
                self.groups = Informer(client, resource.api_version, resource.plural, resource.kind, namespaces,
                                       selector, self.queue.add, keep_spec=True)
                self.informers.append(self.groups)
            self.priorities = Informer(client, "scheduling.k8s.io/v1", "priorityclasses", "PriorityClass", [None],
                                       None, self._priority_changed, key_of=lambda obj: None)
            self.informers.append(self.priorities)

    # -- inputs -------------------------------------------------------------------
    def job_event(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        meta = body["metadata"]
        key = (meta["namespace"], meta["name"])
        if event_type == "DELETED":
            self.jobs.pop(key, None)
            self.our_deletions.pop(key, None)
            self.unwritten.pop(key, None)
            self.unwritten_times.pop(key, None)
            self.queue.forget(key)
            return
        if newer(body, self.jobs.get(key)):
            self.jobs[key] = trim_job(body)
        self.queue.add(key)

    def current_status(self, key: JobKey, body: Mapping[str, Any]) -> dict:
        """The job's status as the operator knows it: the held one, else the written one."""
        return self.unwritten.get(key) or body.get("status") or {}

    def _priority_changed(self, _key) -> None:
        # A PriorityClass appearing can unblock every gang that waited for it.
        for key in list(self.jobs):
            self.queue.add(key)

    async def decide_pods_before_admission(self) -> None:
        """Settle Context.pods_before_admission once, at start (see Settings.pods_before_admission)."""
        mode = self.settings.pods_before_admission
        namespace = (list(self.settings.namespaces) or ["default"])[0]
        probe = self.backend.admission_probe(namespace) if self.backend else None
        if mode == "never" or probe is None:
            return
        if mode == "always":
            self.ctx = replace(self.ctx, pods_before_admission=True)
            return
        try:
            await self._call(self.client.create, probe, "pods", dry_run=True)
        except ApiError as err:
            log.info("a dry-run pod of a %s gang was refused (%s), perhaps by %s's admission webhook: a gang's pods "
                     "are created once its group is admitted", self.backend.name, err, self.backend.name)
            return
        self.ctx = replace(self.ctx, pods_before_admission=True)
        log.info("no admission webhook of %s refuses pods of an unadmitted group (dry-run pod accepted): a "
                 "gang's pods are created with its group, and it is admitted and bound in one cycle",
                 self.backend.name)

    def refused_for_admission(self, err: ApiError) -> bool:
        """A webhook installed after the start refuses pods of an unadmitted group: wait from now on."""
        message = err.message.lower()
        # Webhooks say "denied the request", admission policies "denied request".
        if not ("denied" in message and "podgroup" in message):
            return False
        if self.ctx.pods_before_admission:
            log.warning("an admission webhook refuses pods of unadmitted groups (%s): from now on a gang's pods "
                        "are created once its group is admitted", err)
            self.ctx = replace(self.ctx, pods_before_admission=False)
        return True

    async def run(self) -> None:
        """Watch the children; reconcile only once every cache is filled (no duplicate creates)."""
        await self.decide_pods_before_admission()
        watches = [asyncio.create_task(i.run()) for i in self.informers]
        await asyncio.gather(*(i.synced.wait() for i in self.informers))
        log.info("caches synced: %d pods, %d services; reconciling", len(self.pods.objects),
                 len(self.services.objects))
        try:
            await self.queue.run()
        finally:
            for task in watches:
                task.cancel()

    # -- one reconcile ------------------------------------------------------------
    def observe(self, key: JobKey) -> Observed:
        groups = self.groups.for_job(key) if self.groups else []
        priorities = {}
        if self.priorities is not None:
            priorities = {o["metadata"]["name"]: int(o.get("value", 0)) for o in self.priorities.objects.values()}
        ours = self.our_deletions.get(key, set())
        gone = self.pods.take_vanished(key)
        vanished = gone - ours
        ours -= gone
        if not ours:
            self.our_deletions.pop(key, None)
        return Observed(pods=self.pods.for_job(key), services=self.services.for_job(key),
                        group=groups[0] if groups else None, priority_values=priorities,
                        vanished=frozenset(vanished))

    async def reconcile(self, key: JobKey) -> None:
        body = self.jobs.get(key)
        if body is None or body["metadata"].get("deletionTimestamp"):
            self.pods.take_vanished(key)  # nothing will ask for them
            return
        managed_by = ((body.get("spec") or {}).get("runPolicy") or {}).get("managedBy") or ""
        if managed_by not in OUR_MANAGERS:
            return
        normalized = normalize({**body, "status": self.current_status(key, body)})
        observed = self.observe(key)
        plan = reconcile(normalized.job, observed, datetime.now(timezone.utc), self.ctx,
                         normalized.problems, normalized.notes)
        await self.apply(key, body, plan)
        if not S.is_finished(self.current_status(key, self.jobs.get(key) or {}).get("conditions") or []):
            # Level-triggered safety net: a running job is looked at again even if an event was lost.
            self.queue.add_after(key, RESYNC_SECONDS * (1 + 0.1 * random.random()))

    async def _call(self, coro_fn, *args, **kwargs):
        async with self.limit:
            return await coro_fn(*args, **kwargs)

    async def apply(self, key: JobKey, body: Mapping[str, Any], plan: Plan) -> None:
        rejected: list[tuple[str, str]] = []  # ("pod <name>", why)
        deferred: list[str] = []  # "pod <name>" refused until its group is admitted
        if plan.create_group is not None:
            try:
                created = await self._call(self.client.create, plan.create_group, self.backend.group_resource.plural)
            except ApiError as err:
                if err.status not in (400, 422):
                    raise
                return await self._group_refused(key, body, plan, err)
            if created and self.groups is not None:
                self.groups.upsert(created)
        results = await asyncio.gather(
            *(self._create(obj, rejected, deferred) for obj in plan.create),
            *(self._delete(ref) for ref in plan.delete),
            *(self._patch(ref, patch) for ref, patch in plan.patch),
            return_exceptions=True,
        )
        errors = [r for r in results if isinstance(r, BaseException)]
        status = plan.status
        if deferred:
            plan.events[:] = [e for e in (_without_refused(e, set(deferred)) for e in plan.events) if e is not None]
            self.queue.add_after(key, DEFERRED_RETRY_SECONDS)  # the group may be admitted already
        if rejected:
            status = self._rejected({**body, "status": self.current_status(key, body)}, status, rejected, plan)
        now = S.timestamp(datetime.now(timezone.utc))
        # The status and the Events go out together: a reconcile holds its worker for one round trip.
        await asyncio.gather(
            *([self._status(key, body, status)] if status is not None or key in self.unwritten else []),
            *(self._call(self.client.post_event, self._ref(body), e.type, e.reason, e.message, now)
              for e in plan.events))
        if plan.delete_job:
            meta = body["metadata"]
            await self._call(self.client.delete, TFJOB_API, PLURAL, meta["namespace"], meta["name"], "Background")
        if plan.requeue_after is not None:
            self.queue.add_after(key, plan.requeue_after + 0.05)
        if errors:
            forbidden = [e for e in errors if isinstance(e, ApiError) and e.status == 403]
            if forbidden:
                # Usually RBAC: say so on the job itself, not only in the operator's log.
                await self._call(self.client.post_event, self._ref(body), "Warning", "Forbidden",
                                 f"{forbidden[0]}; run `tfop doctor` for the missing ClusterRole rule", now)
            raise errors[0]

    async def _group_refused(self, key: JobKey, body: Mapping[str, Any], plan: Plan, err: ApiError) -> None:
        """An admission webhook or policy refused the gang's group object (Volcano's, for a queue that
        does not exist): no pods without their group; say why on the job, try again later."""
        group = plan.create_group
        why = err.message or str(err)
        message = (f"the apiserver refused {group['kind']} {group['metadata']['name']}: {why}; fix the job "
                   f"(e.g. runPolicy.schedulingPolicy.queue) or the cluster; tfop tries again every "
                   f"{GROUP_RETRY_SECONDS:.0f} s")
        current = self.current_status(key, body)
        status = dict(plan.status if plan.status is not None else current)
        status["gang"] = {**(status.get("gang") or {}), "reason": "GroupRefused", "message": message}
        if (current.get("gang") or {}).get("message") != message:
            now = S.timestamp(datetime.now(timezone.utc))
            await self._call(self.client.post_event, self._ref(body), "Warning", "GangGroupRefused", message, now)
        await self._status(key, body, status)
        self.queue.add_after(key, GROUP_RETRY_SECONDS)

    @staticmethod
    def _ref(body: Mapping[str, Any]) -> dict:
        return {"apiVersion": TFJOB_API, "kind": "TFJob", "metadata": body["metadata"]}

    async def _create(self, obj: dict, rejected: list[tuple[str, str]], deferred: list[str]) -> None:
        informer = self.pods if obj["kind"] == "Pod" else self.services
        try:
            created = await self._call(self.client.create, obj, informer.plural)
        except ApiError as err:
            if self.refused_for_admission(err):
                deferred.append(f"pod {obj['metadata']['name']}")  # created again once its group is admitted
                return
            if err.status in (400, 422):
                # The apiserver refused the pod the user's template describes: the job is invalid.
                rtype = canonical_type((obj["metadata"].get("labels") or {}).get(LABEL_TYPE, "")) or "<type>"
                why = err.message or err
                rejected.append((f"{obj['kind'].lower()} {obj['metadata']['name']}",
                                 f"spec.tfReplicaSpecs.{rtype}.template: {obj['kind']} {obj['metadata']['name']}: {why}"))
                return
            raise
        if created:
            informer.upsert(created)

    async def _delete(self, ref: Ref) -> None:
        if ref.kind == "Pod":
            self.our_deletions.setdefault((ref.namespace, self._job_of_pod(ref)), set()).add(ref.name)
        gone = await self._call(self.client.delete, ref.api_version, ref.plural, ref.namespace, ref.name)
        informer = {"Pod": self.pods, "Service": self.services}.get(ref.kind, self.groups)
        if informer is not None and gone and gone.get("kind") == ref.kind:
            if gone["metadata"].get("deletionTimestamp"):
                informer.upsert(gone)
            else:
                informer.remove(gone)

    def _job_of_pod(self, ref: Ref) -> str:
        pod = self.pods.get(ref.namespace, ref.name)
        return ((pod or {}).get("metadata", {}).get("labels") or {}).get("training.kubeflow.org/job-name", "")

    async def _patch(self, ref: Ref, patch: dict) -> None:
        patched = await self._call(self.client.merge_patch, ref.api_version, ref.plural, ref.namespace, ref.name, patch)
        if patched and self.groups is not None:
            self.groups.upsert(patched)

    def _rejected(self, body, status, rejected: list[tuple[str, str]], plan: Plan) -> dict:
        now = datetime.now(timezone.utc)
        status = dict(status if status is not None else body.get("status") or {})
        message = "the apiserver rejected objects built from the pod template; fix " + "; ".join(w for _, w in rejected)
        refused = {label for label, _ in rejected}
        plan.events[:] = [e for e in (_without_refused(e, refused) for e in plan.events) if e is not None]
        status["conditions"] = S.set_condition(list(status.get("conditions") or []), S.FAILED, True,
                                               S.REASON[S.FAILED], message, now)
        status.setdefault("completionTime", S.timestamp(now))
        plan.events.append(Event("Warning", "InvalidPodTemplate", message))
        return status

    async def _status(self, key: JobKey, body: Mapping[str, Any], status: dict | None) -> None:
        """Write the job's new status now, or hold a progress-only change back (tfop/operator/holding.py)."""
        now = asyncio.get_running_loop().time()
        if status is None:
            status = self.unwritten[key]
            first, last = self.unwritten_times[key]
        else:
            first, last = self.unwritten_times.get(key, (now, now))[0], now
        limits = hold_limits(body.get("status") or {}, status)
        if limits is not None and now - first < limits[1] and now - last < limits[0]:
            quiet, max_delay = limits
            self.unwritten[key], self.unwritten_times[key] = status, (first, last)
            self.queue.add_after(key, min(first + max_delay, last + quiet) - now + 0.01)
            return
        self.unwritten.pop(key, None)
        self.unwritten_times.pop(key, None)
        try:
            await self._write_status(key, body, status)
        except BaseException:
            self.unwritten.setdefault(key, status)  # a failed write is retried with the job
            self.unwritten_times.setdefault(key, (first, last))
            raise

    async def flush_statuses(self, timeout: float = 5.0) -> int:
        """On shutdown: write the held statuses, so `kubectl get tfjob` does not lag behind by a restart."""
        held = [(key, status) for key, status in self.unwritten.items() if key in self.jobs]
        self.unwritten.clear()
        self.unwritten_times.clear()
        results = await asyncio.wait_for(asyncio.gather(
            *(self._write_status(key, self.jobs[key], status) for key, status in held), return_exceptions=True),
            timeout)
        return sum(not isinstance(r, BaseException) for r in results)

    async def _write_status(self, key: JobKey, body: Mapping[str, Any], status: dict) -> None:
        meta = body["metadata"]
        patch = {"status": merge_patch(body.get("status") or {}, status)}
        updated = await self._call(self.client.merge_patch, TFJOB_API, PLURAL, meta["namespace"], meta["name"],
                                   patch, subresource="status")
        # Remember what we wrote: the next reconcile must not act on the old status again.
        if updated and newer(updated, self.jobs.get(key)):
            self.jobs[key] = trim_job(updated)


def _without_refused(event: Event, refused: set[str]) -> Event | None:
    """The pass's "created ...; deleted ..." Event without the objects the apiserver refused to create."""
    if event.reason not in ("SuccessfulCreate", "Reconciled"):
        return event
    parts = []
    for part in event.message.split("; "):
        if part.startswith("created "):
            kept = [n for n in part[len("created "):].split(", ") if n not in refused]
            part = "created " + ", ".join(kept) if kept else ""
        if part:
            parts.append(part)
    return Event(event.type, event.reason, "; ".join(parts)) if parts else None
