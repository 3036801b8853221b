"""Read cluster credentials for the common cases without the official client.

Importing `kubernetes` loads its whole generated API (~20 MB of RSS, measured
by e2e.bench at J=1000), and the operator only needs a server, a CA, and a
token or client certificate. This reads the in-cluster service account and
kubeconfig files whose user has a token, a token file or a client
certificate. Anything else (exec plugins, auth providers, basic auth, proxies,
merged KUBECONFIG lists) returns None, and the caller uses the official loader.

What cannot work at all (no kubeconfig anywhere, a file that is not YAML, a
context or cluster it does not have, a certificate that cannot be read) is a
ConfigError whose text is one line naming the file and what to fix: the
official loader would fail there too, with a traceback.
"""
from __future__ import annotations

import base64
import os
import ssl
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

import yaml

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
# Keys of a kubeconfig user or cluster that only the official loader understands.
UNSUPPORTED_USER_KEYS = {"exec", "auth-provider", "username", "password", "as", "as-groups", "as-uid",
                         "as-user-extra", "impersonate", "impersonate-groups"}
UNSUPPORTED_CLUSTER_KEYS = {"proxy-url", "tls-server-name", "disable-compression"}


class StartupError(Exception):
    """tfop cannot start working with the cluster; str() is one line: what is wrong, and where."""


class ConfigError(StartupError):
    """No usable credentials: no kubeconfig at all, one that is not YAML, a context or cluster it
    lacks, a certificate or key file that cannot be read."""


class ServerUnreachable(StartupError):
    """The apiserver did not answer the first request (refused, timed out, or TLS failed)."""


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
    # Where it was read, for messages: "kubeconfig /path (context dev)" or the service account.
    source: str = field(default="", compare=False)


def in_cluster(environ: Mapping[str, str], account_dir: Path = SERVICE_ACCOUNT_DIR) -> Endpoint | None:
    host, port = environ.get("KUBERNETES_SERVICE_HOST"), environ.get("KUBERNETES_SERVICE_PORT")
    token = account_dir / "token"
    if not host or not port or not token.exists():
        return None
    host = f"[{host}]" if ":" in host else host  # IPv6
    ca = account_dir / "ca.crt"
    # Bound service-account tokens rotate: keep the file, read it per request.
    return Endpoint(server=f"https://{host}:{port}", ca_file=str(ca) if ca.exists() else None,
                    token_file=str(token), source=f"the in-cluster service account ({account_dir})")


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
        return str((base_dir / Path(str(value)).expanduser()).resolve()) if value else None

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


def load(explicit: str | None, context: str | None, environ: Mapping[str, str],
         secrets_dir: Path | None = None) -> Endpoint | None:
    """The Endpoint to use, or None when only the official loader can tell (exec plugins, merged lists).

    ConfigError when nothing can work: no kubeconfig and not in a pod, a file that cannot be
    read or is not YAML, a context or cluster the file does not have, embedded data that is not
    base64. Files the kubeconfig names are checked by tls_context(), when they are used.
    """
    path = kubeconfig_path(explicit, environ)
    if path is None:
        if explicit or environ.get("KUBECONFIG"):
            return None
        endpoint = in_cluster(environ)
        if endpoint is None:
            raise ConfigError(no_credentials(environ))
        return endpoint
    config = read_kubeconfig(path)
    name = context or config.get("current-context")
    try:
        endpoint = from_kubeconfig(config, path.parent, context, secrets_dir)
    except (ValueError, TypeError) as err:  # base64 or PEM text that does not decode
        raise ConfigError(f"kubeconfig {path} (context {name!r}): embedded data does not decode: {err}") from None
    if endpoint is None:
        missing = _missing_part(config, name)
        if missing:
            raise ConfigError(f"kubeconfig {path}: {missing}")
        return None
    return replace(endpoint, source=f"kubeconfig {path} (context {name!r})")


def no_credentials(environ: Mapping[str, str]) -> str:
    home = Path(environ.get("HOME", "~")).expanduser() / ".kube" / "config"
    return (f"no kubeconfig: $KUBECONFIG is not set, {home} does not exist, and this is not a pod "
            "(KUBERNETES_SERVICE_HOST is not set): pass --kubeconfig or set KUBECONFIG")


def read_kubeconfig(path: Path) -> dict:
    """The parsed file; ConfigError (one line) when it cannot be read or is not a YAML mapping."""
    try:
        text = path.read_text()
    except OSError as err:
        raise ConfigError(f"kubeconfig {path}: {err.strerror or err}") from None
    except ValueError as err:  # not UTF-8
        raise ConfigError(f"kubeconfig {path}: not a text file: {err}") from None
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ConfigError(f"kubeconfig {path} is not YAML: {yaml_error(err)}") from None
    except (ValueError, RecursionError) as err:  # e.g. an integer of more than 4300 digits
        raise ConfigError(f"kubeconfig {path} is not YAML: {err}") from None
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise ConfigError(f"kubeconfig {path} is not a mapping of clusters, users and contexts")
    return config


def yaml_error(err: yaml.YAMLError) -> str:
    """A YAML error in one line: where, and what."""
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}" if mark else problem


def _missing_part(config: Mapping[str, Any], name: Any) -> str | None:
    """Why the context `name` cannot work at all, or None when the official loader may read it."""
    if not name:
        return "no current-context and no --context given"
    ctx = _named(config.get("contexts"), name, "context")
    if ctx is None:
        known = [i.get("name") for i in _items(config.get("contexts"))]
        return f"no context named {name!r} (contexts: {', '.join(map(str, known)) or 'none'})"
    cluster = _named(config.get("clusters"), ctx.get("cluster"), "cluster")
    if cluster is None:
        return f"context {name!r} names cluster {ctx.get('cluster')!r}, which is not in the file"
    if not cluster.get("server"):
        return f"cluster {ctx.get('cluster')!r} (context {name!r}) has no server"
    return None


FILE_KEYS = (("ca_file", "certificate-authority"), ("cert_file", "client-certificate"),
             ("key_file", "client-key"), ("token_file", "tokenFile"))


def tls_context(endpoint: Endpoint) -> ssl.SSLContext:
    """The TLS settings to talk to the endpoint; ConfigError naming a file that cannot be read or
    a certificate or key that does not load."""
    source = endpoint.source or f"the credentials for {endpoint.server}"
    for attr, key in FILE_KEYS:
        name = getattr(endpoint, attr)
        if name and not os.access(name, os.R_OK):
            why = "cannot be read" if os.path.exists(name) else "no such file"
            raise ConfigError(f"{source}: {key} {name}: {why}")
    try:
        if endpoint.verify:
            ctx = ssl.create_default_context(cafile=endpoint.ca_file, cadata=endpoint.ca_data)
        else:
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
    except (ssl.SSLError, ValueError) as err:
        raise ConfigError(f"{source}: the certificate authority does not load: {err}") from None
    if endpoint.cert_file and endpoint.key_file:
        try:
            ctx.load_cert_chain(endpoint.cert_file, endpoint.key_file)
        except (ssl.SSLError, ValueError) as err:
            raise ConfigError(f"{source}: client-certificate {endpoint.cert_file} and client-key "
                              f"{endpoint.key_file} do not load: {err}") from None
    return ctx


def _items(items: Any) -> list[dict]:
    return [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []


def _named(items: Any, name: str | None, key: str) -> dict | None:
    for item in _items(items):
        if item.get("name") == name:
            value = item.get(key)
            return value if isinstance(value, dict) else {}
    return None


def _write_secret(path: Path, data: str | None, fallback: str | None) -> str | None:
    if not data:
        return fallback
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(base64.b64decode(data))
    return str(path)
