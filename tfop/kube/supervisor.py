"""Never alive and idle: the operator's vital tasks are watched, and the first to end ends the process.

A controller, an informer, the leader election or a server that stops (an exception, or
a return that should never happen) leaves a process that looks alive and does nothing. Each is
run here; when one ends, the others are cancelled and VitalTaskDied says which one and why, so
the process exits non-zero and Kubernetes restarts it.
"""
from __future__ import annotations

import asyncio
from collections.abc import Awaitable


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
