"""An asyncio event loop on a clock of its own: the loop's time moves only when the loop has nothing to do
(it then jumps to its next timer), or when a test says time passed. Every timer (asyncio.sleep, call_at, the
tick grid of tfop.kube.ticks) reads loop.time(), so a test on this loop sees the same timings on an idle
machine and on one busy with other work: no wake-up is ever late unless the test makes it so."""
from __future__ import annotations

import asyncio
import selectors
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
WAKE_LATENCY = 1e-9  # seconds a timer wakes after its deadline


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        self.now = 0.0  # seconds on this loop's clock
        super().__init__(_JumpingSelector(self))

    def time(self) -> float:
        return self.now

    def next_deadline(self, within: float) -> float:
        """The earliest timer's deadline, or 0 when none is due within `within` seconds."""
        timers = self._scheduled  # type: ignore[attr-defined]  # asyncio's own heap of timers
        if timers and timers[0].when() <= self.now + within + 1e-6:
            return timers[0].when()
        return 0.0

    def hold(self, seconds: float) -> None:
        """Time passes and the loop runs nothing: what a callback computing for `seconds` does."""
        self.now += seconds


class _JumpingSelector(selectors.DefaultSelector):
    """Polls without waiting; where the loop would wait for its next timer, moves the clock there instead."""

    def __init__(self, loop: VirtualTimeLoop) -> None:
        super().__init__()
        self.loop = loop

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = super().select(0)
        if ready or timeout is None:  # no timer to jump to: wait for I/O as any loop would
            return ready or super().select(timeout)
        # Just past the timer's deadline, as a real loop wakes: exactly on it, a sleep to a grid point
        # (tfop.kube.ticks) can wake a rounding error before the point and sleep again to the same one.
        self.loop.now = max(self.loop.now + timeout, self.loop.next_deadline(timeout)) + WAKE_LATENCY
        return []


def run(main: Coroutine[Any, Any, T]) -> T:
    """asyncio.run, on a VirtualTimeLoop."""
    with asyncio.Runner(loop_factory=VirtualTimeLoop) as runner:
        return runner.run(main)
