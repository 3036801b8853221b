"""A small asyncio Kubernetes client: just the verbs tfop uses, never blocking the loop.

Credentials come from the kubeconfig or the in-cluster service account
(tfop.kube.kubeconfig, exec plugins run by tfop.kube.exec_credential, or the
official client's loader for auth providers and the like). Requests go through
tfop.kube.http1's bounded pool of kept-alive connections; watches, and every
request when the cluster has a proxy, through one aiohttp session.
"""
from __future__ import annotations

import asyncio
import os
import random
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Mapping
from urllib.parse import urlencode

import aiohttp

from tfop.api import codec
from tfop.kube.exec_credential import ExecAuthenticator, ExecCredential
from tfop.kube.http1 import ConnectionPool, Response, StaleConnection
from tfop.kube.kubeconfig import ConfigError, Endpoint, proxy_url, tls_context, with_env_proxy


class ApiError(Exception):
    def __init__(self, status: int, body: Any, method: str, path: str):
        self.status, self.body = status, body
        self.request = f"{method} {path}"
        # The apiserver's own words (a Status object's message), without the request line.
        self.message = str(body.get("message", "") if isinstance(body, dict) else str(body)[:300])
        super().__init__(f"{self.request}: {status} {self.message}")


@dataclass(frozen=True)
class Credentials:
    server: str
    ssl_context: ssl.SSLContext | bool
    token_file: str | None = None
    token: str | None = None
    ca_file: str | None = None
    ca_data: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    verify: bool = True
    proxy: str | None = None  # http:// or https://: proxy-url, else $HTTPS_PROXY as client-go
    server_hostname: str | None = None  # tls-server-name: the name the certificate is checked against
    exec_auth: ExecAuthenticator | None = None  # the user's exec plugin, run when its credential is due

    @classmethod
    def load(cls, kubeconfig: str | None = None, context: str | None = None,
             environ: Mapping[str, str] | None = None) -> "Credentials":
        """ConfigError (one line) when they cannot work; an exec plugin first runs at the first request."""
        from tfop.kube.kubeconfig import load as load_endpoint

        environ = os.environ if environ is None else environ
        endpoint = load_endpoint(kubeconfig, context, environ)
        if endpoint is None:
            endpoint = with_env_proxy(_official_endpoint(kubeconfig, context), environ)
        plugin = endpoint.exec_plugin
        return cls(server=endpoint.server, ssl_context=tls_context(endpoint), token_file=endpoint.token_file,
                   token=endpoint.token, ca_file=endpoint.ca_file, ca_data=endpoint.ca_data,
                   cert_file=endpoint.cert_file, key_file=endpoint.key_file, verify=endpoint.verify,
                   proxy=endpoint.proxy_url, server_hostname=endpoint.tls_server_name,
                   exec_auth=ExecAuthenticator(plugin, endpoint, environ) if plugin else None)

    async def authenticate(self) -> ExecCredential | None:
        """Before a request: the exec plugin's credential, run again when due; None for the others."""
        return await self.exec_auth.credential() if self.exec_auth else None

    async def rejected(self, used: ExecCredential | None) -> bool:
        """After a 401 to a request that carried `used`: True when a new credential is worth one more try."""
        return self.exec_auth is not None and await self.exec_auth.rejected(used)

    def tls(self) -> ssl.SSLContext | bool:
        """The TLS context of the next connection: with the exec plugin's client certificate, which may change."""
        return (self.exec_auth and self.exec_auth.ssl_context()) or self.ssl_context

    def transport(self) -> dict[str, Any]:
        """aiohttp's per-request connection arguments: the TLS context, the proxy, the name the
        server's certificate must hold."""
        options: dict[str, Any] = {"ssl": self.tls()}
        if self.proxy:
            options["proxy"] = self.proxy
        if self.server_hostname:
            options["server_hostname"] = self.server_hostname
        return options

    def to_kopf(self):
        import kopf

        return kopf.ConnectionInfo(
            server=self.server, ca_path=self.ca_file, ca_data=self.ca_data, insecure=not self.verify, token=self.bearer(),
            certificate_path=self.cert_file, private_key_path=self.key_file,
        )

    def bearer(self) -> str | None:
        if self.exec_auth is not None:
            return self.exec_auth.token()
        if self.token_file and Path(self.token_file).exists():
            return Path(self.token_file).read_text().strip()
        return self.token


def _official_endpoint(kubeconfig: str | None, context: str | None) -> Endpoint:
    """Auth providers, basic auth, merged KUBECONFIG lists: the official client's loader; its
    failures are a ConfigError of one line."""
    try:
        return _official_loader(kubeconfig, context)
    except ConfigError:
        raise
    except Exception as err:  # noqa: BLE001 - the loader's own (ConfigException, an auth provider's, ...)
        where = f" from {kubeconfig}" if kubeconfig else ""
        raise ConfigError(f"cannot load credentials{where}: {type(err).__name__}: {' '.join(str(err).split())}") from None


def _official_loader(kubeconfig: str | None, context: str | None) -> Endpoint:
    from kubernetes import client, config

    cfg = client.Configuration()
    try:
        config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=cfg)
        token_file = None
    except (config.ConfigException, FileNotFoundError, TypeError):
        if kubeconfig:
            raise
        config.load_incluster_config(client_configuration=cfg)
        token_file = "/var/run/secrets/kubernetes.io/serviceaccount/token"
    auth = cfg.api_key.get("authorization") or cfg.api_key.get("BearerToken")
    token = None
    if auth:
        prefix = cfg.api_key_prefix.get("authorization", "")
        token = auth.split(" ", 1)[1] if auth.lower().startswith("bearer ") else auth
        if prefix and prefix.lower() != "bearer":
            token = auth
    # The loader's proxy when the kubeconfig names one (newer clients also fill it from the environment).
    proxy = None if getattr(cfg, "_proxy_from_env", False) else getattr(cfg, "proxy", None)
    return Endpoint(server=cfg.host.rstrip("/"), ca_file=cfg.ssl_ca_cert, verify=cfg.verify_ssl, token=token,
                    token_file=token_file, cert_file=cfg.cert_file, key_file=cfg.key_file,
                    proxy_url=proxy_url(proxy, "proxy-url"), tls_server_name=getattr(cfg, "tls_server_name", None))


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


class NotLeading(Exception):
    """A write refused before it was sent: this replica does not hold the leader Lease (any more)."""


class KubeClient:
    def __init__(self, credentials: Credentials, max_connections: int = 64, user_agent: str = "tfop",
                 write_gate: Callable[[], bool] | None = None):
        self.credentials = credentials
        self._session: aiohttp.ClientSession | None = None
        self._pool: ConnectionPool | None = None  # None through a proxy: aiohttp then carries every request
        self._max_connections = max_connections
        self.user_agent = user_agent  # names the replica in the apiserver's audit log
        # Asked before every write but the Lease's own: with leader election, only a leader writes.
        self.write_gate = write_gate
        self.on_response: Callable[[str, str, int], None] | None = None  # (method, path, code): metrics
        self.requests = 0  # issued, for the operator's own log line; the benchmark reads the apiserver's

    async def __aenter__(self) -> "KubeClient":
        connector = aiohttp.TCPConnector(limit=self._max_connections, ssl=self.credentials.ssl_context)
        self._session = aiohttp.ClientSession(
            connector=connector, timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
            json_serialize=lambda o: codec.dumps(o).decode(),
        )
        if not self.credentials.proxy:
            self._pool = ConnectionPool.for_server(self.credentials.server, self.credentials.tls,
                                                  self.credentials.server_hostname, self._max_connections)
        return self

    async def __aexit__(self, *exc) -> None:
        if self._pool:
            self._pool.close()
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
            except (aiohttp.ClientConnectionError, StaleConnection):
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
                await asyncio.sleep(_retry_after(response.headers.get("retry-after"), attempt))
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
        if self._pool is not None:
            target = self._pool.prefix + path + ("?" + urlencode(params) if params else "")
            lines = "".join(f"{name}: {value}\r\n" for name, value in self._headers(content_type).items())
            return await self._pool.request(method, target, lines.encode("latin-1"), data, timeout)
        async with self._session.request(
            method, self.credentials.server + path, data=data, params=params, headers=self._headers(content_type),
            timeout=aiohttp.ClientTimeout(total=timeout), **self.credentials.transport(),
        ) as response:
            return Response(response.status, {k.lower(): v for k, v in response.headers.items()}, await response.read())

    # -- verbs ------------------------------------------------------------------
    async def create(self, obj: Mapping[str, Any], plural: str, dry_run: bool = False, gated: bool = True) -> dict | None:
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
                     propagation: str | None = None) -> dict | None:
        """Delete; an object already gone (404) counts as deleted."""
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation} if propagation else None
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

    async def list(self, api_version: str, plural: str, namespace: str | None = None,
                   label_selector: str | None = None, limit: int = LIST_PAGE_SIZE) -> dict:
        """Every page of a LIST as one list: its items and the metadata (resourceVersion) of its snapshot."""
        items: list = []
        listing: dict = {}
        async for page, first in self.list_pages(api_version, plural, namespace, label_selector, limit):
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
                    field_selector: str | None = None) -> AsyncIterator[dict]:
        params = {"watch": "true", "resourceVersion": resource_version, "allowWatchBookmarks": "true",
                  "timeoutSeconds": str(timeout_seconds)}
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        self.requests += 1
        used = await self.credentials.authenticate()
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
            async for chunk in response.content.iter_any():
                lines = (rest + chunk).split(b"\n")  # one split per chunk: a chunk may hold many events
                rest = lines.pop()
                for line in lines:
                    if line.strip():
                        yield codec.loads(line)

    async def post_event(self, involved: Mapping[str, Any], etype: str, reason: str, message: str,
                         now: str, component: str = "tfop", count: int = 1) -> dict:
        """Post a core v1 Event on `involved`; returns the created Event (its name is generated)."""
        event = event_object(involved, etype, reason, message, now, component, count)
        return await self.request("POST", collection_path("v1", "events", event["metadata"]["namespace"]), event)

    async def patch_event(self, namespace: str, name: str, count: int, now: str) -> dict | None:
        """Count a repeat on a posted Event; None when it is gone (Events expire after an hour)."""
        return await self.merge_patch("v1", "events", namespace, name, {"count": count, "lastTimestamp": now})


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
