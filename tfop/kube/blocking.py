"""KubeClient for a command that makes a few calls and exits (`tfop doctor`, `tfop gang`).

The calls run on a private event loop in the calling thread, through the same KubeClient, the
same credentials and the same aiohttp session as `tfop run`: one HTTP stack for every command.
"""
from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Self, TypeVar

from tfop.kube.client import ApiError, KubeClient, check_answers, collection_path
from tfop.kube.credentials import Credentials

T = TypeVar("T")
# A command's connections: it sends one request at a time.
COMMAND_CONNECTIONS = 4


class BlockingClient:
    """`with BlockingClient(credentials) as api:` checks that the apiserver answers, then each
    method sends one request and returns its answer as plain JSON (dicts and lists)."""

    def __init__(self, credentials: Credentials, user_agent: str = "tfop-cli"):
        self.client = KubeClient(credentials, max_connections=COMMAND_CONNECTIONS, user_agent=user_agent)
        self._loop = asyncio.new_event_loop()

    def __enter__(self) -> Self:
        try:
            self.run(self.client.__aenter__())
            self.run(check_answers(self.client))
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._loop.is_closed():
            return
        try:
            self._loop.run_until_complete(self.client.__aexit__(None, None, None))
        finally:
            self._loop.close()

    def run(self, awaitable: Awaitable[T]) -> T:
        return self._loop.run_until_complete(awaitable)

    def call(self, function: Callable[..., Awaitable[T]], *args: Any) -> T:
        """`function(client, *args)`, an async helper written once for every command, awaited here."""
        return self.run(function(self.client, *args))

    def get(self, api_version: str, plural: str, namespace: str | None, name: str) -> dict | None:
        """The object, or None when there is none (404)."""
        return self.run(self.client.get(api_version, plural, namespace, name))

    def list(self, api_version: str, plural: str, namespace: str | None = None, label_selector: str | None = None,
             field_selector: str | None = None, most: int | None = None) -> list[dict]:
        """The items of one consistent listing; only its first page, of at most `most` items, when given."""
        if most is None:
            listing = self.run(self.client.list(api_version, plural, namespace, label_selector,
                                                field_selector=field_selector))
            return listing["items"]

        async def first_page() -> list[dict]:
            async for page, _ in self.client.list_pages(api_version, plural, namespace, label_selector, most,
                                                        field_selector):
                return page.get("items") or []
            return []
        return self.run(first_page())

    def create(self, obj: Mapping[str, Any], plural: str) -> dict | None:
        return self.run(self.client.create(obj, plural))

    def json_patch(self, api_version: str, plural: str, namespace: str | None, name: str,
                   patch: Sequence[Mapping[str, Any]], field_manager: str) -> dict:
        """An RFC 6902 patch; its `test` operations make a concurrent edit fail with ApiError 422."""
        path = f"{collection_path(api_version, plural, namespace)}/{name}"
        return self.run(self.client.request("PATCH", path, patch, params={"fieldManager": field_manager},
                                            content_type="application/json-patch+json"))


__all__ = ["ApiError", "BlockingClient"]
