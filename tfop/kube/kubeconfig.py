"""Read cluster credentials: the in-cluster service account, and kubeconfig files whose user has a
token, a token file, a client certificate or an exec plugin (run by tfop.kube.exec_credential),
with a cluster's `proxy-url` and `tls-server-name`. Anything else (auth providers, basic auth,
impersonation, merged KUBECONFIG lists) returns None, and the caller uses the official loader.

Why a reader of tfop's own where the official loader reads these too: the exec plugin it serves
badly and `proxy-url` it ignores (tfop.kube.credentials has the figures), and what cannot work it
lets through or words loosely. `python -m e2e.experiments.credential_loaders` (kubernetes 35.0.0):
a cluster with no server loads without an error; a missing CA file is "File does not exist:
<path>", naming neither the kubeconfig nor the key; a missing context is "Expected object with
name prod in <file>/contexts list". Here each is one line naming the file, the context and the fix.

Proxies: `proxy-url` if the cluster has one, else, as client-go, $HTTPS_PROXY
(or $HTTP_PROXY for an http:// server) unless $NO_PROXY names the server or it
is a loopback address. Only http:// and https:// proxies: the client (aiohttp)
has no SOCKS, so a socks5:// proxy is a ConfigError, not a silent direct
connection.

What cannot work at all (no kubeconfig anywhere, a file that is not YAML, a
context or cluster it does not have, a certificate that cannot be read) is a
ConfigError whose text is one line naming the file and what to fix: the
official loader would fail there too, with a traceback.
"""
from __future__ import annotations

import atexit
import base64
import ipaddress
import json
import os
import shutil
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
# Keys of a kubeconfig user or cluster that only the official loader understands.
UNSUPPORTED_USER_KEYS = {"auth-provider", "username", "password", "as", "as-groups", "as-uid",
                         "as-user-extra", "impersonate", "impersonate-groups"}
UNSUPPORTED_CLUSTER_KEYS = {"disable-compression"}
EXEC_API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")
# A cluster extension of this name is handed to the plugin as spec.cluster.config (provideClusterInfo).
EXEC_EXTENSION = "client.authentication.k8s.io/exec"
PROXY_SCHEMES = ("http", "https")


class StartupError(Exception):
    """tfop cannot start working with the cluster; str() is one line: what is wrong, and where."""


class ConfigError(StartupError):
    """No usable credentials: no kubeconfig at all, one that is not YAML, a context or cluster it
    lacks, a certificate or key file that cannot be read."""


class ServerUnreachable(StartupError):
    """The apiserver did not answer the first request (refused, timed out, or TLS failed)."""


@dataclass(frozen=True)
class ExecConfig:
    """A kubeconfig user's exec credential plugin, as the file gives it (the command made absolute when
    it names a path relative to the kubeconfig's folder, as kubectl does)."""
    command: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    api_version: str = EXEC_API_VERSIONS[0]
    cluster_info: str | None = None  # spec.cluster of KUBERNETES_EXEC_INFO (JSON), when provideClusterInfo
    install_hint: str = ""


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
    exec_plugin: ExecConfig | None = None
    proxy_url: str | None = None  # http:// or https://
    tls_server_name: str | None = None  # the name the server's certificate must hold, instead of the URL's host
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

    # As client-go: a token or a client certificate given beside an exec plugin wins, the plugin is not run.
    static = any(user.get(k) for k in ("token", "tokenFile", "client-certificate", "client-certificate-data"))
    plugin = exec_config(user["exec"], cluster, base_dir) if "exec" in user and not static else None
    ca_data = cluster.get("certificate-authority-data")
    cert_file, key_file = path("client-certificate"), path("client-key")
    if user.get("client-certificate-data") or user.get("client-key-data"):
        if secrets_dir is None:
            secrets_dir = Path(tempfile.mkdtemp(prefix="tfop-credentials-"))  # mode 0700
            # read by TLS set-ups for as long as the process runs; no private key left behind it
            atexit.register(shutil.rmtree, secrets_dir, ignore_errors=True)
        cert_file = _write_secret(secrets_dir / "client.crt", user.get("client-certificate-data"), cert_file)
        key_file = _write_secret(secrets_dir / "client.key", user.get("client-key-data"), key_file)
    return Endpoint(
        server=str(cluster["server"]).rstrip("/"),
        ca_file=None if ca_data else path("certificate-authority"),
        ca_data=base64.b64decode(ca_data).decode() if ca_data else None,
        verify=not cluster.get("insecure-skip-tls-verify", False),
        token=user.get("token"), token_file=path("tokenFile"),
        cert_file=cert_file, key_file=key_file, exec_plugin=plugin,
        proxy_url=proxy_url(cluster.get("proxy-url"), "proxy-url"),
        tls_server_name=str(cluster["tls-server-name"]) if cluster.get("tls-server-name") else None,
    )


def exec_config(spec: Any, cluster: Mapping[str, Any], base_dir: Path) -> ExecConfig:
    """The user's `exec` section; ConfigError when no plugin could run from it."""
    if not isinstance(spec, dict) or not spec.get("command") or not isinstance(spec["command"], str):
        raise ConfigError("user.exec has no command")
    version = spec.get("apiVersion")
    if version not in EXEC_API_VERSIONS:
        raise ConfigError(f"user.exec apiVersion {version!r} is not supported: use {' or '.join(EXEC_API_VERSIONS)}")
    mode = spec.get("interactiveMode") or "IfAvailable"
    if mode == "Always":
        raise ConfigError("user.exec interactiveMode Always needs a terminal, which the operator does not have: "
                          "use IfAvailable or Never")
    if mode not in ("IfAvailable", "Never"):
        raise ConfigError(f"user.exec interactiveMode {mode!r} is not one of Never, IfAvailable, Always")
    if not isinstance(spec.get("args") or [], list) or not isinstance(spec.get("env") or [], list):
        raise ConfigError("user.exec args and env must be lists")
    command = spec["command"]
    if os.sep in command and not os.path.isabs(command):
        command = str((base_dir / Path(command).expanduser()).resolve())
    return ExecConfig(
        command=command, args=tuple(str(a) for a in spec.get("args") or []),
        env=tuple((str(e["name"]), str(e.get("value", ""))) for e in _items(spec.get("env")) if e.get("name")),
        api_version=version, install_hint=str(spec.get("installHint") or "")[:300],
        cluster_info=exec_cluster_info(cluster, base_dir) if spec.get("provideClusterInfo") else None,
    )


def exec_cluster_info(cluster: Mapping[str, Any], base_dir: Path) -> str:
    """What a plugin asking for provideClusterInfo is told of the cluster (JSON, the CA inline)."""
    ca = cluster.get("certificate-authority-data")
    if not ca and cluster.get("certificate-authority"):
        ca_path = base_dir / Path(str(cluster["certificate-authority"])).expanduser()
        try:
            ca = base64.b64encode(ca_path.read_bytes()).decode()
        except OSError as err:
            raise ConfigError(f"certificate-authority {ca_path}: {err.strerror or err}") from None
    extension = next((e.get("extension") for e in _items(cluster.get("extensions"))
                      if e.get("name") == EXEC_EXTENSION), None)
    info = {"server": str(cluster["server"]), "tls-server-name": cluster.get("tls-server-name"),
            "insecure-skip-tls-verify": cluster.get("insecure-skip-tls-verify"),
            "certificate-authority-data": ca, "proxy-url": cluster.get("proxy-url"),
            "disable-compression": cluster.get("disable-compression"), "config": extension}
    return json.dumps({k: v for k, v in info.items() if v or k == "server"}, separators=(",", ":"))


def proxy_url(value: Any, where: str) -> str | None:
    """A proxy URL aiohttp can use (http:// or https://); ConfigError otherwise, naming `where` it
    came from and never the password it may hold."""
    if not value:
        return None
    url = str(value)
    if "://" not in url:
        raise ConfigError(f"{where} has no scheme: give http://HOST:PORT or https://HOST:PORT")
    try:
        parts = urlsplit(url)
        shown = f"{parts.scheme}://{parts.hostname or ''}" + (f":{parts.port}" if parts.port else "")
    except ValueError:
        raise ConfigError(f"{where} is not a URL") from None
    if parts.scheme.lower().startswith("socks"):
        raise ConfigError(f"{where} {shown}: SOCKS proxies are not supported (tfop's HTTP client, aiohttp, "
                          "speaks to http:// and https:// proxies only)")
    if parts.scheme.lower() not in PROXY_SCHEMES or not parts.hostname:
        raise ConfigError(f"{where} {shown}: not an http:// or https:// proxy URL")
    return url


def env_proxy(server: str, environ: Mapping[str, str]) -> str | None:
    """The proxy client-go takes from the environment for `server` (Go's ProxyFromEnvironment):
    $HTTPS_PROXY (or $HTTP_PROXY for http://), unless $NO_PROXY names the host; never for loopback."""
    parts = urlsplit(server)
    host = (parts.hostname or "").lower()
    names = ("HTTPS_PROXY", "https_proxy") if parts.scheme == "https" else ("HTTP_PROXY", "http_proxy")
    value = next((environ[n] for n in names if environ.get(n)), None)
    if not value or host == "localhost" or _is_loopback(host):
        return None
    no_proxy = environ.get("NO_PROXY") or environ.get("no_proxy") or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    if any(_no_proxy_matches(entry.strip().lower(), host, port) for entry in no_proxy.split(",")):
        return None
    return proxy_url(value if "://" in value else f"http://{value}", f"${names[0]}")


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _no_proxy_matches(entry: str, host: str, port: int) -> bool:
    """One $NO_PROXY entry, as Go reads it: *, an IP or CIDR, or a domain (`.x` only its subdomains,
    `x` itself too), each maybe with :port."""
    if entry == "*":
        return True
    try:
        return ipaddress.ip_address(host) in ipaddress.ip_network(entry, strict=False)
    except ValueError:
        pass
    name, sep, entry_port = entry.rpartition(":")
    if not sep or not entry_port.isdigit() or (":" in name and not name.startswith("[")):
        name, entry_port = entry, ""
    name = name.strip("[]")
    if not name or (entry_port and int(entry_port) != port):
        return False
    if name.startswith("*."):
        name = name[1:]
    if name.startswith("."):
        return host.endswith(name)
    return host == name or host.endswith("." + name)


def with_env_proxy(endpoint: Endpoint, environ: Mapping[str, str]) -> Endpoint:
    """The endpoint with the environment's proxy when its kubeconfig names none."""
    if endpoint.proxy_url:
        return endpoint
    return replace(endpoint, proxy_url=env_proxy(endpoint.server, environ))


def load(explicit: str | None, context: str | None, environ: Mapping[str, str],
         secrets_dir: Path | None = None) -> Endpoint | None:
    """The Endpoint to use, or None when only the official loader can tell (auth providers, merged lists).

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
        return with_env_proxy(endpoint, environ)
    config = read_kubeconfig(path)
    name = context or config.get("current-context")
    try:
        endpoint = from_kubeconfig(config, path.parent, context, secrets_dir)
    except ConfigError as err:  # an exec plugin or a proxy that cannot work
        raise ConfigError(f"kubeconfig {path} (context {name!r}): {err}") from None
    except (ValueError, TypeError) as err:  # base64 or PEM text that does not decode
        raise ConfigError(f"kubeconfig {path} (context {name!r}): embedded data does not decode: {err}") from None
    if endpoint is None:
        missing = _missing_part(config, name)
        if missing:
            raise ConfigError(f"kubeconfig {path}: {missing}")
        return None
    return with_env_proxy(replace(endpoint, source=f"kubeconfig {path} (context {name!r})"), environ)


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
