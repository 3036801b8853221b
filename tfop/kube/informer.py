"""List and watch one kind of object and keep a copy of each in memory, trimmed or whole.

An informer keeps what `trim` returns of each object (whole by default), indexes
it under the key `key_of` gives (an owner: the caller decides what that is) and
calls `on_change(key)` when an object under that key changed in a way the trimmed
copy shows, unless `quiet(new, before)` says its owner need not look (both trimmed).
It can also tell every change of every object (`on_event`).

The cache only moves forward: a copy older than the one kept, or than a
deletion seen (a tombstone), is dropped, whatever order the watch and our own
requests' answers arrive in. A deletion is told once, however it is learnt: a
watch DELETED, a relist that no longer lists the object, or our own DELETE's
answer.
"""
from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any, NamedTuple

from tfop.kube.client import LIST_PAGE_SIZE, ApiError, KubeClient
from tfop.kube.versions import later, version_of

log = logging.getLogger("tfop.informer")
Name = tuple[str, str]  # (namespace, name)
Key = Hashable  # what key_of gives: the owner whose objects are looked at together

# A tombstone stops the late answer of a request sent before the deletion; answers come within their
# timeout (30 s, a LIST's 120 s), so one older than this protects nothing. At most this many are kept
# (~0.5 KB each with their strings: 25 MB if 50,000 objects go within minutes), the oldest dropped first.
TOMBSTONE_SECONDS = 300.0
MAX_TOMBSTONES = 50_000
# Pauses between relists: doubling from the first to the longest, each spread by +-JITTER so
# informers that failed together do not return together; reset after a watch that ran this long.
BACKOFF_FIRST, BACKOFF_LONGEST, BACKOFF_JITTER = 0.8, 30.0, 0.2
HEALTHY_WATCH_SECONDS = 60.0
SHORT_WATCH_SECONDS = 1.0  # a watch ended sooner, having brought nothing, is relisted after a pause


def _uid(obj: Mapping[str, Any]) -> str:
    return (obj.get("metadata") or {}).get("uid") or ""


def _later_incarnation(kept: Mapping[str, Any], obj: Mapping[str, Any]) -> bool:
    """`kept` is a newer object of the same name than `obj` (deleted and created again since)."""
    if _uid(kept) and _uid(obj) and _uid(kept) == _uid(obj):
        return False
    a, b = version_of(kept), version_of(obj)
    if a.isdigit() and b.isdigit():
        return int(a) > int(b)
    return bool(_uid(kept) and _uid(obj))  # different uids, versions not comparable: keep what we have


def only_version_moved(kept: Mapping[str, Any], before: Mapping[str, Any] | None) -> bool:
    """The new copy equals the one it replaces but for its resourceVersion: nothing the trimmed copy keeps
    changed (a scheduler's counters, a kubelet's heartbeats, trimmed away), so its owner has nothing new
    to look at."""
    return same_but(kept, before, ())


def same_but(kept: Mapping[str, Any], before: Mapping[str, Any] | None, parts: tuple[str, ...]) -> bool:
    """The new copy equals the one it replaces but for its resourceVersion and the top-level `parts`
    (e.g. ("status",))."""
    if before is None or kept.keys() != before.keys():
        return False
    meta, was = kept["metadata"], before["metadata"]
    return (meta.keys() == was.keys() and all(meta[k] == was[k] for k in meta if k != "resourceVersion")
            and all(kept[k] == before[k] for k in kept if k != "metadata" and k not in parts))


def _nothing(_key: Key) -> None:
    return None


def no_key(_obj: Mapping[str, Any]) -> None:
    return None


class Tombstone(NamedTuple):
    version: str  # the deleted object's last resourceVersion
    uid: str
    expires: float

    def covers(self, obj: Mapping[str, Any]) -> bool:
        """`obj` is the deleted object itself (any copy of it) or an older one of the same name."""
        if _uid(obj) and self.uid and _uid(obj) == self.uid:
            return True
        a = version_of(obj)
        if a.isdigit() and self.version.isdigit():
            return int(a) <= int(self.version)
        return not a or a == self.version


class Tombstones:
    """The names deleted lately, bounded in time and number; pruned from the oldest as new ones come
    (amortised O(1) a deletion, never a scan)."""

    def __init__(self, ttl: float = TOMBSTONE_SECONDS, limit: int = MAX_TOMBSTONES,
                 clock: Callable[[], float] = time.monotonic):
        self.ttl, self.limit, self.clock = ttl, limit, clock
        self._by_name: dict[Name, Tombstone] = {}
        self._order: deque[tuple[Tombstone, Name]] = deque()  # oldest first; replaced ones are skipped

    def __len__(self) -> int:
        return len(self._by_name)

    def get(self, name: Name) -> Tombstone | None:
        tomb = self._by_name.get(name)
        if tomb is not None and tomb.expires <= self.clock():
            del self._by_name[name]
            return None
        return tomb

    def add(self, name: Name, version: str, uid: str) -> None:
        now = self.clock()
        tomb = self._by_name[name] = Tombstone(version, uid, now + self.ttl)
        self._order.append((tomb, name))
        while self._order and (self._order[0][0].expires <= now or len(self._order) > self.limit):
            oldest, old = self._order.popleft()
            if self._by_name.get(old) is oldest:  # not replaced by a later deletion of that name
                del self._by_name[old]


class Backoff:
    """Exponential pauses with jitter between relists (client-go's reflector does the same)."""

    def __init__(self, first: float = BACKOFF_FIRST, longest: float = BACKOFF_LONGEST,
                 jitter: float = BACKOFF_JITTER, healthy: float = HEALTHY_WATCH_SECONDS,
                 rand: Callable[[], float] = random.random):
        self.first, self.longest, self.jitter, self.healthy, self.rand = first, longest, jitter, healthy, rand
        self._next = first

    def after(self, ran: float) -> float:
        """The pause before the next try, after a try that ran `ran` seconds: a long, healthy one
        starts the doubling over."""
        if ran >= self.healthy:
            self._next = self.first
        delay, self._next = self._next, min(self._next * 2, self.longest)
        return delay * (1 + self.jitter * (2 * self.rand() - 1))


class Cache:
    """The objects of one kind as last known, by name and by key; the rules that keep it moving forward."""

    def __init__(self, api_version: str, kind: str, *,
                 key_of: Callable[[Mapping[str, Any]], Key | None] = no_key,
                 on_change: Callable[[Key], None] | None = None,
                 on_gone: Callable[[Key, str, dict], None] | None = None,
                 on_event: Callable[[str, dict], None] | None = None,
                 quiet: Callable[[dict, dict | None], bool] = only_version_moved,
                 trim: Callable[[Mapping[str, Any]], dict] = dict,
                 clock: Callable[[], float] = time.monotonic):
        self.api_version, self.kind, self.key_of = api_version, kind, key_of
        self.on_change = on_change or _nothing  # told the key of an object that changed
        self.quiet = quiet  # (new copy, the one it replaces): True when the key need not be told
        self.on_gone = on_gone  # told once of each deleted object: its key, its name and its last copy as kept
        self.on_event = on_event  # told of every change: ("ADDED" | "MODIFIED" | "DELETED", object as kept)
        self.trim = trim
        self.clock = clock
        self.objects: dict[Name, dict] = {}
        self.by_key: dict[Key, set[Name]] = {}
        self.tombstones = Tombstones(clock=clock)

    # -- reads ------------------------------------------------------------------
    def for_key(self, key: Key) -> list[dict]:
        """The objects kept under `key` (key_of's answer for each)."""
        return [self.objects[n] for n in self.by_key.get(key, ()) if n in self.objects]

    def get(self, namespace: str, name: str) -> dict | None:
        return self.objects.get((namespace, name))

    # -- writes (from watch events and relists, and from our own API responses) --------
    def upsert(self, obj: Mapping[str, Any], tell: bool = True) -> None:
        """Keep `obj` if it is newer than what we have; unless told not to (our own create's answer), or
        only its version moved, its key is told (on_change)."""
        meta = obj["metadata"]
        name = (meta.get("namespace", ""), meta["name"])
        current = self.objects.get(name)
        if not version_of(obj):
            self._mark_deleting(name, current, obj)
            return
        if not later(obj, current):
            return  # older than what we have, or the same version again (our create's answer, then its ADDED)
        tomb = self.tombstones.get(name)
        if tomb is not None and tomb.covers(obj):
            return  # deleted since: a late answer must not bring it back
        if current is not None and _uid(current) and _uid(obj) and _uid(current) != _uid(obj):
            self._forget(name, current)  # deleted and created again unseen (a relist tells): the old one is gone
            self._deleted(name, current)
            current = None
        obj = dict(obj, apiVersion=obj.get("apiVersion") or self.api_version, kind=obj.get("kind") or self.kind)
        kept = self.objects[name] = self.trim(obj)
        key = self.key_of(obj)
        if key:
            self.by_key.setdefault(key, set()).add(name)
        if self.on_event is not None:
            self.on_event("ADDED" if current is None else "MODIFIED", kept)
        if key and tell and not self.quiet(kept, current):
            self.on_change(key)

    def _mark_deleting(self, name: Name, current: dict | None, obj: Mapping[str, Any]) -> None:
        """A copy without a version (see versions.newer()) can tell one thing only: the object we have is being
        deleted. Never more: the object itself, or its deletion, comes with the watch."""
        stamp = obj["metadata"].get("deletionTimestamp")
        if current is None or not stamp or current["metadata"].get("deletionTimestamp") or _uid(current) != _uid(obj):
            return
        kept = self.objects[name] = {**current, "metadata": {**current["metadata"], "deletionTimestamp": stamp}}
        if self.on_event is not None:
            self.on_event("MODIFIED", kept)
        key = self.key_of(kept)
        if key:
            self.on_change(key)

    def remove(self, obj: Mapping[str, Any]) -> None:
        """`obj` was deleted: a watch DELETED, a relist that no longer lists it, or our DELETE's answer."""
        name = (obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
        current = self.objects.get(name)
        if current is not None and _later_incarnation(current, obj):
            current = None  # a late DELETED of the object this name had before: the new one stays
        tomb = self.tombstones.get(name)
        if tomb is not None and tomb.covers(obj):
            return  # told already (our DELETE's answer came first, or this is the old object's DELETED)
        if current is not None:
            self._forget(name, current)
        self._deleted(name, obj if version_of(obj) or current is None else current)

    def _forget(self, name: Name, obj: Mapping[str, Any]) -> None:
        self.objects.pop(name, None)
        key = self.key_of(obj)
        names = self.by_key.get(key) if key else None
        if names is not None:
            names.discard(name)
            if not names:
                del self.by_key[key]

    def _deleted(self, name: Name, obj: Mapping[str, Any]) -> None:
        """Remember the deletion (a tombstone) and tell it, once."""
        self.tombstones.add(name, version_of(obj), _uid(obj))
        key = self.key_of(obj)
        if (key and self.on_gone is not None) or self.on_event is not None:
            gone = dict(obj, apiVersion=obj.get("apiVersion") or self.api_version, kind=obj.get("kind") or self.kind)
            kept = self.trim(gone)
            if key and self.on_gone is not None:
                self.on_gone(key, name[1], kept)
            if self.on_event is not None:
                self.on_event("DELETED", kept)
        if key:
            self.on_change(key)

    def handle_event(self, event: Mapping[str, Any], version: str) -> str | None:
        """Apply one watch event; the version to resume from, or None to relist (ERROR: e.g. 410 Gone)."""
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            return None
        version = version_of(obj) or version
        if kind == "DELETED":
            self.remove(obj)
        elif kind in ("ADDED", "MODIFIED"):
            self.upsert(obj)
        return version  # BOOKMARK: only the version

    def absorb(self, items: Iterable[Mapping[str, Any]]) -> set[Name]:
        """A page of a listing; the names it holds."""
        names = set()
        for item in items:
            names.add((item["metadata"].get("namespace", ""), item["metadata"]["name"]))
            self.upsert(item)
        return names

    def sweep(self, namespace: str | None, listed: set[Name], version: str) -> None:
        """After a complete listing at `version`: what it no longer holds was deleted. An object newer
        than the listing (our own create's answer) stays: the watch from `version` tells its fate."""
        for name, obj in list(self.objects.items()):
            if name in listed or (namespace is not None and name[0] != namespace):
                continue
            mine = version_of(obj)
            if mine.isdigit() and version.isdigit() and int(mine) > int(version):
                continue
            self.remove(obj)


class Informer(Cache):
    """A Cache filled by listing and watching, in each namespace (None: all of them).

    Informer(client, "v1", "pods", "Pod", ["ns"], label_selector="app=x", key_of=..., on_change=...);
    every option is Cache's or says what to list: label_selector, field_selector, page_size, optional
    (and `refusals`, a set optional informers of one purpose share, so a refusal is said once for all).
    """

    def __init__(self, client: KubeClient, api_version: str, plural: str, kind: str,
                 namespaces: Iterable[str | None] = (None,), *, label_selector: str | None = None,
                 field_selector: str | None = None, page_size: int = LIST_PAGE_SIZE, optional: bool = False,
                 refusals: set | None = None,
                 **cache_options: Any):
        super().__init__(api_version, kind, **cache_options)
        self.client, self.plural, self.label_selector, self.page_size = client, plural, label_selector, page_size
        self.namespaces = list(namespaces)
        self.field_selector = field_selector
        # An optional informer (what only explains a wait, e.g. nodes) says once that it may not list,
        # then keeps trying quietly; `denied` holds the refusal until a listing succeeds.
        self.optional = optional
        self.refusals = set() if refusals is None else refusals  # (status, plural, where) said already
        self.denied: ApiError | None = None
        self.synced = asyncio.Event()
        self._pending_syncs = len(self.namespaces)
        self.last_contact = self.clock()  # a listing or a watch event (bookmarks too) last arrived then

    async def run(self) -> None:
        await asyncio.gather(*(self._run_namespace(ns) for ns in self.namespaces))

    async def _run_namespace(self, namespace: str | None) -> None:
        backoff, unsynced, where = Backoff(), True, namespace or "all namespaces"
        while True:
            started = self.clock()
            try:
                version = await self._relist(namespace)
                if unsynced:
                    unsynced = False
                    self._mark_synced()
                started = self.clock()
                why = await self._follow(namespace, version)
                delay = backoff.after(self.clock() - started)
                log.info("%s watch (%s) %s, relisting in %.1fs", self.plural, where, why, delay)
            except asyncio.CancelledError:
                raise
            except ApiError as err:
                delay = backoff.after(self.clock() - started)
                if err.status not in (403, 404):
                    log.warning("%s watch (%s) failed, relisting in %.1fs: %s", self.plural, where, delay, err)
                else:
                    # A missing CRD or RBAC rule must not stall the rest: count as synced (empty), say it.
                    level = logging.ERROR
                    if self.optional:  # said once; a resource not installed (404) is no error for it
                        said = (err.status, self.plural, where) in self.refusals
                        self.refusals.add((err.status, self.plural, where))
                        level = (logging.DEBUG if self.denied is not None or said
                                 else logging.INFO if err.status == 404 else logging.WARNING)
                    self.denied = err
                    log.log(level, "cannot list %s (%s): %s; retrying in %.1fs (run `tfop doctor`)", self.plural,
                            where, err, delay)
                    if unsynced:
                        unsynced = False
                        self._mark_synced()
            except Exception as err:  # noqa: BLE001 - a watch must survive anything and relist
                delay = backoff.after(self.clock() - started)
                log.warning("%s watch (%s) failed, relisting in %.1fs: %s", self.plural, where, delay, err)
            await asyncio.sleep(delay)

    async def _follow(self, namespace: str | None, version: str) -> str:
        """Watch from `version`, resuming each time the apiserver ends a watch; why a relist is needed.
        The apiserver also ends the watch of a client that reads too slowly (a burst's thousands of pod
        events): resumed from its last event as any other, a relist (every object again) would only slow
        the reader more. A watch that ends at once and brings nothing is a broken one: relisted."""
        while True:
            began = self.clock()
            resumed = await self._watch(namespace, version)
            if not resumed:  # 410 Gone, or no version to resume from
                return "expired"
            if resumed == version and self.clock() - began < SHORT_WATCH_SECONDS:
                return "ended at once"
            version = resumed

    def _mark_synced(self) -> None:
        self._pending_syncs -= 1
        if self._pending_syncs == 0:
            self.synced.set()

    async def _relist(self, namespace: str | None) -> str:
        """List page by page, then sweep; the listing's version, to watch from."""
        listed: set[Name] = set()
        version = ""
        async for page, first in self.client.list_pages(self.api_version, self.plural, namespace,
                                                         self.label_selector, self.page_size, **self._fields()):
            if first:  # a new listing (or one started over): the earlier pages' snapshot is dropped
                listed, version = set(), version_of(page)
            listed |= self.absorb(page.get("items") or [])
        self.sweep(namespace, listed, version)
        self.denied = None
        self.refusals.difference_update({said for said in self.refusals
                                         if said[1:] == (self.plural, namespace or "all namespaces")})
        self.last_contact = self.clock()
        return version

    def _fields(self) -> dict:
        return {"field_selector": self.field_selector} if self.field_selector else {}

    async def _watch(self, namespace: str | None, version: str) -> str | None:
        """Follow the watch; the version to resume from, or None to relist."""
        try:
            async for event in self.client.watch(self.api_version, self.plural, namespace, version,
                                                 self.label_selector, **self._fields()):
                self.last_contact = self.clock()
                handled = self.handle_event(event, version)
                if handled is None:
                    return None
                version = handled
        except ApiError as err:
            if err.status == 410:
                return None
            raise
        return version
