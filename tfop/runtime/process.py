"""kopf runs the operator's process: start-up, signals, the clean stop. Its registry and the one
quirk of its start-up that tfop quiets.
"""
from __future__ import annotations

import asyncio
from typing import Awaitable, Callable

import aiohttp
import kopf

from tfop.kube.credentials import Credentials


def build_registry(credentials: Credentials, on_cleanup: Callable[[], Awaitable[None]]) -> kopf.OperatorRegistry:
    """kopf runs the process: credentials, start-up settings, signals and the clean stop. It watches
    nothing itself: TFJobs and their children come through tfop's informers (tfop/kube/informer.py)."""
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)
    def login(**_):
        return credentials.to_kopf()

    @kopf.on.startup(registry=registry)
    def configure(settings: kopf.OperatorSettings, **_):
        settings.posting.enabled = False  # we post our own, fewer, Events
        # Our namespaces are exact names and the CRD is known: no need to list namespaces or CRDs.
        settings.scanning.disabled = True
        settings.watching.server_timeout = 290

    @kopf.on.cleanup(registry=registry)
    async def cleanup(**_):
        # kopf waits 5 s for tasks started after it before it exits: stop ours now, not then.
        await on_cleanup()

    return registry


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
