"""Never alive and idle: the operator's vital tasks are watched, and the first to end ends the process.

A controller, an informer, the leader election or the probe server that stops (an exception, or
a return that should never happen) leaves a process that looks alive and does nothing. Each is
run here; when one ends, the others are cancelled and VitalTaskDied says which one and why, so
the process exits non-zero and Kubernetes restarts it.
"""
from __future__ import annotations

import asyncio
from typing import Awaitable

import aiohttp


class VitalTaskDied(Exception):
    def __init__(self, name: str, cause: BaseException | None):
        self.name, self.cause = name, cause
        why = f"{type(cause).__name__}: {cause}" if cause is not None else "it returned"
        super().__init__(f"{name} stopped ({why}); exiting so that the operator is restarted")


def task_reason(task: asyncio.Task) -> BaseException | None:
    if task.cancelled():
        return asyncio.CancelledError()
    return task.exception()


async def first_of(main: Awaitable, vital: dict[str, asyncio.Task], stopping: asyncio.Event | None = None):
    """Await `main` while every vital task runs; raise VitalTaskDied if one ends first.

    Once `stopping` is set (a clean shutdown is cancelling them), vital tasks may end quietly.
    """
    main_task = asyncio.ensure_future(main)
    watched = set(vital.values())
    try:
        while True:
            done, _ = await asyncio.wait([main_task, *watched], return_when=asyncio.FIRST_COMPLETED)
            ended = [name for name, task in vital.items() if task in done and task in watched]
            if ended and not (stopping is not None and stopping.is_set()):
                main_task.cancel()
                await asyncio.gather(main_task, return_exceptions=True)
                raise VitalTaskDied(ended[0], task_reason(vital[ended[0]]))
            watched -= done
            if main_task in done:
                return main_task.result()
    except asyncio.CancelledError:
        main_task.cancel()
        raise


async def stop_all(tasks) -> None:
    tasks = [t for t in tasks if t is not None]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def is_kopf_scan_leftover(context: dict) -> bool:
    """kopf's start-up API scan runs its requests under asyncio.as_completed, which does not cancel
    them when kopf is stopped: one still in flight fails once kopf's HTTP session closes, and asyncio
    would print that failure, expected on the way out, as a Traceback ("never retrieved")."""
    task, error = context.get("future"), context.get("exception")
    coro = task.get_coro() if isinstance(task, asyncio.Task) else None
    code = getattr(coro, "cr_code", None)
    return isinstance(error, aiohttp.ClientError) and code is not None and "/kopf/" in code.co_filename


def quiet_kopf_scan_leftovers(loop: asyncio.AbstractEventLoop, logger) -> None:
    """Past this point a kopf scan request ending with the session is one debug line, not a Traceback."""
    def handle(loop: asyncio.AbstractEventLoop, context: dict) -> None:
        if is_kopf_scan_leftover(context):
            logger.debug("a kopf API scan request ended with its session: %s", context["exception"])
        else:
            loop.default_exception_handler(context)
    loop.set_exception_handler(handle)
