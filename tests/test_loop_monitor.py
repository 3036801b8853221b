"""The event-loop stall monitor (tfop/kube/loop_monitor.py): on an event loop, and as a table.

The loops run on a clock of their own (tests.virtual_time), so a machine busy with other work delays
no tick: the stalls the monitor sees are the ones a test makes."""
import asyncio
import logging

import pytest

from tests import virtual_time
from tfop.kube.loop_monitor import LoopMonitor
from tfop.kube.workqueue import WorkQueue


def test_a_blocked_loop_is_measured_and_logged(caplog):
    async def main():
        monitor = LoopMonitor(interval=0.01, threshold=0.1, window=0.05)
        task = asyncio.create_task(monitor.run())
        await asyncio.sleep(0.05)
        asyncio.get_running_loop().hold(0.3)  # what a pass computing for 300 ms does to every other task
        await asyncio.sleep(0.1)
        task.cancel()
        return monitor

    with caplog.at_level(logging.INFO, logger="tfop.loop"):
        monitor = virtual_time.run(main())
    assert 0.25 <= monitor.longest < 1.0
    longest = round(monitor.longest * 1000)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [f"event loop stalled {longest} ms (longest stall since start {longest} ms)"]
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert f"event loop: longest stall {longest} ms in the last 0.05 s (since start {longest} ms)" in infos


def test_an_idle_loop_logs_nothing(caplog):
    async def main():
        monitor = LoopMonitor(interval=0.01, threshold=0.1, window=0.05)
        task = asyncio.create_task(monitor.run())
        await asyncio.sleep(0.2)
        task.cancel()
        return monitor

    with caplog.at_level(logging.INFO, logger="tfop.loop"):
        monitor = virtual_time.run(main())
    assert monitor.longest < 0.1
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


# (stalls as (seconds late, loop time), log lines expected as (level, message))
OBSERVED = [
    ("nothing worth a line", [(0.001, 0.0), (0.002, 6.0)], []),
    ("a stall over the threshold", [(0.25, 0.0)],
     [(logging.WARNING, "event loop stalled 250 ms (longest stall since start 250 ms)")]),
    ("a window's longest, once the window ends", [(0.0, 0.0), (0.03, 1.0), (0.02, 2.0), (0.0, 5.0), (0.0, 6.0)],
     [(logging.INFO, "event loop: longest stall 30 ms in the last 5 s (since start 30 ms)")]),
    ("each window on its own", [(0.0, 0.0), (0.2, 1.0), (0.0, 5.0), (0.04, 6.0), (0.0, 10.0)],
     [(logging.WARNING, "event loop stalled 200 ms (longest stall since start 200 ms)"),
      (logging.INFO, "event loop: longest stall 200 ms in the last 5 s (since start 200 ms)"),
      (logging.INFO, "event loop: longest stall 40 ms in the last 5 s (since start 200 ms)")]),
]


@pytest.mark.parametrize("desc,stalls,expected", OBSERVED, ids=[r[0] for r in OBSERVED])
def test_what_is_logged(caplog, desc, stalls, expected):
    monitor = LoopMonitor(threshold=0.1, window=5.0)
    with caplog.at_level(logging.INFO, logger="tfop.loop"):
        for stall, now in stalls:
            monitor.observe(stall, now)
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == expected
    assert monitor.longest == max(s for s, _ in stalls)


def test_it_ticks_on_its_interval_however_much_work_is_queued():
    async def main():
        monitor = LoopMonitor(interval=0.1)
        queue = WorkQueue(lambda key: asyncio.sleep(0.05), workers=1)
        ticks = []
        monitor.observe = lambda stall, now: ticks.append(now)
        tasks = [asyncio.create_task(monitor.run()), asyncio.create_task(queue.run())]
        for i in range(10):
            queue.add(i)  # 0.5 s of passes, one after another
        await asyncio.sleep(0.55)
        for task in tasks:
            task.cancel()
        return ticks

    ticks = virtual_time.run(main())
    assert 2 <= len(ticks) <= 6, ticks  # 5 ticks in 0.55 s: no more while work is queued
