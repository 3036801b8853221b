"""How long the event loop was held: a task that sleeps to a tick and measures how late it wakes.

Every job's pass, every watch and every API call share one event loop, so a pass that computes
for a second stalls them all. The lateness of a timer is that stall, whatever caused it. The
operator logs a warning for each stall over a threshold, and every few seconds the longest stall
of that window and since the start (when it is worth a line), which tests read from its log.

The monitor ticks on the points the paced watches read on (tfop.kube.ticks.PACE), so in a busy
operator its tick wakes the process together with them, not on its own: each wake-up costs the
operator more than most of its work (tfop.kube.ticks). A stall is measured to within one interval:
one that starts just after a tick is seen up to an interval short.
"""
from __future__ import annotations

import asyncio
import logging

from tfop.kube.ticks import PACE, sleep_to_tick

log = logging.getLogger("tfop.loop")

INTERVAL = PACE  # seconds between ticks
THRESHOLD = 0.1  # a stall longer than this is a warning; a pass is meant to hold the loop ~50 ms at most
WINDOW = 5.0  # seconds summed up in one line about the longest stall
REPORTED = 0.01  # a window whose longest stall is shorter says nothing


class LoopMonitor:
    def __init__(self, interval: float = INTERVAL, threshold: float = THRESHOLD, window: float = WINDOW):
        self.interval, self.threshold, self.window = interval, threshold, window
        self.longest = 0.0  # seconds: the longest stall since the start
        self.window_longest = 0.0  # and in the current window
        self.window_end: float | None = None

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due = await sleep_to_tick(self.interval)
            self.observe(loop.time() - due, loop.time())

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
