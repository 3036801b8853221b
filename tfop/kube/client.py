"""A small asyncio Kubernetes client: just the verbs tfop uses, never blocking the loop.

Credentials come from tfop.kube.credentials. Every request and watch goes through one aiohttp
session: a bounded pool of kept-alive connections, the proxy and the TLS settings the
credentials name.
"""
from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, NamedTuple, Self

import aiohttp

from tfop.api import codec
from tfop.kube.credentials import Credentials, one_line
from tfop.kube.kubeconfig import ServerUnreachable, StartupError
from tfop.kube.ticks import Tick, sleep_to_tick


class ApiError(Exception):
    def __init__(self, status: int, body: Any, method: str, path: str):
        self.status, self.body = status, body
        self.request = f"{method} {path}"
        # The apiserver's own words (a Status object's message), without the request line.
        self.message = str(body.get("message", "") if isinstance(body, dict) else str(body)[:300])
        super().__init__(f"{self.request}: {status} {self.message}")


# Like client-go: a request answered 429 is sent again up to this many times.
THROTTLE_RETRIES = 10


def _retry_after(header: str | None, attempt: int) -> float:
    """The apiserver's Retry-After (seconds, usually 1), spread so a burst does not return at once."""
    try:
        base = min(max(float(header), 0.1), 10.0) if header else 1.0
    except ValueError:
        base = 1.0
    return base * (1 + random.random()) * min(2 ** attempt, 4) / 2


def collection_path(api_version: str, plural: str, namespace: str | None = None) -> str:
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    return f"{base}/namespaces/{namespace}/{plural}" if namespace else f"{base}/{plural}"


# A LIST asks for this many objects a request (client-go's informers ask for 500 too): no answer of
# 100,000 pods held whole in memory, none that outlasts its timeout.
LIST_PAGE_SIZE = 500
# A listing whose continue token expired (410 Gone: etcd compacted its snapshot) starts over this
# many times at most; then the 410 goes to the caller (an informer relists after its backoff).
LIST_RESTARTS = 3
# A watch's answer read ahead of its reader: aiohttp stops reading the socket past twice its buffer
# (64 KiB unless told), and the apiserver ends the watch of a client that stops reading for ~0.1 s.
# A burst's pod events come at MB/s while a loop iteration full of passes can take that long.
WATCH_READ_BUFFER = 1 << 20


async def paginate(fetch: Callable[[str | None], Any],
                   restarts: int = LIST_RESTARTS) -> AsyncIterator[tuple[dict, bool]]:
    """The pages of one consistent listing, as (page, first); `fetch(continue_token)` asks for a page.

    `first` is True for the page that begins a listing: the first one, or the first of a listing
    started over because its continue token expired (410). The pages after that come from a newer
    snapshot, so a caller drops what the earlier pages told it.
    """
    token: str | None = None
    while True:
        try:
            page = await fetch(token)
        except ApiError as err:
            if err.status != 410 or token is None or restarts <= 0:
                raise
            restarts -= 1
            token = None
            continue
        yield page, token is None
        token = (page.get("metadata") or {}).get("continue") or None
        if token is None:
            return


class Response(NamedTuple):
    status: int
    retry_after: str | None  # the Retry-After header of a 429
    body: bytes


class NotLeading(Exception):
    """A write refused before it was sent: this replica does not hold the leader Lease (any more)."""


class KubeClient:
    def __init__(self, credentials: Credentials, max_connections: int = 64, user_agent: str = "tfop",
                 write_gate: Callable[[], bool] | None = None, watch_pace: float = 0.0):
        self.credentials = credentials
        self.watch_pace = watch_pace  # seconds between a watch's reads of its socket (let_gather); 0: as data comes
        self._session: aiohttp.ClientSession | None = None
        self._timeouts: dict[float, aiohttp.ClientTimeout] = {}
        self._max_connections = max_connections
        self.user_agent = user_agent  # names the replica in the apiserver's audit log
        self.write_gate = write_gate  # asked before every write but the Lease's own: only a leader writes
        self.on_response: Callable[[str, str, int], None] | None = None  # (method, path, code): metrics
        self.requests = 0  # issued, for the operator's own log line; the benchmark reads the apiserver's
        # plural -> [events, bytes, reads] received by watches, counted a read at a time (metrics read it)
        self.watch_received: dict[str, list[int]] = {}

    async def __aenter__(self) -> Self:
        connector = aiohttp.TCPConnector(limit=self._max_connections, ssl=self.credentials.ssl_context)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10)
        self._session = aiohttp.ClientSession(connector=connector, timeout=timeout,
                                              json_serialize=lambda o: codec.dumps(o).decode())
        return self

    async def __aexit__(self, *exc) -> None:
        if self._session:
            await self._session.close()

    def _headers(self, content_type: str | None = None) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": self.user_agent}
        token = self.credentials.bearer()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if content_type:
            headers["Content-Type"] = content_type
        return headers

    async def request(self, method: str, path: str, body: Any = None, params: Mapping[str, str] | None = None,
                      content_type: str = "application/json", timeout: float = 30, gated: bool = True) -> Any:
        data = None if body is None else codec.dumps(body)
        reauthenticated = resent = False
        for attempt in range(THROTTLE_RETRIES + 1):
            used = await self.credentials.authenticate()  # before the gate: a plugin may take seconds
            if gated and method != "GET" and self.write_gate is not None and not self.write_gate():
                raise NotLeading(f"{method} {path} not sent: this replica is not the leader")
            self.requests += 1
            try:
                response = await self._send(method, path, data, params, content_type if body is not None
                                            else None, timeout)
            except aiohttp.ClientConnectionError:
                # A kept-alive connection the server closed as we reused it: a read is safe to send again.
                if method != "GET" or resent:
                    raise
                resent = True
                continue
            if self.on_response is not None:
                self.on_response(method, path, response.status)
            text = response.body
            payload = codec.loads(text) if text and text[:1] in (b"{", b"[") else text.decode(errors="replace")
            if response.status == 429 and attempt < THROTTLE_RETRIES:
                # Too many requests in flight: turned away before it did anything, so any
                # verb may be sent again, after the pause the apiserver asks for.
                await asyncio.sleep(_retry_after(response.retry_after, attempt))
                continue
            if (response.status == 401 and not reauthenticated and attempt < THROTTLE_RETRIES
                    and await self.credentials.rejected(used)):
                reauthenticated = True  # an exec plugin's token refused (revoked, expired early): once more
                continue
            if response.status >= 400:
                raise ApiError(response.status, payload, method, path)
            return payload

    async def _send(self, method: str, path: str, data: bytes | None, params, content_type: str | None,
                    timeout: float) -> Response:
        limit = self._timeouts.get(timeout)
        if limit is None:
            limit = self._timeouts[timeout] = aiohttp.ClientTimeout(total=timeout)
        assert self._session is not None, "KubeClient is used as `async with KubeClient(...)`"
        async with self._session.request(
            method, self.credentials.server + path, data=data, params=params, headers=self._headers(content_type),
            timeout=limit, **self.credentials.transport(),
        ) as response:
            return Response(response.status, response.headers.get("Retry-After"), await response.read())

    # -- verbs ------------------------------------------------------------------
    async def create(self, obj: Mapping[str, Any], plural: str, dry_run: bool = False,
                     gated: bool = True) -> dict | None:
        """Create; a name already taken answers ApiError 409 (whose it is, the caller finds out)."""
        meta = obj["metadata"]
        path = collection_path(obj["apiVersion"], plural, meta.get("namespace"))
        return await self.request("POST", path, obj, params={"dryRun": "All"} if dry_run else None, gated=gated)

    async def replace(self, obj: Mapping[str, Any], plural: str, gated: bool = True) -> dict:
        """PUT the whole object; its metadata.resourceVersion makes a concurrent change answer 409."""
        meta = obj["metadata"]
        path = f"{collection_path(obj['apiVersion'], plural, meta.get('namespace'))}/{meta['name']}"
        return await self.request("PUT", path, obj, gated=gated)

    async def delete(self, api_version: str, plural: str, namespace: str | None, name: str,
                     propagation: str | None = None, grace_period: int | None = None) -> dict | None:
        """Delete; an object already gone (404) counts as deleted. grace_period 0: at once (--force)."""
        named = (("propagationPolicy", propagation), ("gracePeriodSeconds", grace_period))
        options = {k: v for k, v in named if v is not None}
        body = {"kind": "DeleteOptions", "apiVersion": "v1", **options} if options else None
        try:
            return await self.request("DELETE", f"{collection_path(api_version, plural, namespace)}/{name}", body)
        except ApiError as err:
            if err.status == 404:
                return None
            raise

    async def merge_patch(self, api_version: str, plural: str, namespace: str | None, name: str, patch: Any,
                          subresource: str = "") -> dict | None:
        path = f"{collection_path(api_version, plural, namespace)}/{name}" + (f"/{subresource}" if subresource else "")
        try:
            return await self.request("PATCH", path, patch, content_type="application/merge-patch+json")
        except ApiError as err:
            if err.status == 404:
                return None
            raise

    async def get(self, api_version: str, plural: str, namespace: str | None, name: str) -> dict | None:
        try:
            return await self.request("GET", f"{collection_path(api_version, plural, namespace)}/{name}")
        except ApiError as err:
            if err.status == 404:
                return None
            raise

    async def list(self, api_version: str, plural: str, namespace: str | None = None, label_selector: str | None = None,
                   limit: int = LIST_PAGE_SIZE, field_selector: str | None = None) -> dict:
        """Every page of a LIST as one list: its items and the metadata (resourceVersion) of its snapshot."""
        items: list = []
        listing: dict = {}
        async for page, first in self.list_pages(api_version, plural, namespace, label_selector, limit, field_selector):
            if first:
                items, listing = [], page
            items += page.get("items") or []
        meta = {k: v for k, v in (listing.get("metadata") or {}).items() if k != "continue"}
        return {**listing, "metadata": meta, "items": items}

    def list_pages(self, api_version: str, plural: str, namespace: str | None = None,
                   label_selector: str | None = None, limit: int = LIST_PAGE_SIZE,
                   field_selector: str | None = None) -> AsyncIterator[tuple[dict, bool]]:
        """The pages of a LIST, `limit` items each, as (page, first): see paginate()."""
        path = collection_path(api_version, plural, namespace)

        async def fetch(token: str | None) -> dict:
            params = {"limit": str(limit)}
            if label_selector:
                params["labelSelector"] = label_selector
            if field_selector:
                params["fieldSelector"] = field_selector
            if token:
                params["continue"] = token
            return await self.request("GET", path, params=params, timeout=120)
        return paginate(fetch)

    async def watch(self, api_version: str, plural: str, namespace: str | None, resource_version: str,
                    label_selector: str | None = None, timeout_seconds: int = 290,
                    field_selector: str | None = None, tick: Tick = sleep_to_tick) -> AsyncIterator[dict]:
        params = {"watch": "true", "resourceVersion": resource_version, "allowWatchBookmarks": "true",
                  "timeoutSeconds": str(timeout_seconds)}
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        self.requests += 1
        used = await self.credentials.authenticate()
        assert self._session is not None, "KubeClient is used as `async with KubeClient(...)`"
        async with self._session.get(
            self.credentials.server + collection_path(api_version, plural, namespace), params=params,
            headers=self._headers(), timeout=aiohttp.ClientTimeout(total=timeout_seconds + 30, sock_read=None),
            read_bufsize=WATCH_READ_BUFFER, **self.credentials.transport(),
        ) as response:
            if self.on_response is not None:
                self.on_response("WATCH", collection_path(api_version, plural, namespace), response.status)
            if response.status >= 400:
                if response.status == 401:
                    await self.credentials.rejected(used)  # the watch started again carries a new credential
                raise ApiError(response.status, await response.text(), "WATCH", plural)
            rest = b""
            received = self.watch_received.setdefault(plural, [0, 0, 0])
            async for chunk in response.content.iter_any():
                lines = (rest + chunk).split(b"\n")  # one split per chunk: a chunk may hold many events
                rest = lines.pop()
                received[:] = received[0] + len(lines), received[1] + len(chunk), received[2] + 1
                for line in lines:
                    if line.strip():
                        yield codec.loads(line)
                if self.watch_pace:
                    await let_gather(response, self.watch_pace, tick)

    async def post_event(self, involved: Mapping[str, Any], etype: str, reason: str, message: str,
                         now: str, component: str = "tfop", count: int = 1) -> dict:
        """Post a core v1 Event on `involved`; returns the created Event (its name is generated)."""
        event = event_object(involved, etype, reason, message, now, component, count)
        return await self.request("POST", collection_path("v1", "events", event["metadata"]["namespace"]), event)

    async def patch_event(self, namespace: str, name: str, count: int, now: str) -> dict | None:
        """Count a repeat on a posted Event; None when it is gone (Events expire after an hour)."""
        return await self.merge_patch("v1", "events", namespace, name, {"count": count, "lastTimestamp": now})


# Every user may read it (system:public-info-viewer), so only an unknown user is refused.
PROBE_PATH = "/version"
PROBE_TIMEOUT_SECONDS = 10.0


async def check_answers(client: KubeClient, timeout: float = PROBE_TIMEOUT_SECONDS) -> None:
    """One GET of PROBE_PATH before a command starts: ServerUnreachable unless the apiserver answers
    within `timeout`, StartupError when it does not know these credentials."""
    server = client.credentials.server
    try:
        await asyncio.wait_for(client.request("GET", PROBE_PATH, timeout=timeout), timeout)
    except ApiError as err:
        if err.status == 401:
            raise StartupError(f"the apiserver at {server} does not accept these credentials: "
                               f"{err.status} {err.message}") from None
        # Any other answer: the apiserver is there; what the command may do is checked as it works.
    except TimeoutError:
        raise ServerUnreachable(f"no answer from the apiserver at {server} within {timeout:g}s") from None
    except (aiohttp.ClientError, OSError, ValueError) as err:
        raise ServerUnreachable(f"cannot reach the apiserver at {server}: {one_line(err)}") from None


async def let_gather(response: aiohttp.ClientResponse, pace: float, tick: Tick = sleep_to_tick) -> None:
    """Leave a response's socket unread until the next multiple of `pace` on the loop's clock
    (tfop.kube.ticks): what arrives meanwhile waits in the kernel and is read in one go, instead of
    waking the process once per event. Under TLS the socket itself is held too (a read buffer limit
    of 0), not only the decrypted stream. Measured in the operator with the tick grid (J=400 gang off,
    e2e/BENCHMARK.md): 15 watch reads a job -> 2.3, 24 wake-ups -> 13, 16.9 ms of CPU a job -> 13.4."""
    transport = response.connection.transport if response.connection is not None else None
    if transport is None or transport.is_closing():
        return
    limits = getattr(transport, "set_read_buffer_limits", None)
    transport.pause_reading()
    if limits is not None:
        limits(high=0, low=0)
    try:
        await tick(pace)  # sleep_to_tick; a test steps its own clock
    finally:
        if not transport.is_closing():
            if limits is not None:
                limits()
            transport.resume_reading()


def event_object(involved: Mapping[str, Any], etype: str, reason: str, message: str, now: str,
                 component: str, count: int) -> dict:
    """A core v1 Event on `involved`, its name generated by the apiserver."""
    meta = involved["metadata"]
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
        "involvedObject": {
            "apiVersion": involved.get("apiVersion"), "kind": involved.get("kind"), "name": meta["name"],
            "namespace": meta["namespace"], "uid": meta.get("uid"), "resourceVersion": meta.get("resourceVersion"),
        },
        "type": etype, "reason": reason, "message": message[:1024],
        "firstTimestamp": now, "lastTimestamp": now, "count": count,
        "source": {"component": component}, "reportingComponent": component,
    }
