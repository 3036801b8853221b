"""Where the apiserver is and who we are to it: load_credentials, the one credential loader of
every tfop command (`run`, `doctor`, `gang`).

It reads the kubeconfig (tfop.kube.kubeconfig: token, token file, client certificate, CA,
insecure, proxy-url, tls-server-name) or the in-cluster service account; exec plugins are run by
tfop.kube.exec_credential, asynchronously, with a deadline, again before their credential
expires and after a 401. What those do not read (auth providers, basic auth, merged KUBECONFIG
lists) goes to the official `kubernetes` client's loader.

Why not the official loader for all of it: `python -m e2e.experiments.credential_loaders`
measures it (kubernetes 35.0.0): with a 4-minute token it runs the exec plugin on every request
(101 runs for a load and 100 requests), a failing plugin leaves it without credentials and
without an error, a hung plugin blocks the loading thread past 10 s (the operator's event loop
with it), and it does not read `proxy-url`.
"""
from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfop.kube.exec_credential import ExecAuthenticator, ExecCredential
from tfop.kube.kubeconfig import ConfigError, Endpoint, proxy_url, tls_context, with_env_proxy


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
             environ: Mapping[str, str] | None = None) -> Credentials:
        """ConfigError (one line) when they cannot work; an exec plugin first runs at the first request."""
        from tfop.kube.kubeconfig import load as load_endpoint

        environ = os.environ if environ is None else environ
        endpoint = load_endpoint(kubeconfig, context, environ)
        if endpoint is None:
            endpoint = with_env_proxy(_official_endpoint(kubeconfig or environ.get("KUBECONFIG"), context), environ)
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

    def bearer(self) -> str | None:
        if self.exec_auth is not None:
            return self.exec_auth.token()
        if self.token_file and Path(self.token_file).exists():
            return Path(self.token_file).read_text().strip()
        return self.token


def load_credentials(kubeconfig: str | None, context: str | None = None,
                     environ: Mapping[str, str] | None = None) -> Credentials:
    """The Credentials of every tfop command, or a ConfigError of one line saying why there are none.

    `kubeconfig` may be a list of files (os.pathsep), merged as a KUBECONFIG list is.
    """
    environ = os.environ if environ is None else environ
    if kubeconfig and os.pathsep in kubeconfig:
        environ = {**environ, "KUBECONFIG": kubeconfig}
        kubeconfig = None
    try:
        return Credentials.load(kubeconfig, context, environ)
    except ConfigError:
        raise
    except Exception as err:  # noqa: BLE001 - an auth provider's or the official loader's own failures
        where = f" from {kubeconfig}" if kubeconfig else ""
        raise ConfigError(f"cannot load credentials{where}: {type(err).__name__}: {one_line(err)}") from None


def one_line(err: BaseException) -> str:
    """An exception's text on one line (a loader's message may span several)."""
    return " ".join(str(err).split()) or type(err).__name__


def _official_endpoint(kubeconfig: str | None, context: str | None) -> Endpoint:
    """Auth providers, basic auth, merged KUBECONFIG lists: the official client's loader; its
    failures are a ConfigError of one line."""
    try:
        return _official_loader(kubeconfig, context)
    except ConfigError:
        raise
    except Exception as err:  # noqa: BLE001 - the loader's own (ConfigException, an auth provider's, ...)
        where = f" from {kubeconfig}" if kubeconfig else ""
        raise ConfigError(f"cannot load credentials{where}: {type(err).__name__}: {one_line(err)}") from None


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
