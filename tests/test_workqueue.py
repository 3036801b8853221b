"""The work queue on an event loop: a failing pass backs off even when it re-adds its own job,
and a job failing for ever never overflows the backoff. The loops run on a clock of their own
(tests.virtual_time), so a machine busy with other work delays none of the timings they compare."""
import asyncio

from tests import virtual_time
from tfop.kube.workqueue import WorkQueue


def test_a_failing_pass_that_re_adds_its_job_waits_out_its_backoff():
    """Seen on a real apiserver restart: every pass re-added its job (a refused create) and failed, and
    the re-add ran it again at once, about 300 times a second."""
    calls = []

    async def main():
        async def handler(key):
            calls.append(key)
            queue.add(key)  # e.g. "the next pass says what blocked this one"
            raise RuntimeError("the apiserver is restarting")
        queue = WorkQueue(handler, workers=2)
        queue.add(("ml", "job"))
        runner = asyncio.create_task(queue.run())
        await asyncio.sleep(0.5)  # the first backoff is 1 s
        runner.cancel()

    virtual_time.run(main())
    assert calls == [("ml", "job")]


def test_a_pass_that_succeeds_runs_again_when_its_job_changed_meanwhile():
    calls = []

    async def main():
        async def handler(key):
            calls.append(key)
            if len(calls) == 1:
                queue.add(key)  # an event during the pass
        queue = WorkQueue(handler, workers=2)
        queue.add("job")
        runner = asyncio.create_task(queue.run())
        await asyncio.sleep(0.1)
        runner.cancel()

    virtual_time.run(main())
    assert calls == ["job", "job"]


def test_backoff_never_overflows():
    async def main():
        async def handler(key):
            raise RuntimeError("still failing")
        queue = WorkQueue(handler, workers=1, max_backoff=60.0)
        queue._failures["job"] = 5000  # failing for days
        queue.add("job")
        runner = asyncio.create_task(queue.run())
        await asyncio.sleep(0.05)
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
        timer = queue._timers["job"]
        return timer.when() - asyncio.get_running_loop().time(), runner

    delay, runner = virtual_time.run(main())
    assert 59 < delay <= 60


def test_a_burst_of_child_events_is_one_pass_and_a_queued_job_is_not_delayed():
    calls = []

    async def main():
        async def handler(key):
            calls.append((key, loop.time() - start))
        loop = asyncio.get_running_loop()
        queue = WorkQueue(handler, workers=2)
        runner = asyncio.create_task(queue.run())
        start = loop.time()
        for _ in range(10):
            queue.add_soon("burst", 0.2)
            await asyncio.sleep(0.01)
        queue.add("now")
        queue.add_soon("now", 0.2)  # already queued: no second pass later
        await asyncio.sleep(0.5)
        runner.cancel()

    virtual_time.run(main())
    assert [key for key, _ in calls] == ["now", "burst"]
    assert calls[1][1] >= 0.2  # from the first event of the burst


def test_a_drain_lets_the_pass_under_way_end_and_starts_no_other():
    """A stop drains the queue first: a pass cut off mid-request leaves a dropped request behind."""
    ended, started = [], []

    async def main():
        async def handler(key):
            started.append(key)
            await asyncio.sleep(0.2)  # a request under way
            ended.append(key)
        queue = WorkQueue(handler, workers=1)
        queue.add("first")
        queue.add("second")  # queued behind it, with the only worker busy
        runner = asyncio.create_task(queue.run())
        await asyncio.sleep(0.05)
        drained = await queue.drain(timeout=2.0)
        queue.add("third")  # an event after the stop began
        await asyncio.sleep(0.1)
        runner.cancel()
        return drained

    assert virtual_time.run(main()) is True
    assert started == ended == ["first"]


def test_a_drain_gives_up_after_its_timeout():
    async def main():
        async def handler(key):
            await asyncio.sleep(10)
        queue = WorkQueue(handler, workers=1)
        queue.add("stuck")
        runner = asyncio.create_task(queue.run())
        await asyncio.sleep(0.05)
        began = asyncio.get_running_loop().time()
        drained = await queue.drain(timeout=0.2)
        took = asyncio.get_running_loop().time() - began
        runner.cancel()
        return drained, took

    drained, took = virtual_time.run(main())
    assert drained is False and 0.2 <= took < 1.0


def test_a_drain_with_nothing_running_returns_at_once():
    async def main():
        queue = WorkQueue(lambda key: asyncio.sleep(0), workers=1)
        return await asyncio.wait_for(queue.drain(timeout=5.0), 0.5)

    assert virtual_time.run(main()) is True
