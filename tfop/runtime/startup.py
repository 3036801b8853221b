"""Before a command talks to the cluster: credentials that load, and an apiserver that answers.

Every failure is a StartupError (tfop.kube.kubeconfig) whose text is one line
naming the file, context or server and what is wrong, so `tfop run`, `tfop
doctor` and `tfop gang` say that line and exit 1, instead of printing a
traceback or retrying for ever against a server that is not there.
"""
from __future__ import annotations

import asyncio
import atexit
import os
import tempfile
from pathlib import Path
from typing import Any, Mapping

from tfop.kube.kubeconfig import ConfigError, ServerUnreachable, StartupError, load, tls_context

PROBE_TIMEOUT_SECONDS = 10.0
# Every user may read it (system:public-info-viewer), so only an unknown user is refused.
PROBE_PATH = "/version"
UNAUTHORIZED = 401


def one_line(err: BaseException) -> str:
    """An exception's text on one line (a loader's message may span several)."""
    text = " ".join(str(err).split())
    return text or type(err).__name__


def check_credentials(kubeconfig: str | None, context: str | None, environ: Mapping[str, str]) -> None:
    """ConfigError (one line) when the credentials cannot work; the checks keep nothing.

    What only the official loader reads (auth providers, merged KUBECONFIG lists)
    passes here and is judged by that loader.
    """
    if kubeconfig and os.pathsep in kubeconfig:  # a KUBECONFIG list, merged by the official loader
        kubeconfig, environ = None, {**environ, "KUBECONFIG": kubeconfig}
    with tempfile.TemporaryDirectory(prefix="tfop-check-") as secrets:  # embedded keys land here
        endpoint = load(kubeconfig, context, environ, secrets_dir=Path(secrets))
        if endpoint is not None:
            tls_context(endpoint)


def load_credentials(kubeconfig: str | None, context: str | None = None,
                     environ: Mapping[str, str] = os.environ):
    """The Credentials (tfop.kube.client) of every tfop command, or a StartupError saying why there are none."""
    from tfop.kube.credentials import Credentials

    check_credentials(kubeconfig, context, environ)
    try:
        return Credentials.load(kubeconfig, context, environ)
    except StartupError:
        raise
    except Exception as err:  # the official loader's own failures (auth providers, merged lists)
        where = f" from {kubeconfig}" if kubeconfig else ""
        raise ConfigError(f"cannot load credentials{where}: {type(err).__name__}: {one_line(err)}") from None


async def probe(credentials: Any, timeout: float = PROBE_TIMEOUT_SECONDS) -> None:
    """One GET of PROBE_PATH: ServerUnreachable unless the apiserver answers within `timeout`,
    StartupError when it does not know these credentials."""
    import aiohttp

    from tfop.kube.client import ApiError, KubeClient

    server = credentials.server
    try:
        async with KubeClient(credentials, max_connections=1) as client:
            await asyncio.wait_for(client.request("GET", PROBE_PATH, timeout=timeout), timeout)
    except ApiError as err:
        if err.status == UNAUTHORIZED:
            raise StartupError(f"the apiserver at {server} does not accept these credentials: "
                               f"{err.status} {err.message}") from None
        # Any other answer: the apiserver is there; what the operator may do is checked as it works.
    except asyncio.TimeoutError:
        raise ServerUnreachable(f"no answer from the apiserver at {server} within {timeout:g}s") from None
    except (aiohttp.ClientError, OSError, ValueError) as err:
        raise ServerUnreachable(f"cannot reach the apiserver at {server}: {one_line(err)}") from None


async def operator_preflight(kubeconfig: str | None) -> None:
    """What `tfop run` checks before it starts: StartupError when it could never work."""
    await probe(load_credentials(kubeconfig, None))


def official_client(kubeconfig: str | None, context: str | None,
                    environ: Mapping[str, str] = os.environ, timeout: float = PROBE_TIMEOUT_SECONDS):
    """An ApiClient of the official `kubernetes` package, on the credentials `tfop run` loads
    (load_credentials), whose apiserver answered; or a StartupError.

    Requests are not retried, so a server that goes away mid-command is one error, not
    three warnings and a traceback.
    """
    from kubernetes import client

    credentials = load_credentials(kubeconfig, context, environ)
    api = client.ApiClient(configuration=official_configuration(credentials, asyncio.run(credentials.authenticate())))
    official_probe(api, timeout)
    return api


def official_configuration(credentials: Any, plugin_said: Any = None) -> Any:
    """The official client's Configuration for these credentials; `plugin_said` is what an exec
    plugin printed (a token, or a client certificate and key, written to a private directory
    removed when the command exits: the official client reads certificates from files only)."""
    from kubernetes import client

    cfg = type.__call__(client.Configuration)  # a fresh one, not the process-wide default
    cfg.retries = False
    cfg.host, cfg.verify_ssl = credentials.server, credentials.verify
    cfg.proxy, cfg.tls_server_name = credentials.proxy, credentials.server_hostname
    cfg.cert_file, cfg.key_file, cfg.ssl_ca_cert = credentials.cert_file, credentials.key_file, credentials.ca_file
    pems = {"ca.crt": credentials.ca_data}
    if plugin_said is not None and plugin_said.client_certificate:
        pems.update({"client.crt": plugin_said.client_certificate, "client.key": plugin_said.client_key})
    if any(pems.values()):
        private = tempfile.TemporaryDirectory(prefix="tfop-cli-")
        atexit.register(private.cleanup)
        files = {}
        for name, pem in pems.items():
            if pem:
                files[name] = Path(private.name) / name
                files[name].write_text(pem)
        cfg.ssl_ca_cert = str(files.get("ca.crt") or cfg.ssl_ca_cert or "") or None
        cfg.cert_file = str(files.get("client.crt") or cfg.cert_file or "") or None
        cfg.key_file = str(files.get("client.key") or cfg.key_file or "") or None
    token = credentials.bearer()
    if token:
        cfg.api_key = {"authorization": f"Bearer {token}"}
    return cfg


def official_probe(api: Any, timeout: float = PROBE_TIMEOUT_SECONDS) -> None:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    server = api.configuration.host
    try:
        client.VersionApi(api).get_code(_request_timeout=timeout)
    except ApiException as err:
        if err.status == UNAUTHORIZED:
            raise StartupError(f"the apiserver at {server} does not accept these credentials: "
                               f"{err.status} {err.reason}") from None
    except Exception as err:  # urllib3's connection, TLS and timeout errors
        raise ServerUnreachable(f"cannot reach the apiserver at {server}: {unreachable_reason(err)}") from None


def unreachable_reason(err: BaseException) -> str:
    """urllib3 wraps the cause (refused, TLS, timeout) in a pool error naming an object: the cause."""
    reason = getattr(err, "reason", None) or err
    text = one_line(reason)
    # "<urllib3.connection.HTTPSConnection object at 0x..>: Failed to establish ...": drop the object
    return text.split(">: ", 1)[1] if text.startswith("<") and ">: " in text else text
