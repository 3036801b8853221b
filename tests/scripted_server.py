"""A local HTTP server that answers each request with the next scripted bytes: the framings and
failures (a closed or reset connection, no answer) the apiserver rarely shows."""
from __future__ import annotations

import asyncio
import socket
import struct

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
