"""Write a job's status once per pass and only when it changed, or hold a progress-only change back."""
from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from tfop.api.constants import GROUP, PLURAL, STORAGE_VERSION
from tfop.kube.client import KubeClient
from tfop.runtime.holding import hold_limits
from tfop.runtime.jobs import JobKey, JobRecord
from tfop.runtime.trim import trim_job

TFJOB_API = f"{GROUP}/{STORAGE_VERSION}"


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


class StatusWriter:
    def __init__(self, client: KubeClient, call: Callable[..., Awaitable[Any]],
                 look_again: Callable[[JobKey, float], None]):
        self.client, self.call, self.look_again = client, call, look_again

    async def write(self, key: JobKey, record: JobRecord, status: dict | None) -> None:
        """Write `status` (None: the held one, if any) now, or hold it (tfop/runtime/holding.py)."""
        now = asyncio.get_running_loop().time()
        first = record.held_first if record.held is not None else now
        last = now
        if status is None:
            if record.held is None:
                return
            status, last = record.held, record.held_last
        limits = hold_limits(record.body.get("status") or {}, status)
        if limits is not None and now - first < limits[1] and now - last < limits[0]:
            quiet, max_delay = limits
            record.held, record.held_first, record.held_last = status, first, last
            self.look_again(key, min(first + max_delay, last + quiet) - now + 0.01)
            return
        record.release()
        try:
            await self.patch(record, status)
        except BaseException:
            if record.held is None:  # a failed write is retried with the job
                record.held, record.held_first, record.held_last = status, first, last
            raise

    async def patch(self, record: JobRecord, status: dict) -> None:
        meta = record.body["metadata"]
        patch = {"status": merge_patch(record.body.get("status") or {}, status)}
        updated = await self.call(self.client.merge_patch, TFJOB_API, PLURAL, meta["namespace"], meta["name"],
                                  patch, subresource="status")
        # Remember what we wrote: the next reconcile must not act on the old status again.
        if updated:
            record.take_written(trim_job(updated))

    async def flush(self, records: list[JobRecord], timeout: float) -> int:
        """On shutdown: write every held status, so `kubectl get tfjob` does not lag behind by a restart."""
        held = [(record, record.release()) for record in records]
        writes = [self.patch(record, status) for record, status in held if status is not None]
        results = await asyncio.wait_for(asyncio.gather(*writes, return_exceptions=True), timeout)
        return sum(not isinstance(r, BaseException) for r in results)
