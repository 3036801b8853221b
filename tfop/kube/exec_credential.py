"""Exec credential plugins (a kubeconfig user's `exec`): run without blocking, kept until due.

As kubectl does, the plugin runs with the kubeconfig's args and env added to
the process's environment, and KUBERNETES_EXEC_INFO describing the call (never
interactive: the operator has no terminal). It prints an ExecCredential
(client.authentication.k8s.io v1 or v1beta1): a bearer token, a client
certificate and key, or both, and maybe when they expire. The answer is kept
and the plugin run again shortly before that (`refresh_time`), or once after
the apiserver answered 401 to it. Cloud tokens (EKS, GKE) live 15 minutes to
an hour: read once, every request after that would be refused.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import ssl
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from tfop.kube.kubeconfig import ConfigError, Endpoint, ExecConfig, tls_context

log = logging.getLogger("tfop")

RUN_TIMEOUT_SECONDS = 30.0
MAX_OUTPUT_BYTES = 1 << 20  # an ExecCredential is a few KB; more is not one
MAX_STDERR_BYTES = 64 << 10  # kept for the message; the rest is read and dropped
MESSAGE_CHARS = 300
# Run again when less than a tenth of the credential's life, or a minute, is left (whichever is
# more), but never in the first half of its life: a token of 10 s is not fetched for every request.
REFRESH_FRACTION, REFRESH_MARGIN_SECONDS = 0.1, 60.0
# A failed run while the credential still holds: keep it, try again this much later.
RETRY_AFTER_FAILURE_SECONDS = 10.0


class ExecPluginError(ConfigError):
    """The plugin could not run, failed, or printed no usable ExecCredential; one line naming it."""


@dataclass(frozen=True)
class ExecCredential:
    """What a plugin printed."""
    token: str | None = None
    client_certificate: str | None = None  # PEM
    client_key: str | None = None  # PEM
    expires_at: float | None = None  # seconds since the epoch; None: until the apiserver refuses it


def parse_credential(output: bytes | str, api_version: str) -> ExecCredential:
    """The ExecCredential a plugin printed; ValueError (one line) saying what is wrong with it."""
    try:
        doc = json.loads(output)
    except (ValueError, RecursionError) as err:
        raise ValueError(f"did not print an ExecCredential as JSON: {one_line(str(err))}") from None
    if not isinstance(doc, dict) or doc.get("kind") != "ExecCredential":
        raise ValueError("printed JSON that is not an ExecCredential")
    if doc.get("apiVersion") != api_version:
        printed = str(doc.get("apiVersion"))[:100]
        raise ValueError(f"printed apiVersion {printed!r}; the kubeconfig asks for {api_version}")
    status = doc.get("status")
    if not isinstance(status, dict):
        raise ValueError("printed an ExecCredential without a status")
    token, cert, key = (_text(status, k) for k in ("token", "clientCertificateData", "clientKeyData"))
    if bool(cert) != bool(key):
        raise ValueError("printed only one of status.clientCertificateData and status.clientKeyData")
    if not token and not cert:
        raise ValueError("printed neither status.token nor a client certificate")
    if token and any(c.isspace() or not c.isprintable() for c in token):
        raise ValueError("printed a status.token with spaces or control characters")
    return ExecCredential(token, cert, key, _timestamp(status.get("expirationTimestamp")))


def _text(status: Mapping, key: str) -> str | None:
    value = status.get(key)
    if value is not None and not isinstance(value, str):
        raise ValueError(f"printed a status.{key} that is not a string")
    return value or None


def _timestamp(value: object) -> float | None:
    if value in (None, ""):
        return None
    try:
        moment = datetime.fromisoformat(str(value).replace("z", "Z"))
    except ValueError:
        raise ValueError(f"printed status.expirationTimestamp {str(value)[:60]!r}, not an RFC 3339 time") from None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def refresh_time(obtained_at: float, expires_at: float | None) -> float | None:
    """When to run the plugin again for a credential obtained at `obtained_at`; None: not before a 401."""
    if expires_at is None:
        return None
    lifetime = expires_at - obtained_at
    return expires_at - min(max(REFRESH_FRACTION * lifetime, REFRESH_MARGIN_SECONDS), lifetime / 2)


def exec_info(config: ExecConfig) -> str:
    """KUBERNETES_EXEC_INFO, as kubectl sets it: an ExecCredential of spec only."""
    spec: dict = {"interactive": False}
    if config.cluster_info:
        spec["cluster"] = json.loads(config.cluster_info)
    return json.dumps({"apiVersion": config.api_version, "kind": "ExecCredential", "spec": spec},
                      separators=(",", ":"))


def exec_env(config: ExecConfig, environ: Mapping[str, str]) -> dict[str, str]:
    return {**environ, **dict(config.env), "KUBERNETES_EXEC_INFO": exec_info(config)}


def one_line(text: str) -> str:
    """The first non-empty line of `text`, bounded."""
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return line[:MESSAGE_CHARS] + ("..." if len(line) > MESSAGE_CHARS else "")


async def _read(stream: asyncio.StreamReader, limit: int) -> tuple[bytes, bool]:
    """Everything the stream gives until it ends, the first `limit` bytes kept; and whether more came."""
    kept, more = bytearray(), False
    while chunk := await stream.read(1 << 16):
        more = more or len(kept) + len(chunk) > limit
        kept += chunk[: max(limit - len(kept), 0)]
    return bytes(kept), more


async def run_plugin(config: ExecConfig, environ: Mapping[str, str],
                     timeout: float = RUN_TIMEOUT_SECONDS) -> ExecCredential:
    """Run the plugin once, within `timeout`; ExecPluginError naming the command when that fails."""
    name = f"exec plugin {config.command}"
    try:
        proc = await asyncio.create_subprocess_exec(
            config.command, *config.args, env=exec_env(config, environ), stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    except OSError as err:
        hint = f" ({one_line(config.install_hint)})" if config.install_hint else ""
        raise ExecPluginError(f"{name}: cannot run it: {err.strerror or err}{hint}") from None

    async def communicate() -> tuple[bytes, bool, bytes, int]:
        assert proc.stdout is not None and proc.stderr is not None  # both are PIPEs
        (out, too_much), (stderr, _) = await asyncio.gather(_read(proc.stdout, MAX_OUTPUT_BYTES),
                                                            _read(proc.stderr, MAX_STDERR_BYTES))
        return out, too_much, stderr, await proc.wait()
    try:
        out, too_much, stderr, code = await asyncio.wait_for(communicate(), timeout)
    except TimeoutError:
        raise ExecPluginError(f"{name}: no answer within {timeout:g}s") from None
    finally:
        if proc.returncode is None:  # timed out, or the caller was cancelled
            proc.kill()
            await proc.wait()
    if code != 0:
        said = one_line(stderr.decode(errors="replace")) or "nothing on stderr"
        raise ExecPluginError(f"{name}: exited with code {code}: {said}")
    if too_much:
        raise ExecPluginError(f"{name}: printed more than {MAX_OUTPUT_BYTES} bytes")
    try:
        return parse_credential(out, config.api_version)
    except ValueError as err:
        raise ExecPluginError(f"{name}: {err}") from None


def certificate_context(endpoint: Endpoint, cert_pem: str, key_pem: str, command: str) -> ssl.SSLContext:
    """The endpoint's TLS settings with a plugin's client certificate. The PEM files live only while
    they load: ssl reads a key from a file, and the context keeps it."""
    ctx = tls_context(endpoint)
    folder = tempfile.mkdtemp(prefix="tfop-exec-")  # mode 0700
    try:
        paths = []
        for name, text in (("client.crt", cert_pem), ("client.key", key_pem)):
            paths.append(os.path.join(folder, name))
            with os.fdopen(os.open(paths[-1], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
                f.write(text)
        ctx.load_cert_chain(*paths)
    except (ssl.SSLError, ValueError) as err:
        raise ExecPluginError(f"exec plugin {command}: its client certificate and key do not load: "
                              f"{one_line(str(err))}") from None
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return ctx


@dataclass
class _Held:
    credential: ExecCredential
    refresh_at: float | None
    retry_at: float = 0.0  # after a failed run, not before this


class ExecAuthenticator:
    """One plugin's credential, shared by every request: run when first needed, again when due
    (refresh_time) or after a 401, one run at a time."""

    def __init__(self, config: ExecConfig, endpoint: Endpoint, environ: Mapping[str, str],
                 clock: Callable[[], float] = time.time,
                 runner: Callable[[ExecConfig, Mapping[str, str]], Awaitable[ExecCredential]] = run_plugin):
        self.config, self.endpoint, self.environ = config, endpoint, environ
        self.clock, self.runner = clock, runner
        self._held: _Held | None = None
        self._ssl: ssl.SSLContext | None = None
        self._ssl_for: tuple[str | None, str | None] = (None, None)
        self._lock = asyncio.Lock()

    def token(self) -> str | None:
        return self._held.credential.token if self._held else None

    def ssl_context(self) -> ssl.SSLContext | None:
        """With the plugin's client certificate; None when it gave none."""
        return self._ssl

    async def credential(self) -> ExecCredential:
        """The credential a request carries now: the held one, or a new one when it is due."""
        held = self._held
        if held is not None and not self._due(held):
            return held.credential
        async with self._lock:
            current = self._held
            if current is not held:  # another request ran the plugin meanwhile
                assert current is not None  # a held credential is replaced, never dropped
                return current.credential
            return await self._refresh(held)

    async def rejected(self, used: ExecCredential | None) -> bool:
        """The apiserver answered 401 to `used`: run the plugin again (once for every request that
        carried it). True when there is another credential to try."""
        async with self._lock:
            held = self._held
            if held is None or held.credential != used:
                return held is not None  # replaced since that request was sent
            try:
                await self._refresh(held, forced=True)
            except ExecPluginError as err:
                log.warning("after a 401: %s", err)
                return False
            assert self._held is not None  # _refresh holds what the plugin printed, or raises
            return self._held.credential != used

    def _due(self, held: _Held) -> bool:
        now = self.clock()
        return held.refresh_at is not None and now >= held.refresh_at and now >= held.retry_at

    async def _refresh(self, held: _Held | None, forced: bool = False) -> ExecCredential:
        now = self.clock()
        try:
            credential = await self.runner(self.config, self.environ)
            self._use_certificate(credential)
        except ExecPluginError as err:
            expires = held.credential.expires_at if held else None
            if held is None or forced or (expires is not None and now >= expires):
                raise
            log.warning("%s; keeping the current credential, which expires in %.0fs",
                        err, (expires or now) - now)
            held.retry_at = now + RETRY_AFTER_FAILURE_SECONDS
            return held.credential
        self._held = _Held(credential, refresh_time(now, credential.expires_at))
        return credential

    def _use_certificate(self, credential: ExecCredential) -> None:
        pair = (credential.client_certificate, credential.client_key)
        if pair != self._ssl_for:
            self._ssl = certificate_context(self.endpoint, pair[0], pair[1], self.config.command) \
                if pair[0] and pair[1] else None
            self._ssl_for = pair
