"""The apiserver's unary requests over kept-alive HTTP/1.1 connections, at about half aiohttp's CPU.

A burst sends tens of thousands of requests; aiohttp's request path was the largest part of the
operator's own CPU. Measured alone against the local apiserver, a create cost 0.23-0.34 ms of CPU
through aiohttp and 0.15-0.16 through this pool (e2e/BENCHMARK.md, round 7). It speaks only what
the apiserver answers tfop: one request at a time a connection,
bodies sized by Content-Length or chunked, no compression, no redirects, no proxy. Watches and
requests through a proxy stay on aiohttp (tfop.kube.client).
"""
from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass
from typing import Callable, Mapping
from urllib.parse import urlsplit

# A response's status line and headers; the apiserver's are a few hundred bytes.
MAX_HEAD_BYTES = 64 * 1024


class ProtocolError(ConnectionError):
    """The server's answer is not HTTP/1.1 this client can read; its connection is dropped."""


class StaleConnection(ConnectionError):
    """A kept-alive connection was closed by the server before any answer: the request may not
    have been read, so a read (GET) is safe to send again on a new connection."""


@dataclass(frozen=True)
class Response:
    status: int
    headers: Mapping[str, str]  # names in lower case
    body: bytes


class _Connection:
    __slots__ = ("reader", "writer", "tls", "reused")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, tls: ssl.SSLContext | bool | None):
        self.reader, self.writer, self.tls, self.reused = reader, writer, tls, False

    def close(self) -> None:
        self.writer.close()


class ConnectionPool:
    """At most `limit` connections to one server; `tls()` is asked at each connect (an exec plugin's
    client certificate may change: connections made with an older context are not reused)."""

    def __init__(self, host: str, port: int, authority: str, tls: Callable[[], ssl.SSLContext | bool | None],
                 server_hostname: str | None = None, limit: int = 64, prefix: str = ""):
        self.host, self.port, self.authority, self.prefix = host, port, authority, prefix
        self.tls, self.server_hostname = tls, server_hostname
        self._slots = asyncio.Semaphore(limit)
        self._idle: list[_Connection] = []

    @classmethod
    def for_server(cls, server: str, tls: Callable[[], ssl.SSLContext | bool | None],
                   server_hostname: str | None = None, limit: int = 64) -> "ConnectionPool":
        """A pool for the server's URL; its path (a proxy's prefix such as /k8s/clusters/c-1) leads every target."""
        url = urlsplit(server)
        secure = url.scheme == "https"
        return cls(url.hostname or "", url.port or (443 if secure else 80), url.netloc.rpartition("@")[2],
                   tls if secure else lambda: None, server_hostname, limit, url.path.rstrip("/"))

    def close(self) -> None:
        while self._idle:
            self._idle.pop().close()

    async def request(self, method: str, target: str, headers: bytes, body: bytes | None,
                      timeout: float) -> Response:
        """`headers` are complete header lines (b"Name: value\\r\\n" each) but Host and Content-Length."""
        head = b"%s %s HTTP/1.1\r\nHost: %s\r\n%s" % (method.encode(), target.encode(), self.authority.encode(), headers)
        head += b"Content-Length: %d\r\n\r\n" % len(body) if body is not None else b"\r\n"
        async with asyncio.timeout(timeout), self._slots:  # like aiohttp's total: the wait for a slot too
            connection = await self._connection()
            try:
                connection.writer.write(head + body if body else head)
                response, keep = await _read_response(connection, method)
            except BaseException:
                connection.close()  # its state is unknown: cancelled, timed out or broken mid-answer
                raise
        if keep:  # kept whatever the count: idle and in use are never more than the limit together
            connection.reused = True
            self._idle.append(connection)
        else:
            connection.close()
        return response

    async def _connection(self) -> _Connection:
        tls = self.tls()
        while self._idle:
            connection = self._idle.pop()
            if connection.tls is tls and not connection.reader.at_eof():
                return connection
            connection.close()
        reader, writer = await asyncio.open_connection(
            self.host, self.port, ssl=tls, server_hostname=self.server_hostname if tls else None,
            limit=MAX_HEAD_BYTES)
        return _Connection(reader, writer, tls)


async def _read_response(connection: _Connection, method: str) -> tuple[Response, bool]:
    """The answer and whether its connection may carry another request."""
    reader = connection.reader
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as err:
        if connection.reused and not err.partial:
            raise StaleConnection("the server closed a kept-alive connection") from None
        raise ProtocolError(f"the connection closed after {len(err.partial)} bytes of an answer") from None
    except ConnectionResetError:
        if connection.reused:  # the server dropped it while idle (a restart, an idle timeout): resend a GET
            raise StaleConnection("the server reset a kept-alive connection") from None
        raise
    except asyncio.LimitOverrunError:
        raise ProtocolError(f"an answer's headers exceed {MAX_HEAD_BYTES} bytes") from None
    status, version, headers = _parse_head(head)
    keep = version == b"HTTP/1.1" and headers.get("connection", "").lower() != "close"
    if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
        return Response(status, headers, b""), keep
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return Response(status, headers, await _read_chunked(reader)), keep
    length = headers.get("content-length")
    if length is None:
        return Response(status, headers, await reader.read()), False  # the body ends with the connection
    try:
        return Response(status, headers, await reader.readexactly(int(length))), keep
    except asyncio.IncompleteReadError:
        raise ProtocolError("the connection closed inside an answer's body") from None
    except ValueError:
        raise ProtocolError(f"Content-Length {length[:40]!r} is not a size") from None


def _parse_head(head: bytes) -> tuple[int, bytes, dict[str, str]]:
    lines = head[:-4].split(b"\r\n")
    version, _, rest = lines[0].partition(b" ")
    try:
        status = int(rest[:3])
    except ValueError:
        raise ProtocolError(f"not an HTTP status line: {lines[0][:80]!r}") from None
    if not version.startswith(b"HTTP/1."):
        raise ProtocolError(f"not an HTTP/1 answer: {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        headers[name.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")
    return status, version, headers


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    parts: list[bytes] = []
    try:
        while True:
            size_line = await reader.readuntil(b"\r\n")
            try:
                size = int(size_line.split(b";", 1)[0], 16)
            except ValueError:
                raise ProtocolError(f"not a chunk size: {size_line[:40]!r}") from None
            if size == 0:
                while await reader.readuntil(b"\r\n") != b"\r\n":
                    pass  # trailers, which the apiserver does not send
                return b"".join(parts)
            chunk = await reader.readexactly(size + 2)
            parts.append(chunk[:-2])
    except asyncio.IncompleteReadError:
        raise ProtocolError("the connection closed inside a chunked body") from None
    except asyncio.LimitOverrunError:
        raise ProtocolError("a chunk's size line is too long") from None
