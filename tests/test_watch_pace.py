"""Paced watches (KubeClient.watch_pace, tfop.kube.client.let_gather) and the loop's tick grid
(tfop.kube.ticks) against a real socket, plain and TLS, on uvloop as the operator runs: every event
arrives, in order, in a few reads.

The server's events are spread over a clock the test steps, not the machine's: a busy machine slows
both sides alike and changes neither what arrives between two ticks nor what arrives between two reads."""
from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable

import orjson
import pytest
import uvloop

from e2e.harness import pki
from tests import virtual_time
from tfop.kube.client import KubeClient
from tfop.kube.credentials import Credentials
from tfop.kube.ticks import next_tick, on_grid
from tfop.kube.workqueue import WorkQueue

EVENTS = 40
GAP = 0.005  # seconds between the server's events: 40 of them over ~0.2 s


class SteppedClock:
    """The time a paced watch waits on (its `tick`): it moves to the next tick when the watch waits
    for one, and the watch reads again once the server has written every event due by that tick."""

    def __init__(self) -> None:
        self.now = 0.0  # seconds
        self.server_waits_for = 0.0  # the time of the server's next event
        self.server_done = False
        self.moved = asyncio.Condition()

    async def until(self, when: float) -> None:
        """The server's wait for its next event, due at `when`."""
        async with self.moved:
            self.server_waits_for = when
            self.moved.notify_all()
            await self.moved.wait_for(lambda: self.now >= when)

    async def finish(self) -> None:
        async with self.moved:
            self.server_done = True
            self.moved.notify_all()

    async def tick(self, period: float) -> float:
        due = next_tick(period, self.now)
        async with self.moved:
            self.now = due
            self.moved.notify_all()
            await self.moved.wait_for(lambda: self.server_done or self.server_waits_for > due)
        return due


class StreamingServer:
    """Answers every request with a watch stream: EVENTS events, one per chunk, each after
    `before_event(i)`, then its end, then says so (`ended`)."""

    def __init__(self, before_event: Callable[[int], Awaitable[None]], ended: Callable[[], Awaitable[None]],
                 tls: ssl.SSLContext | None = None):
        self.before_event, self.ended, self.tls = before_event, ended, tls

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self.serve, "127.0.0.1", 0, ssl=self.tls)
        scheme = "https" if self.tls else "http"
        return f"{scheme}://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def __aexit__(self, *exc) -> None:
        self.server.close()

    async def serve(self, reader, writer) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
        for i in range(EVENTS):
            await self.before_event(i)
            obj = {"kind": "ConfigMap", "metadata": {"name": "m", "resourceVersion": str(i + 1)}}
            line = orjson.dumps({"type": "MODIFIED", "object": obj}) + b"\n"
            writer.write(b"%x\r\n%s\r\n" % (len(line), line))
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        writer.close()
        await self.ended()


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    pki.make_ca(d)
    pki.make_cert(d, "server", "/CN=127.0.0.1", server_sans=["IP:127.0.0.1"])
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(d / "server.crt", d / "server.key")
    client = ssl.create_default_context(cafile=str(d / "ca.crt"))
    return server, client


def watch_all(pace: float, tls_pair=None) -> tuple[list[str], int]:
    """(the versions the watch yielded, the reads it took). Paced, the server writes event i at i * GAP on
    the watch's clock; not paced, once the watch has yielded the event before (GAP is time enough for that)."""
    async def scenario():
        server_tls, client_tls = tls_pair or (None, False)
        clock, versions, yielded = SteppedClock(), [], asyncio.Condition()

        async def before_event(i: int) -> None:
            if pace:
                await clock.until(i * GAP)
            else:
                async with yielded:
                    await yielded.wait_for(lambda: len(versions) >= i)

        async with StreamingServer(before_event, clock.finish, server_tls) as url:
            credentials = Credentials(server=url, ssl_context=client_tls)
            async with KubeClient(credentials, watch_pace=pace) as kube:
                async for event in kube.watch("v1", "configmaps", "ns", "0", tick=clock.tick):
                    versions.append(event["object"]["metadata"]["resourceVersion"])
                    async with yielded:
                        yielded.notify_all()
                return versions, kube.watch_received["configmaps"][2]
    return uvloop.run(scenario())


@pytest.mark.parametrize("over_tls", [False, True], ids=["plain", "tls"])
def test_a_paced_watch_yields_every_event_in_order_in_a_few_reads(over_tls, tls):
    pair = tls if over_tls else None
    paced, paced_reads = watch_all(0.1, pair)
    unpaced, unpaced_reads = watch_all(0.0, pair)
    assert paced == unpaced == [str(i + 1) for i in range(EVENTS)]
    assert paced_reads <= 6  # ~0.2 s of events, a read per 0.1 s tick (and the first and last)
    assert unpaced_reads >= EVENTS // 2  # one read an event, or near it, when not paced


@pytest.mark.parametrize("period, now, tick", [
    (0.02, 1.0, 1.02),  # on a point: the next one
    (0.02, 1.001, 1.02),
    (0.1, 0.05, 0.1),
    (0.1, 0.0, 0.1),
])
def test_next_tick_is_the_first_point_after_now(period, now, tick):
    assert next_tick(period, now) == pytest.approx(tick)


@pytest.mark.parametrize("period, when, point", [
    (0.02, 1.0, 1.0),  # on a point already: itself
    (0.02, 1.001, 1.02),
    (0.1, 0.25, 0.3),
])
def test_on_grid_never_moves_a_deadline_earlier(period, when, point):
    assert on_grid(period, when) == pytest.approx(point)


def test_a_delayed_add_on_a_grid_fires_on_a_grid_point_never_early():
    async def scenario():
        loop = asyncio.get_running_loop()
        fired = asyncio.Event()
        fired_at = []

        async def handler(key):
            fired_at.append(loop.time())
            fired.set()

        queue = WorkQueue(handler, workers=1, grid=0.05)
        runner = asyncio.create_task(queue.run())
        asked = loop.time() + 0.01
        queue.add_after("job", 0.01)
        await asyncio.wait_for(fired.wait(), 1)
        runner.cancel()
        return asked, fired_at[0]
    asked, at = virtual_time.run(scenario())
    assert at >= asked
    assert at - on_grid(0.05, asked) < 0.02  # on the point the deadline was put on, not a period later
