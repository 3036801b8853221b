"""Apply a Plan's object writes and report every one that did not succeed; post its Events.

Nothing here decides what a failure means for the job: each becomes a
FailedWrite (the apiserver's code and words) for the core's conclude().
"""
from __future__ import annotations

import asyncio
from datetime import datetime, timezone
from typing import Any, Awaitable, Callable, Mapping

from tfop.api import conditions
from tfop.api.constants import KIND
from tfop.core.outcomes import FailedWrite
from tfop.core.plan import Event, Plan, Ref
from tfop.kube.client import ApiError, KubeClient
from tfop.runtime.informer import Informer
from tfop.runtime.jobs import JobRecord
from tfop.runtime.status_writer import TFJOB_API


def failed_write(verb: str, kind: str, name: str, err: BaseException) -> FailedWrite:
    if isinstance(err, ApiError):
        return FailedWrite(verb, kind, name, err.status, err.message, err.request)
    return FailedWrite(verb, kind, name, 0, str(err) or type(err).__name__)


class Applier:
    def __init__(self, client: KubeClient, call: Callable[..., Awaitable[Any]], pods: Informer,
                 services: Informer, groups: Informer | None):
        self.client, self.call = client, call
        self.informers = {"Pod": pods, "Service": services}
        self.groups = groups

    async def write_objects(self, record: JobRecord, plan: Plan) -> list[FailedWrite]:
        """The group object first and alone (the scheduler must know the gang before any pod), then the
        pods, services, deletions and patches together. No child is written when the group was not."""
        if plan.create_group is not None:
            failure = await self._create(plan.create_group, self.groups)
            if failure is not None:
                return [failure]
        results = await asyncio.gather(
            *(self._create(obj, self.informers[obj["kind"]]) for obj in plan.create),
            *(self._delete(record, ref) for ref in plan.delete),
            *(self._patch(ref, patch) for ref, patch in plan.patch))
        return [r for r in results if r is not None]

    async def _create(self, obj: dict, informer: Informer) -> FailedWrite | None:
        try:
            created = await self.call(self.client.create, obj, informer.plural)
        except Exception as err:  # noqa: BLE001 - reported, the core decides
            return failed_write("create", obj["kind"], obj["metadata"]["name"], err)
        if created:
            informer.upsert(created)
        return None

    async def _delete(self, record: JobRecord, ref: Ref) -> FailedWrite | None:
        if ref.kind == "Pod":
            record.deleting.add(ref.name)
        try:
            gone = await self.call(self.client.delete, ref.api_version, ref.plural, ref.namespace, ref.name)
        except Exception as err:  # noqa: BLE001
            return failed_write("delete", ref.kind, ref.name, err)
        informer = self.informers.get(ref.kind, self.groups)
        if informer is not None and gone and gone.get("kind") == ref.kind:
            if gone["metadata"].get("deletionTimestamp"):
                informer.upsert(gone)
            else:
                informer.remove(gone)
        return None

    async def _patch(self, ref: Ref, patch: dict) -> FailedWrite | None:
        try:
            patched = await self.call(self.client.merge_patch, ref.api_version, ref.plural, ref.namespace,
                                      ref.name, patch)
        except Exception as err:  # noqa: BLE001
            return failed_write("patch", ref.kind, ref.name, err)
        if patched and self.groups is not None:
            self.groups.upsert(patched)
        return None

    async def post_events(self, body: Mapping[str, Any], events: list[Event]) -> None:
        now = conditions.timestamp(datetime.now(timezone.utc))
        involved = {"apiVersion": TFJOB_API, "kind": KIND, "metadata": body["metadata"]}
        await asyncio.gather(*(self.call(self.client.post_event, involved, e.type, e.reason, e.message, now)
                               for e in events))
