"""Paced watches (KubeClient.watch_pace, tfop.kube.client.let_gather) and the loop's tick grid
(tfop.kube.ticks) against a real socket, plain and TLS, on uvloop as the operator runs: every event
arrives, in order, in a few reads."""
from __future__ import annotations

import asyncio
import ssl

import orjson
import pytest
import uvloop

from e2e.harness import pki
from tfop.kube.client import KubeClient
from tfop.kube.credentials import Credentials
from tfop.kube.ticks import next_tick, on_grid
from tfop.kube.workqueue import WorkQueue

EVENTS = 40
GAP = 0.005  # seconds between the server's events: 40 of them over ~0.2 s


class StreamingServer:
    """Answers every request with a watch stream: EVENTS events, one per chunk, GAP apart, then its end."""

    def __init__(self, tls: ssl.SSLContext | None = None):
        self.tls = tls

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
            obj = {"kind": "ConfigMap", "metadata": {"name": "m", "resourceVersion": str(i + 1)}}
            line = orjson.dumps({"type": "MODIFIED", "object": obj}) + b"\n"
            writer.write(b"%x\r\n%s\r\n" % (len(line), line))
            await writer.drain()
            await asyncio.sleep(GAP)
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        writer.close()


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
    """(the versions the watch yielded, the reads it took)."""
    async def scenario():
        server_tls, client_tls = tls_pair or (None, False)
        async with StreamingServer(server_tls) as url:
            async with KubeClient(Credentials(server=url, ssl_context=client_tls), watch_pace=pace) as kube:
                versions = [event["object"]["metadata"]["resourceVersion"]
                            async for event in kube.watch("v1", "configmaps", "ns", "0")]
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
    asked, at = asyncio.run(scenario())
    assert at >= asked
    assert at - on_grid(0.05, asked) < 0.02  # on the point the deadline was put on, not a period later
