"""Watchers that record when each object appears and each pod runs, the census of a row's objects,
and the writes of other components beside a row."""
from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field

import aiohttp

from tfop.api.constants import LABEL_JOB
from tfop.kube.client import ApiError, KubeClient


@dataclass
class ObjectClock:
    """Watches one kind of object in one namespace (a list, then a watch from its resourceVersion,
    started before the burst) and records when each object was first seen: from then on it exists
    for every other component. Runs until cancelled."""
    client: KubeClient
    namespace: str
    api_version: str = "v1"
    plural: str = "pods"
    created: dict = field(default_factory=dict)  # name -> (job, monotonic time first seen)
    ready: asyncio.Event = field(default_factory=asyncio.Event)

    def see(self, obj: dict) -> None:
        meta = obj.get("metadata") or {}
        if meta.get("name") not in self.created:
            self.created[meta.get("name")] = ((meta.get("labels") or {}).get(LABEL_JOB, ""), time.monotonic())

    async def relist(self) -> str:
        listing = await self.client.list(self.api_version, self.plural, self.namespace)
        for obj in listing.get("items") or []:
            self.see(obj)
        return listing["metadata"]["resourceVersion"]

    async def run(self) -> None:
        version = await self.relist()
        self.ready.set()
        while True:
            try:
                async for ev in self.client.watch(self.api_version, self.plural, self.namespace, version,
                                                  timeout_seconds=120):
                    obj = ev.get("object") or {}
                    if ev.get("type") == "ERROR":
                        raise ApiError(410, obj, "WATCH", self.plural)
                    version = (obj.get("metadata") or {}).get("resourceVersion", version)
                    if ev.get("type") in ("ADDED", "MODIFIED"):
                        self.see(obj)
            except (ApiError, aiohttp.ClientError, asyncio.TimeoutError):
                # Expired (410) or dropped: what happened meanwhile comes with the new listing.
                version = await self.relist()


@dataclass
class PodClock(ObjectClock):
    """The pods' clock: when each was first seen (created) and first seen Running."""
    expected: int = 0
    running: dict = field(default_factory=dict)  # pod name -> (job, monotonic time)

    def see(self, pod: dict) -> None:
        super().see(pod)
        meta = pod.get("metadata") or {}
        name = meta.get("name")
        if name not in self.running and (pod.get("status") or {}).get("phase") == "Running":
            self.running[name] = ((meta.get("labels") or {}).get(LABEL_JOB, ""), time.monotonic())

    def done(self) -> bool:
        return len(self.running) >= self.expected


def per_job(seen: dict) -> dict[str, tuple[int, float]]:
    """{name: (job, time)} -> {job: (how many, the last one's time)}."""
    out: dict[str, tuple[int, float]] = {}
    for job, t in seen.values():
        n, last = out.get(job, (0, t))
        out[job] = (n + 1, max(last, t))
    return out


class Census:
    """The clocks of every kind of object the jobs should have (pods, services, group objects):
    when did the last expected object appear?"""

    def __init__(self, clocks: dict[str, ObjectClock], expected: Counter):
        self.clocks, self.expected = clocks, expected  # kind -> clock, kind -> how many

    def complete(self) -> bool:
        return all(len(self.clocks[k].created) >= n for k, n in self.expected.items())

    def last_seen(self) -> float | None:
        """Monotonic time the last expected object was first seen; None while some are missing."""
        if not self.complete():
            return None
        return max((t for k in self.expected for _, t in self.clocks[k].created.values()), default=None)

    async def start(self) -> list[asyncio.Task]:
        tasks = [asyncio.create_task(c.run()) for c in self.clocks.values()]
        ready = asyncio.ensure_future(asyncio.gather(*(c.ready.wait() for c in self.clocks.values())))
        await asyncio.wait([ready, *tasks], return_when=asyncio.FIRST_COMPLETED)
        failed = [t for t in tasks if t.done()]  # a listing failed before its watch started
        if failed:
            ready.cancel()
            await stop(tasks)
            failed[0].result()
        return tasks


async def stop(tasks: list[asyncio.Task]) -> None:
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def until(predicate, timeout: float, poll: float = 0.02) -> bool:
    """Wait until predicate() is true (False on timeout). The times measured are the watchers'
    own, so polling only decides when the benchmark goes on."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(poll)
    return True


class BesideWrites:
    """`rate` merge patches a second on ConfigMaps of a namespace of its own, while running: work for the
    apiserver and etcd that tfop never sees, to run a row on a control plane as busy as another row's."""

    OBJECTS = 50

    def __init__(self, client: KubeClient, namespace: str, rate: float):
        self.client, self.namespace, self.rate = client, namespace, rate
        self.sent = 0
        self._task: asyncio.Task | None = None
        self._pending: set[asyncio.Task] = set()

    async def start(self) -> None:
        await self.client.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.namespace}},
                                 "namespaces")
        for i in range(self.OBJECTS):
            await self.client.create({"apiVersion": "v1", "kind": "ConfigMap", "data": {"n": "0"},
                                      "metadata": {"name": f"load-{i}", "namespace": self.namespace}}, "configmaps")
        self._task = asyncio.create_task(self._write())

    async def _write(self) -> None:
        began = time.monotonic()
        while True:
            await asyncio.sleep(max(0.0, began + self.sent / self.rate - time.monotonic()))
            n = self.sent
            patch = {"data": {"n": str(n)}, "metadata": {"labels": {"n": str(n)}}}
            task = asyncio.create_task(self.client.merge_patch("v1", "configmaps", self.namespace,
                                                               f"load-{n % self.OBJECTS}", patch))
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)
            self.sent += 1

    async def stop(self) -> None:
        await stop([t for t in (self._task, *self._pending) if t is not None])
        await self.client.delete("v1", "namespaces", None, self.namespace)


def rows_in_the_way(namespaces: list[str], run_id: str) -> list[str]:
    """Benchmark namespaces of another run: a benchmark running beside this one on the cluster, or a row
    whose deletion has not finished. A row beside either measures its work too (the freed pods of a
    namespace being deleted wake every waiting gang)."""
    return sorted(ns for ns in namespaces if ns.startswith("bench-") and not ns.endswith(f"-{run_id}"))
