"""KubeClient over aiohttp against a real socket (tests/scripted_server.py): what it does when a
kept-alive connection is closed under it or an answer never comes. The apiserver's own answers
are covered by every e2e test."""
from __future__ import annotations

import asyncio

import aiohttp
import pytest

from scripted_server import CLOSE, OK_JSON, SILENT, ScriptedServer
from tfop.kube.client import KubeClient
from tfop.kube.credentials import Credentials


def client(url: str) -> KubeClient:
    return KubeClient(Credentials(server=url, ssl_context=False, token="t0ken"))


def test_the_client_sends_a_read_again_on_a_stale_connection_but_not_a_write():
    async def scenario():
        server = ScriptedServer([OK_JSON, CLOSE, OK_JSON, CLOSE])
        async with server as url:
            async with client(url) as kube:
                await kube.request("GET", "/api/v1/namespaces")
                assert await kube.request("GET", "/api/v1/namespaces") == {"a": True}  # resent
                with pytest.raises(aiohttp.ClientConnectionError):
                    await kube.request("POST", "/api/v1/namespaces", {"kind": "Namespace"})
        return server
    server = asyncio.run(scenario())
    assert [head.split(" ", 2)[:2] for head, _ in server.requests] == [
        ["GET", "/api/v1/namespaces"], ["GET", "/api/v1/namespaces"], ["GET", "/api/v1/namespaces"],
        ["POST", "/api/v1/namespaces"]]
    assert all("Authorization: Bearer t0ken\r\n" in head for head, _ in server.requests)


def test_an_answer_slower_than_the_timeout_is_a_timeout_and_the_next_request_goes_through():
    async def scenario():
        server = ScriptedServer([SILENT, OK_JSON])
        async with server as url:
            async with client(url) as kube:
                with pytest.raises(asyncio.TimeoutError):
                    await kube.request("GET", "/api/v1/namespaces", timeout=0.2)
                return server, await kube.request("GET", "/api/v1/namespaces")
    server, after = asyncio.run(scenario())
    assert after == {"a": True} and server.connections == 2
