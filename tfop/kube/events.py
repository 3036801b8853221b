"""Events on an object, posted the way client-go's event recorder posts them: repeats counted, floods dropped.

An Event identical to one posted recently (same object uid, type, reason and
message) is not posted again: the posted one gets `count + n` and a new
`lastTimestamp` through a merge patch, so an object that fails the same way every
time keeps one Event. When that Event has expired (404: the apiserver keeps
Events for an hour) a new one is posted. Every object has a token bucket (burst 25,
one token back every 5 minutes): an Event that finds it empty is dropped, so
one object in a loop cannot fill etcd with Events. Nothing here raises into the
caller: a refused write is a warning, as a missing Event costs nothing but
information.

EventBook is the pure part (the caches and buckets, with an injectable clock);
EventRecorder does the writes.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from tfop.kube.client import KubeClient

log = logging.getLogger("tfop.events")

# client-go's sizes: its LRU caches hold 4096 entries, its spam filter allows a burst of 25 Events
# per object and then one every 5 minutes.
CACHE_ENTRIES = 4096
SPAM_BURST = 25
SPAM_REFILL_SECONDS = 300.0

K = TypeVar("K", bound=Hashable)


class Event(Protocol):
    """What to post: an Event's type (Normal, Warning), reason and message (read-only: the core's
    frozen dataclass is one)."""
    @property
    def type(self) -> str: ...
    @property
    def reason(self) -> str: ...
    @property
    def message(self) -> str: ...

V = TypeVar("V")


class Lru(Generic[K, V]):
    """A mapping that forgets its least recently used entry beyond `size`."""

    def __init__(self, size: int):
        self.size = size
        self._items: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.size:
            self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items


@dataclass
class TokenBucket:
    tokens: float
    stamp: float  # clock time of the last refill

    def take(self, now: float, burst: int, refill_seconds: float) -> bool:
        """One token if there is one; the tokens grow back one per `refill_seconds`, up to `burst`."""
        self.tokens = min(float(burst), self.tokens + max(now - self.stamp, 0.0) / refill_seconds)
        self.stamp = max(now, self.stamp)
        if self.tokens < 1.0 - 1e-9:  # refills added in pieces may fall short of 1 by a rounding error
            return False
        self.tokens = max(self.tokens - 1.0, 0.0)
        return True


@dataclass(frozen=True)
class EventKey:
    """What makes two Events the same one (the source is always this operator)."""
    uid: str
    type: str
    reason: str
    message: str


@dataclass(frozen=True)
class Posted:
    name: str  # the Event object's name, to patch it
    count: int


class EventBook:
    """What the recorder remembers: every object's token bucket and the Events it posted lately."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, entries: int = CACHE_ENTRIES,
                 burst: int = SPAM_BURST, refill_seconds: float = SPAM_REFILL_SECONDS):
        self.clock, self.burst, self.refill_seconds = clock, burst, refill_seconds
        self.buckets: Lru[str, TokenBucket] = Lru(entries)
        self.posted: Lru[EventKey, Posted] = Lru(entries)

    def admit(self, uid: str, events: Sequence[Event]) -> tuple[dict[EventKey, int], int]:
        """Each Event takes a token from its object's bucket. Returns how many of each distinct Event
        got one (in the order first seen: one write each) and how many were dropped."""
        now = self.clock()
        bucket = self.buckets.get(uid)
        if bucket is None:
            bucket = TokenBucket(float(self.burst), now)
            self.buckets.put(uid, bucket)
        admitted: dict[EventKey, int] = {}
        dropped = 0
        for event in events:
            if not bucket.take(now, self.burst, self.refill_seconds):
                dropped += 1
                continue
            key = EventKey(uid, event.type, event.reason, event.message)
            admitted[key] = admitted.get(key, 0) + 1
        return admitted, dropped

    def last_posted(self, key: EventKey) -> Posted | None:
        return self.posted.get(key)

    def remember(self, key: EventKey, posted: Posted) -> None:
        self.posted.put(key, posted)


def involved_uid(involved: Mapping[str, Any]) -> str:
    meta = involved["metadata"]
    return meta.get("uid") or f"{meta['namespace']}/{meta['name']}"


class EventRecorder:
    def __init__(self, client: KubeClient, call: Callable[..., Awaitable[Any]], book: EventBook | None = None):
        self.client, self.call = client, call
        self.book = book or EventBook()

    async def post(self, involved: Mapping[str, Any], events: Sequence[Event], now: str) -> None:
        """Record `events` on `involved`: one write per distinct Event, at most."""
        if not events:
            return
        admitted, dropped = self.book.admit(involved_uid(involved), events)
        if dropped:
            meta = involved["metadata"]
            log.debug("dropped %d Event(s) on %s/%s: its rate limit is spent", dropped, meta["namespace"],
                      meta["name"])
        await asyncio.gather(*(self._record(involved, key, n, now) for key, n in admitted.items()))

    async def _record(self, involved: Mapping[str, Any], key: EventKey, n: int, now: str) -> None:
        try:
            posted = await self._write(involved, key, n, now)
        except Exception as err:  # noqa: BLE001 - an Event never fails its caller
            meta = involved["metadata"]
            log.warning("could not post event %s on %s/%s: %s", key.reason, meta["namespace"], meta["name"], err)
            return
        self.book.remember(key, posted)

    async def _write(self, involved: Mapping[str, Any], key: EventKey, n: int, now: str) -> Posted:
        """Count `n` more on the Event posted before, or post a new one if there is none (or it expired)."""
        known = self.book.last_posted(key)
        if known is not None:
            count = known.count + n
            patched = await self.call(self.client.patch_event, involved["metadata"]["namespace"], known.name,
                                      count, now)
            if patched is not None:
                return Posted(known.name, count)
        created = await self.call(self.client.post_event, involved, key.type, key.reason, key.message, now,
                                  count=n)
        return Posted(created["metadata"]["name"], int(created.get("count") or n))
