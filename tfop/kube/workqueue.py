"""A coalescing work queue: one reconcile per job at a time, any number of jobs at once.

Ten pod events for one job while it waits become one reconcile; an event
that arrives during a reconcile makes it run once more afterwards. Failures
are retried with a per-job exponential backoff, so one bad job never stalls
the others. A queue drained on stop starts no more passes and lets those
running end, so that none is cut off in the middle of a request.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

from tfop.kube.ticks import on_grid

log = logging.getLogger("tfop.queue")


# Backoff doubles this many times at most (0.5 s x 2^20 is far past any max_backoff): a job failing
# for days must not overflow a float.
MAX_DOUBLINGS = 20


K = TypeVar("K", bound=Hashable)  # a job's key (the controller's: namespace, name)


class WorkQueue(Generic[K]):
    def __init__(self, handler: Callable[[K], Awaitable[None]], workers: int = 32,
                 max_backoff: float = 60.0, on_wait: Callable[[float], None] | None = None,
                 on_retry: Callable[[], None] | None = None, grid: float = 0.0):
        self.handler, self.workers, self.max_backoff = handler, workers, max_backoff
        # Delayed adds end on this grid (tfop.kube.ticks), up to `grid` seconds late, so that they wake
        # the process together with whatever else ends on it. 0: exactly when asked.
        self.grid = grid
        self.on_wait, self.on_retry = on_wait, on_retry  # for the metrics: seconds queued; a retry
        self._added: dict[K, float] = {}  # key -> monotonic time it was queued
        self._queue: asyncio.Queue[K] = asyncio.Queue()
        self._pending: set[K] = set()
        self._running: dict[K, float] = {}  # key -> monotonic time its reconcile started (to tell a stuck worker)
        self._dirty: set[K] = set()
        self._failures: dict[K, int] = {}
        self._timers: dict[K, asyncio.TimerHandle] = {}
        self._draining = False
        self._none_running = asyncio.Event()
        self._none_running.set()

    def add(self, key: K) -> None:
        if key in self._running:
            self._dirty.add(key)
        elif key not in self._pending:
            self._pending.add(key)
            self._added[key] = time.monotonic()
            self._queue.put_nowait(key)

    def add_soon(self, key: K, delay: float) -> None:
        """Reconcile `key` within `delay` seconds, together with whatever else arrives meanwhile: the
        events of a job's children come in bursts (a gang's pods bound in one cycle, then each Running),
        and one pass reads them all. Nothing to do when the key already waits its turn."""
        if key not in self._pending:
            self.add_after(key, delay)

    def add_after(self, key: K, delay: float) -> None:
        """Reconcile `key` again in `delay` seconds (the earliest request wins)."""
        loop = asyncio.get_running_loop()
        when = loop.time() + delay
        if self.grid:
            when = on_grid(self.grid, when)
        timer = self._timers.get(key)
        if timer is not None and not timer.cancelled() and timer.when() <= when:
            return
        if timer is not None:
            timer.cancel()
        self._timers[key] = loop.call_at(when, self._fire, key)

    def _fire(self, key: K) -> None:
        self._timers.pop(key, None)
        self.add(key)

    def forget(self, key: K) -> None:
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        self._failures.pop(key, None)

    def longest_running(self) -> tuple[K, float] | None:
        """The reconcile running the longest and for how many seconds, or None when all are idle."""
        if not self._running:
            return None
        key, started = min(self._running.items(), key=lambda item: item[1])
        return key, time.monotonic() - started

    @property
    def depth(self) -> int:
        return len(self._pending)

    async def run(self) -> None:
        await asyncio.gather(*(self._worker() for _ in range(self.workers)))

    async def drain(self, timeout: float) -> bool:
        """Start no more passes and wait up to `timeout` seconds for those running to end (what is
        queued stays queued); whether they all did."""
        self._draining = True
        try:
            await asyncio.wait_for(self._none_running.wait(), timeout)
        except TimeoutError:
            return False
        return True

    def _retry_later(self, key: K) -> None:
        count = self._failures.get(key, 0) + 1
        self._failures[key] = count
        delay = min(self.max_backoff, 0.5 * 2 ** min(count, MAX_DOUBLINGS))
        if self.on_retry is not None:
            self.on_retry()
        log.exception("reconcile of %s failed (attempt %d), retrying in %.1fs", key, count, delay)
        self.add_after(key, delay)

    async def _worker(self) -> None:
        while True:
            key = await self._queue.get()
            if self._draining:  # this worker ends; the key stays queued
                self._queue.put_nowait(key)
                return
            self._pending.discard(key)
            started = self._running[key] = time.monotonic()
            self._none_running.clear()
            queued = self._added.pop(key, started)
            if self.on_wait is not None:
                self.on_wait(started - queued)
            failed = False
            try:
                await self.handler(key)
                self._failures.pop(key, None)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - isolate the job, retry it later
                failed = True
                self._retry_later(key)
            finally:
                self._running.pop(key, None)
                if key in self._dirty:
                    self._dirty.discard(key)
                    if not failed:  # a failed pass waits out its backoff, whatever happened meanwhile
                        self.add(key)
                if not self._running:
                    self._none_running.set()
