"""The HTTP endpoints: /healthz (alive and making progress), /readyz (caches synced, able to lead), /metrics.

Each is a list of named checks; a check returns None when fine or a short reason when not, and
the endpoint answers 200 "ok" or 500 with one line per failing check, so `kubectl describe pod`
shows why the kubelet restarted the operator or keeps it out of rotation.
"""
from __future__ import annotations

import logging
from collections.abc import Callable

from aiohttp import web

log = logging.getLogger("tfop.health")

Check = Callable[[], "str | None"]


def parse_bind_address(address: str) -> tuple[str, int] | None:
    """controller-runtime's form: ":8081", "127.0.0.1:8081"; "" or "0" turns the server off."""
    if address in ("", "0"):
        return None
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"bind address {address!r} is not [host]:port")
    return (host.strip("[]") or "0.0.0.0", int(port))


def verdict(checks: dict[str, Check]) -> tuple[int, str]:
    failing = []
    for name, check in checks.items():
        try:
            reason = check()
        except Exception as err:  # noqa: BLE001 - a broken check is a failing one, said as such
            reason = f"check failed: {type(err).__name__}: {err}"
        if reason:
            failing.append(f"{name}: {reason}")
    return (500, "\n".join(failing) + "\n") if failing else (200, "ok\n")


def checks_handler(checks: dict[str, Check]):
    async def handle(_request: web.Request) -> web.Response:
        status, text = verdict(checks)
        return web.Response(status=status, text=text)
    return handle


def probe_routes(liveness: dict[str, Check], readiness: dict[str, Check]) -> dict:
    return {"/healthz": checks_handler(liveness), "/readyz": checks_handler(readiness)}


def metrics_routes(registry) -> dict:
    """/metrics in Prometheus' text format, rendered on the event loop (no thread reads our state)."""
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    async def handle(_request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST})
    return {"/metrics": handle}


class HttpServer:
    """A few GET routes on one address, served by aiohttp on the operator's event loop."""

    def __init__(self, address: tuple[str, int], routes: dict):
        self.address, self.routes = address, routes
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        for path, handler in self.routes.items():
            app.router.add_get(path, handler)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, *self.address).start()
        log.info("serving %s on %s:%d", " ".join(self.routes), *self.address)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
