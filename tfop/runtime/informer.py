"""Watch one kind of child object by label and keep a trimmed copy of each in memory.

Only the fields a reconcile reads are kept (tfop/kube/trim.py: metadata and
the parts of the status it reads, never the pod spec), so thousands of pods cost
little memory. Every change wakes the
reconcile of the job the object belongs to.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable, Iterable, Mapping

from tfop.api.constants import LABEL_JOB
from tfop.kube.client import ApiError, KubeClient
from tfop.kube.trim import trim_child
from tfop.runtime.jobs import JobKey

log = logging.getLogger("tfop.informer")


def newer(candidate: Mapping[str, Any], current: Mapping[str, Any] | None) -> bool:
    """resourceVersions are opaque, but etcd's are integers: compare them when they are."""
    if current is None:
        return True
    a, b = candidate["metadata"].get("resourceVersion", ""), current["metadata"].get("resourceVersion", "")
    if a.isdigit() and b.isdigit():
        return int(a) >= int(b)
    return True


def _same_version(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return a["metadata"].get("resourceVersion") == b["metadata"].get("resourceVersion")


def default_key(obj: Mapping[str, Any]) -> JobKey | None:
    meta = obj["metadata"]
    job = (meta.get("labels") or {}).get(LABEL_JOB)
    return (meta.get("namespace", ""), job) if job else None


class Informer:
    def __init__(self, client: KubeClient, api_version: str, plural: str, kind: str,
                 namespaces: Iterable[str | None], label_selector: str | None,
                 on_change: Callable[[JobKey], None], keep_spec: bool = False,
                 key_of: Callable[[Mapping[str, Any]], JobKey | None] = default_key,
                 on_gone: Callable[[JobKey, str], None] | None = None):
        self.client, self.api_version, self.plural, self.kind = client, api_version, plural, kind
        self.namespaces = list(namespaces)
        self.label_selector, self.on_change, self.keep_spec, self.key_of = label_selector, on_change, keep_spec, key_of
        self.on_gone = on_gone  # told of each object a watch DELETED event removes
        self.objects: dict[tuple[str, str], dict] = {}
        self.by_job: dict[JobKey, set[tuple[str, str]]] = {}
        # Deleted names and their last resourceVersion: a late API response must not resurrect them.
        self.tombstones: dict[tuple[str, str], dict] = {}
        self.synced = asyncio.Event()
        self._pending_syncs = len(self.namespaces)

    # -- reads ------------------------------------------------------------------
    def for_job(self, key: JobKey) -> list[dict]:
        return [self.objects[n] for n in self.by_job.get(key, ()) if n in self.objects]

    def get(self, namespace: str, name: str) -> dict | None:
        return self.objects.get((namespace, name))

    # -- writes (from watch events, and from our own API responses) --------------
    def upsert(self, obj: Mapping[str, Any]) -> None:
        meta = obj["metadata"]
        name = (meta.get("namespace", ""), meta["name"])
        if not newer(obj, self.objects.get(name)):
            return
        tomb = self.tombstones.get(name)
        if tomb is not None and (not newer(obj, tomb) or _same_version(obj, tomb)):
            return
        self.tombstones.pop(name, None)
        obj = dict(obj, apiVersion=obj.get("apiVersion") or self.api_version, kind=obj.get("kind") or self.kind)
        self.objects[name] = trim_child(obj, self.keep_spec)
        key = self.key_of(obj)
        if key:
            self.by_job.setdefault(key, set()).add(name)
            self.on_change(key)

    def remove(self, obj: Mapping[str, Any], seen_by_watch: bool = False) -> None:
        meta = obj["metadata"]
        name = (meta.get("namespace", ""), meta["name"])
        known = self.objects.pop(name, None)
        self.tombstones[name] = {"metadata": {"resourceVersion": meta.get("resourceVersion", "")}}
        key = self.key_of(known or obj)
        if key and seen_by_watch and self.on_gone is not None:
            self.on_gone(key, meta["name"])
        if key:
            names = self.by_job.get(key)
            if names is not None:
                names.discard(name)
                if not names:
                    del self.by_job[key]
            self.on_change(key)

    # -- the watch loop -----------------------------------------------------------
    async def run(self) -> None:
        await asyncio.gather(*(self._run_namespace(ns) for ns in self.namespaces))

    async def _run_namespace(self, namespace: str | None) -> None:
        first = True
        while True:
            try:
                version = await self._relist(namespace)
                if first:
                    first = False
                    self._mark_synced()
                while version:
                    version = await self._watch(namespace, version)
            except asyncio.CancelledError:
                raise
            except ApiError as err:
                if err.status not in (403, 404):
                    log.warning("%s watch (%s) failed, relisting in 1s: %s", self.plural, namespace or "all", err)
                    await asyncio.sleep(1)
                    continue
                # A missing CRD or RBAC rule must not stall every other job: count as synced (empty), say it.
                log.error("cannot list %s (%s): %s; retrying in 10s (run `tfop doctor`)", self.plural,
                          namespace or "all namespaces", err)
                if first:
                    first = False
                    self._mark_synced()
                await asyncio.sleep(10)
            except Exception as err:  # noqa: BLE001 - a watch must survive anything and relist
                log.warning("%s watch (%s) failed, relisting in 1s: %s", self.plural, namespace or "all", err)
                await asyncio.sleep(1)

    def _mark_synced(self) -> None:
        self._pending_syncs -= 1
        if self._pending_syncs == 0:
            self.synced.set()

    async def _relist(self, namespace: str | None) -> str:
        listing = await self.client.list(self.api_version, self.plural, namespace, self.label_selector)
        seen = set()
        self.tombstones.clear()
        for item in listing.get("items") or []:
            item.setdefault("apiVersion", self.api_version)
            item.setdefault("kind", self.kind)
            seen.add((item["metadata"].get("namespace", ""), item["metadata"]["name"]))
            self.upsert(item)
        for name, obj in list(self.objects.items()):
            if name not in seen and (namespace is None or name[0] == namespace):
                self.remove(obj)
        return listing["metadata"]["resourceVersion"]

    async def _watch(self, namespace: str | None, version: str) -> str | None:
        """Follow the watch; the version to resume from, or None to relist."""
        try:
            async for event in self.client.watch(self.api_version, self.plural, namespace, version,
                                                 self.label_selector):
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    return None  # 410 Gone and friends: our version is too old
                version = obj.get("metadata", {}).get("resourceVersion", version)
                if kind == "BOOKMARK":
                    continue
                if kind == "DELETED":
                    self.remove(obj, seen_by_watch=True)
                else:
                    self.upsert(obj)
        except ApiError as err:
            if err.status == 410:
                return None
            raise
        return version
