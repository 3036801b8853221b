"""How long the event loop was held: a task that sleeps to a tick and measures how late it wakes.

Every job's pass, every watch and every API call share one event loop, so a pass that computes
for a second stalls them all. The lateness of a timer is that stall, whatever caused it. The
operator logs a warning for each stall over a threshold, and every few seconds the longest stall
of that window and since the start (when it is worth a line), which tests read from its log.

Stalls come from work: a monitor that follows the work queue ticks finely while a pass is queued or
running and is armed the moment one is queued (a delayed pass too); with nothing to do it ticks on
the idle interval, whose points are those the paced watches read on, so an idle operator is not
woken 50 times a second.
"""
from __future__ import annotations

import asyncio
import logging

from tfop.kube.ticks import GRID, PACE, next_tick
from tfop.kube.workqueue import WorkQueue

log = logging.getLogger("tfop.loop")

# Seconds between wake-ups while work is queued or running (tfop.kube.ticks): finer than the stalls
# worth reporting, and the points delayed passes fire on; while none is, the points paced watches read on.
INTERVAL = GRID
IDLE_INTERVAL = PACE
THRESHOLD = 0.1  # a stall longer than this is a warning; a pass is meant to hold the loop ~50 ms at most
WINDOW = 5.0  # seconds summed up in one line about the longest stall
REPORTED = 0.01  # a window whose longest stall is shorter says nothing


class LoopMonitor:
    def __init__(self, interval: float = INTERVAL, threshold: float = THRESHOLD, window: float = WINDOW,
                 idle_interval: float = IDLE_INTERVAL):
        self.interval, self.threshold, self.window, self.idle_interval = interval, threshold, window, idle_interval
        self.longest = 0.0  # seconds: the longest stall since the start
        self.window_longest = 0.0  # and in the current window
        self.window_end: float | None = None
        self.queue: WorkQueue | None = None  # the queue followed: fine ticks only while it has work
        self._due = 0.0  # loop time of the tick waited for
        self._tick: asyncio.TimerHandle | None = None
        self._woken: asyncio.Future | None = None

    def follow(self, queue: WorkQueue) -> None:
        """Tick finely only while `queue` has work; armed by it when work comes."""
        self.queue = queue
        queue.on_busy = self.arm

    def busy(self) -> bool:
        return self.queue is None or not self.queue.idle.is_set()

    def arm(self) -> None:
        """Work is coming: wake at the next fine tick, not the idle one, so that its stall is measured."""
        if self._woken is None or self._woken.done():
            return
        loop = self._woken.get_loop()
        due = next_tick(self.interval, loop.time())
        if due < self._due:
            self._wait_until(loop, due)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self._woken = loop.create_future()
            self._wait_until(loop, next_tick(self.interval if self.busy() else self.idle_interval, loop.time()))
            try:
                await self._woken
            finally:  # a stopped monitor leaves no timer behind
                self._tick.cancel()
            self.observe(loop.time() - self._due, loop.time())

    def _wait_until(self, loop: asyncio.AbstractEventLoop, due: float) -> None:
        if self._tick is not None:
            self._tick.cancel()
        self._due, self._tick = due, loop.call_at(due, self._ring)

    def _ring(self) -> None:
        if self._woken is not None and not self._woken.done():
            self._woken.set_result(None)

    def observe(self, stall: float, now: float) -> None:
        """One wake-up `stall` seconds late, at loop time `now`."""
        stall = max(stall, 0.0)
        self.longest = max(self.longest, stall)
        self.window_longest = max(self.window_longest, stall)
        if stall > self.threshold:
            log.warning("event loop stalled %.0f ms (longest stall since start %.0f ms)",
                        stall * 1000, self.longest * 1000)
        if self.window_end is None:
            self.window_end = now + self.window
        elif now >= self.window_end:
            if self.window_longest >= REPORTED:
                log.info("event loop: longest stall %.0f ms in the last %g s (since start %.0f ms)",
                         self.window_longest * 1000, self.window, self.longest * 1000)
            self.window_longest, self.window_end = 0.0, now + self.window
