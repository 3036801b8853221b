"""One grid of wake-ups for the whole event loop.

Waking the process costs more than the work most wake-ups bring: on a busy machine its caches are
cold by then (a uvloop task that sleeps 20 ms at a time uses ~0.1 ms of CPU a wake-up on the
2-core machine e2e/BENCHMARK.md describes). Timers that end on a grid point (a multiple of the
period on the loop's clock) rather than a delay from now end together, in one wake-up: paced
watches read their sockets, the loop monitor ticks and a WorkQueue's delayed adds end on the
multiples of PACE.
"""
from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable

PACE = 0.1  # seconds
Tick = Callable[[float], Awaitable[float]]  # sleep_to_tick's shape: wait for the next point of a period, return it


def next_tick(period: float, now: float) -> float:
    """The first multiple of `period` after `now` (loop time)."""
    return (math.floor(now / period) + 1) * period


def on_grid(period: float, when: float) -> float:
    """`when`, or the first multiple of `period` after it (a deadline put on the grid, never earlier)."""
    return math.ceil(when / period) * period


async def sleep_to_tick(period: float) -> float:
    """Sleep until the next multiple of `period` on the running loop's clock; returns that point."""
    loop = asyncio.get_running_loop()
    due = next_tick(period, loop.time())
    await asyncio.sleep(due - loop.time())
    return due
