"""Before a command talks to the cluster: credentials that load, and an apiserver that answers.

Every failure is a StartupError (tfop.kube.kubeconfig) whose text is one line
naming the file, context or server and what is wrong, so `tfop run`, `tfop
doctor` and `tfop gang` say that line and exit 1, instead of printing a
traceback or retrying for ever against a server that is not there.
"""
from __future__ import annotations

import asyncio
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


def operator_credentials(kubeconfig: str | None, environ: Mapping[str, str] = os.environ):
    """The operator's Credentials (tfop.kube.client), or a StartupError saying why there are none."""
    from tfop.kube.client import Credentials

    check_credentials(kubeconfig, None, environ)
    try:
        return Credentials.load(kubeconfig)
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
    await probe(operator_credentials(kubeconfig))


def official_client(kubeconfig: str | None, context: str | None,
                    environ: Mapping[str, str] = os.environ, timeout: float = PROBE_TIMEOUT_SECONDS):
    """An ApiClient of the official `kubernetes` package whose apiserver answered, or a StartupError.

    Requests are not retried, so a server that goes away mid-command is one error, not
    three warnings and a traceback.
    """
    from kubernetes import client, config

    check_credentials(kubeconfig, context, environ)
    cfg = type.__call__(client.Configuration)  # a fresh one, not the process-wide default
    cfg.retries = False
    try:
        config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=cfg)
    except config.ConfigException as err:
        if kubeconfig or context:
            raise ConfigError(f"kubeconfig {kubeconfig or '(default)'}: {one_line(err)}") from None
        try:
            config.load_incluster_config(client_configuration=cfg)
        except config.ConfigException as err2:
            raise ConfigError(f"no usable kubeconfig, and not in a pod: {one_line(err2)}") from None
    except Exception as err:  # the loader's other failures (an exec plugin that fails, ...)
        raise ConfigError(f"cannot load credentials: {type(err).__name__}: {one_line(err)}") from None
    api = client.ApiClient(configuration=cfg)
    official_probe(api, timeout)
    return api


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
