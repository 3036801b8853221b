"""The work queue on a real event loop: a failing pass backs off even when it re-adds its own job,
and a job failing for ever never overflows the backoff."""
import asyncio

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

    asyncio.run(main())
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

    asyncio.run(main())
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

    delay, runner = asyncio.run(main())
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

    asyncio.run(main())
    assert [key for key, _ in calls] == ["now", "burst"]
    assert calls[1][1] >= 0.2  # from the first event of the burst
