"""tfop.kube.http1 against a real socket: a local server that answers each request with the next
scripted bytes. The apiserver's own answers are covered by every e2e test; these are the framings
and failures it rarely shows."""
from __future__ import annotations

import asyncio
import socket
import struct

import pytest

from tfop.kube.client import Credentials, KubeClient
from tfop.kube.http1 import MAX_HEAD_BYTES, ConnectionPool, ProtocolError, StaleConnection

OK_JSON = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{"a": true}'
CLOSE = b"<close>"  # scripted, alone or after an answer: close the connection
SILENT = b"<silent>"  # scripted: read the request, never answer
RESET = b"<reset>"  # scripted: read the request, reset the connection (TCP RST, as a restarting apiserver)


class ScriptedServer:
    """Answers the n-th request with answers[n]; records each request's head and body."""

    def __init__(self, answers: list[bytes]):
        self.answers, self.requests, self.connections = list(answers), [], 0

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self.serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def __aexit__(self, *exc) -> None:
        self.server.close()

    async def serve(self, reader, writer) -> None:
        self.connections += 1
        try:
            while self.answers:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                self.requests.append((head.decode(), await reader.readexactly(length)))
                answer = self.answers.pop(0)
                if answer == SILENT:
                    await asyncio.sleep(3600)
                if answer == RESET:
                    writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                                               struct.pack("ii", 1, 0))
                    writer.transport.abort()
                    return
                writer.write(answer.removesuffix(CLOSE))
                await writer.drain()
                if answer.endswith(CLOSE):
                    break
        except asyncio.IncompleteReadError:
            pass
        writer.close()


def run(answers: list[bytes], scenario, prefix: str = "", limit: int = 4):
    async def main():
        server = ScriptedServer(answers)
        async with server as url:
            pool = ConnectionPool.for_server(url + prefix, lambda: None, limit=limit)
            try:
                return server, await scenario(pool)
            finally:
                pool.close()
    return asyncio.run(main())


async def get(pool: ConnectionPool, target: str = "/api/v1/namespaces", timeout: float = 5.0):
    return await pool.request("GET", pool.prefix + target, b"Accept: application/json\r\n", None, timeout)


FRAMINGS = {
    # name: (answer, body read, connection kept)
    "content-length": (OK_JSON, b'{"a": true}', True),
    "chunked, an extension, a trailer": (
        b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n4;ext=1\r\n{\"a\"\r\n7\r\n: true}\r\n0\r\n"
        b"X-Trailer: 1\r\n\r\n", b'{"a": true}', True),
    "Connection: close": (b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}", b"{}", False),
    "HTTP/1.0": (b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n{}", b"{}", False),
    "no body on 204": (b"HTTP/1.1 204 No Content\r\n\r\n", b"", True),
}


@pytest.mark.parametrize("name", FRAMINGS)
def test_each_framing_is_read_and_the_connection_kept_only_when_it_may_be(name):
    answer, body, kept = FRAMINGS[name]

    async def scenario(pool):
        first = await get(pool)
        second = await get(pool)
        return first, second
    server, (first, second) = run([answer, OK_JSON], scenario)
    assert first.body == body and second.body == b'{"a": true}'
    assert server.connections == (1 if kept else 2)


def test_a_body_is_sized_and_the_url_path_leads_every_target():
    async def scenario(pool):
        return await pool.request("POST", pool.prefix + "/api/v1/pods?dryRun=All",
                                  b"Content-Type: application/json\r\n", b'{"kind": "Pod"}', 5.0)
    server, response = run([OK_JSON.replace(b"200 OK", b"201 Created")], scenario, prefix="/k8s/clusters/c-1/")
    head, body = server.requests[0]
    assert head.startswith("POST /k8s/clusters/c-1/api/v1/pods?dryRun=All HTTP/1.1\r\nHost: 127.0.0.1:")
    assert "Content-Length: 15\r\n" in head and body == b'{"kind": "Pod"}'
    assert response.status == 201 and response.headers["content-type"] == "application/json"


def test_a_kept_alive_connection_closed_by_the_server_is_stale_a_new_one_is_not():
    async def scenario(pool):
        await get(pool)
        with pytest.raises(StaleConnection):
            await get(pool)  # the server closed the kept connection without an answer
        with pytest.raises(ProtocolError, match="after 0 bytes"):
            await get(pool)  # a fresh connection closed without an answer: not stale, broken
    server, _ = run([OK_JSON, CLOSE, CLOSE], scenario)
    assert server.connections == 2


def test_a_kept_alive_connection_reset_by_the_server_is_stale_a_new_one_is_not():
    async def scenario(pool):
        await get(pool)
        with pytest.raises(StaleConnection):
            await get(pool)
        with pytest.raises(ConnectionResetError):
            await get(pool)
    server, _ = run([OK_JSON, RESET, RESET], scenario)
    assert server.connections == 2


BROKEN = {
    "headers without end, past the bound": (b"HTTP/1.1 200 OK\r\nX: " + b"y" * MAX_HEAD_BYTES, "exceed"),
    "not HTTP": (b"SSH-2.0-OpenSSH\r\n\r\n", "not an HTTP status line"),
    "body cut short": (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}" + CLOSE, "inside an answer's body"),
    "chunk size not hex": (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "not a chunk size"),
}


@pytest.mark.parametrize("name", BROKEN)
def test_a_broken_answer_is_a_protocol_error_and_its_connection_dropped(name):
    answer, message = BROKEN[name]

    async def scenario(pool):
        with pytest.raises(ProtocolError, match=message):
            await get(pool)
        return await get(pool)
    server, after = run([answer, OK_JSON], scenario)
    assert after.body == b'{"a": true}'
    assert server.connections == 2


def test_an_answer_slower_than_the_timeout_drops_its_connection():
    async def scenario(pool):
        with pytest.raises(TimeoutError):
            await get(pool, timeout=0.2)
        return await get(pool)
    server, after = run([SILENT, OK_JSON], scenario)
    assert after.status == 200 and server.connections == 2


def test_the_client_sends_a_read_again_on_a_stale_connection_but_not_a_write():
    async def scenario():
        server = ScriptedServer([OK_JSON, CLOSE, OK_JSON, CLOSE])
        async with server as url:
            async with KubeClient(Credentials(server=url, ssl_context=False, token="t0ken")) as client:
                await client.request("GET", "/api/v1/namespaces")
                assert await client.request("GET", "/api/v1/namespaces") == {"a": True}  # resent
                with pytest.raises(StaleConnection):
                    await client.request("POST", "/api/v1/namespaces", {"kind": "Namespace"})
        return server
    server = asyncio.run(scenario())
    assert [head.split(" ", 2)[:2] for head, _ in server.requests] == [
        ["GET", "/api/v1/namespaces"], ["GET", "/api/v1/namespaces"], ["GET", "/api/v1/namespaces"],
        ["POST", "/api/v1/namespaces"]]
    assert all("Authorization: Bearer t0ken\r\n" in head for head, _ in server.requests)


def test_a_burst_reuses_every_connection_it_opened():
    burst = 40  # more than half the pool: a pool keeping fewer idle than its limit would reopen some

    async def scenario(pool):
        for _ in range(3):
            answers = await asyncio.gather(*(get(pool) for _ in range(burst)))
            assert {answer.status for answer in answers} == {200}
    server, _ = run([OK_JSON] * 3 * burst, scenario, limit=64)
    assert server.connections == burst
