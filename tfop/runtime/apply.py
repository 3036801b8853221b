"""Apply a Plan's object writes and report every one that did not succeed; post its Events.

Nothing here decides what a failure means for the job: each becomes a
FailedWrite (the apiserver's code and words) for the core's conclude().
"""
from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from tfop.api import conditions
from tfop.api.constants import KIND
from tfop.core.outcomes import NOT_ATTEMPTED, FailedWrite
from tfop.core.plan import Event, Plan, Ref, create_batches
from tfop.kube.client import ApiError, KubeClient
from tfop.kube.events import EventRecorder
from tfop.kube.informer import Informer
from tfop.runtime.jobs import JobRecord
from tfop.runtime.status_writer import TFJOB_API
from tfop.runtime.trim import trim_child


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
        self.events = EventRecorder(client, call)

    async def write_objects(self, record: JobRecord, plan: Plan) -> list[FailedWrite]:
        """The group object first and alone (the scheduler must know the gang before any pod), then the
        pods and services in create_batches() beside the deletions and patches. No child is written
        when the group was not; no batch after one with a failure (those are reported NOT_ATTEMPTED)."""
        if plan.create_group is not None:
            assert self.groups is not None  # a group is planned only for a backend whose groups are watched
            failure = await self._create(plan.create_group, self.groups)
            if failure is not None:
                return [failure]
        created, others = await asyncio.gather(
            self._create_in_batches(plan.create, plan.create_together),
            asyncio.gather(*(self._delete(record, ref) for ref in plan.delete),
                           *(self._delete(record, ref, grace_period=0) for ref in plan.force_delete),
                           *(self._patch(ref, patch) for ref, patch in plan.patch)))
        return [*created, *(r for r in others if r is not None)]

    async def _create_in_batches(self, objects: list[dict], together: bool) -> list[FailedWrite]:
        failures: list[FailedWrite] = []
        done = 0
        for batch in create_batches(objects, together=together):
            results = await asyncio.gather(*(self._create(obj, self.informers[obj["kind"]]) for obj in batch))
            failures += [r for r in results if r is not None]
            done += len(batch)
            if failures:
                break
        return failures + [FailedWrite("create", o["kind"], o["metadata"]["name"], NOT_ATTEMPTED, "not attempted")
                           for o in objects[done:]]

    async def _create(self, obj: dict, informer: Informer) -> FailedWrite | None:
        try:
            created = await self.call(self.client.create, obj, informer.plural)
        except Exception as err:  # noqa: BLE001 - reported, the core decides
            failure = failed_write("create", obj["kind"], obj["metadata"]["name"], err)
            if failure.code == 409:  # whose is the name? read it back for the core to say
                failure = replace(failure, holder=await self._holder(obj, informer.plural))
            return failure
        # No pass for a child's own answer: the pass that created it settles on it (a job with more to
        # create asks for the next pass itself; tests/core_fixtures.assert_settles).
        informer.upsert(created, tell=False)
        return None

    async def _holder(self, obj: dict, plural: str) -> dict | None:
        meta = obj["metadata"]
        try:
            found = await self.call(self.client.get, obj["apiVersion"], plural, meta["namespace"], meta["name"])
        except Exception:  # noqa: BLE001 - the core says the name is taken, without whose
            return None
        return trim_child(found) if found else None

    async def _delete(self, record: JobRecord, ref: Ref, grace_period: int | None = None) -> FailedWrite | None:
        if ref.kind == "Pod":
            record.deleting.add(ref.name)
        try:
            gone = await self.call(self.client.delete, ref.api_version, ref.plural, ref.namespace, ref.name,
                                   grace_period=grace_period)
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
        informer = self.informers.get(ref.kind, self.groups)
        if patched and informer is not None:
            informer.upsert(patched)
        return None

    async def post_events(self, body: Mapping[str, Any], events: list[Event]) -> None:
        now = conditions.timestamp(datetime.now(UTC))
        involved = {"apiVersion": TFJOB_API, "kind": KIND, "metadata": body["metadata"]}
        await self.events.post(involved, events, now)
