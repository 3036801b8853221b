"""Read cluster credentials for the common cases without the official client.

Importing `kubernetes` loads its whole generated API (~20 MB of RSS, measured
by e2e.bench at J=1000), and the operator only needs a server, a CA, and a
token or client certificate. This reads the in-cluster service account and
kubeconfig files whose user has a token, a token file or a client
certificate. Anything else (exec plugins, auth providers, basic auth, proxies,
merged KUBECONFIG lists) returns None, and the caller uses the official loader.
"""
from __future__ import annotations

import base64
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import yaml

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
# Keys of a kubeconfig user or cluster that only the official loader understands.
UNSUPPORTED_USER_KEYS = {"exec", "auth-provider", "username", "password", "as", "as-groups", "as-uid",
                         "as-user-extra", "impersonate", "impersonate-groups"}
UNSUPPORTED_CLUSTER_KEYS = {"proxy-url", "tls-server-name", "disable-compression"}


@dataclass(frozen=True)
class Endpoint:
    """Where the apiserver is and how to authenticate; file paths are absolute."""
    server: str
    ca_file: str | None = None
    ca_data: str | None = None  # PEM text
    verify: bool = True
    token: str | None = None
    token_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None


def in_cluster(environ: Mapping[str, str], account_dir: Path = SERVICE_ACCOUNT_DIR) -> Endpoint | None:
    host, port = environ.get("KUBERNETES_SERVICE_HOST"), environ.get("KUBERNETES_SERVICE_PORT")
    token = account_dir / "token"
    if not host or not port or not token.exists():
        return None
    host = f"[{host}]" if ":" in host else host  # IPv6
    ca = account_dir / "ca.crt"
    # Bound service-account tokens rotate: keep the file, read it per request.
    return Endpoint(server=f"https://{host}:{port}", ca_file=str(ca) if ca.exists() else None,
                    token_file=str(token))


def kubeconfig_path(explicit: str | None, environ: Mapping[str, str]) -> Path | None:
    if explicit:
        return Path(explicit).expanduser()
    listed = environ.get("KUBECONFIG")
    if listed:
        paths = [p for p in listed.split(os.pathsep) if p]
        return Path(paths[0]).expanduser() if len(paths) == 1 else None
    default = Path(environ.get("HOME", "~")).expanduser() / ".kube" / "config"
    return default if default.exists() else None


def from_kubeconfig(config: Mapping[str, Any], base_dir: Path, context: str | None = None,
                    secrets_dir: Path | None = None) -> Endpoint | None:
    """The Endpoint of `context` (default: current-context), or None when it needs the official loader."""
    name = context or config.get("current-context")
    ctx = _named(config.get("contexts"), name, "context")
    if ctx is None:
        return None
    cluster = _named(config.get("clusters"), ctx.get("cluster"), "cluster")
    user = _named(config.get("users"), ctx.get("user"), "user") or {}
    if cluster is None or not cluster.get("server") or UNSUPPORTED_CLUSTER_KEYS & cluster.keys():
        return None
    if UNSUPPORTED_USER_KEYS & user.keys():
        return None

    def path(key: str) -> str | None:
        value = cluster.get(key) if key.startswith("certificate-authority") else user.get(key)
        return str((base_dir / Path(value).expanduser()).resolve()) if value else None

    ca_data = cluster.get("certificate-authority-data")
    cert_file, key_file = path("client-certificate"), path("client-key")
    if user.get("client-certificate-data") or user.get("client-key-data"):
        if secrets_dir is None:
            secrets_dir = Path(tempfile.mkdtemp(prefix="tfop-credentials-"))  # mode 0700
        cert_file = _write_secret(secrets_dir / "client.crt", user.get("client-certificate-data"), cert_file)
        key_file = _write_secret(secrets_dir / "client.key", user.get("client-key-data"), key_file)
    return Endpoint(
        server=str(cluster["server"]).rstrip("/"),
        ca_file=None if ca_data else path("certificate-authority"),
        ca_data=base64.b64decode(ca_data).decode() if ca_data else None,
        verify=not cluster.get("insecure-skip-tls-verify", False),
        token=user.get("token"), token_file=path("tokenFile"),
        cert_file=cert_file, key_file=key_file,
    )


def load(explicit: str | None, context: str | None, environ: Mapping[str, str]) -> Endpoint | None:
    path = kubeconfig_path(explicit, environ)
    if path is None:
        if explicit or environ.get("KUBECONFIG"):
            return None
        return in_cluster(environ)
    config = yaml.safe_load(path.read_text()) or {}
    return from_kubeconfig(config, path.parent, context)


def _named(items: Any, name: str | None, key: str) -> dict | None:
    for item in items or []:
        if item.get("name") == name:
            return item.get(key) or {}
    return None


def _write_secret(path: Path, data: str | None, fallback: str | None) -> str | None:
    if not data:
        return fallback
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(base64.b64decode(data))
    return str(path)
