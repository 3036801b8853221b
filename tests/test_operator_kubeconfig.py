"""Credentials for the common cases, read without the official client; the rest is left to it. Proxies
(proxy-url, or the environment as client-go) and tls-server-name."""
import base64
import os
import stat

import pytest
import yaml

from tfop.kube.kubeconfig import (ConfigError, Endpoint, env_proxy, from_kubeconfig, in_cluster, kubeconfig_path, load,
                                   with_env_proxy)


def config(user: dict, cluster: dict | None = None) -> dict:
    return {
        "current-context": "dev",
        "contexts": [{"name": "other", "context": {"cluster": "c2", "user": "u2"}},
                     {"name": "dev", "context": {"cluster": "c1", "user": "u1"}}],
        "clusters": [{"name": "c1", "cluster": cluster or {"server": "https://127.0.0.1:6443/",
                                                         "certificate-authority": "certs/ca.crt"}},
                     {"name": "c2", "cluster": {"server": "https://other:443"}}],
        "users": [{"name": "u1", "user": user}, {"name": "u2", "user": {"token": "two"}}],
    }


EXEC_V1 = "client.authentication.k8s.io/v1"


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_token_and_relative_paths(tmp_path):
    ep = from_kubeconfig(config({"token": "abc"}), tmp_path)
    assert ep == Endpoint(server="https://127.0.0.1:6443", ca_file=str(tmp_path / "certs/ca.crt"), token="abc")


def test_token_file_and_client_certificate_paths(tmp_path):
    ep = from_kubeconfig(config({"tokenFile": "t", "client-certificate": "/abs/c.crt", "client-key": "k.key"}),
                         tmp_path)
    assert (ep.token_file, ep.cert_file, ep.key_file) == (str(tmp_path / "t"), "/abs/c.crt", str(tmp_path / "k.key"))


def test_embedded_data_goes_to_private_files(tmp_path):
    cluster = {"server": "https://h:1", "certificate-authority-data": b64("CA PEM")}
    ep = from_kubeconfig(config({"client-certificate-data": b64("CERT"), "client-key-data": b64("KEY")}, cluster),
                         tmp_path, secrets_dir=tmp_path)
    assert ep.ca_data == "CA PEM" and ep.ca_file is None
    assert open(ep.cert_file).read() == "CERT" and open(ep.key_file).read() == "KEY"
    assert stat.S_IMODE(os.stat(ep.key_file).st_mode) == 0o600


def test_named_context_and_insecure(tmp_path):
    assert from_kubeconfig(config({}), tmp_path, context="other").token == "two"
    cluster = {"server": "https://h:1", "insecure-skip-tls-verify": True}
    assert from_kubeconfig(config({"token": "x"}, cluster), tmp_path).verify is False


@pytest.mark.parametrize("user, cluster", [
    ({"auth-provider": {"name": "oidc"}}, None),
    ({"exec": {"command": "aws", "apiVersion": EXEC_V1}, "auth-provider": {"name": "oidc"}}, None),
    ({"username": "a", "password": "b"}, None),
    ({"token": "x"}, {"server": "https://h", "disable-compression": True}),
    ({"token": "x"}, {"certificate-authority": "ca"}),  # no server
])
def test_what_only_the_official_loader_reads(tmp_path, user, cluster):
    assert from_kubeconfig(config(user, cluster), tmp_path) is None


def test_proxy_url_and_tls_server_name_are_read(tmp_path):
    cluster = {"server": "https://10.0.0.5:6443", "proxy-url": "https://u:p@proxy:3128", "tls-server-name": "kubernetes"}
    ep = from_kubeconfig(config({"token": "x"}, cluster), tmp_path)
    assert (ep.proxy_url, ep.tls_server_name) == ("https://u:p@proxy:3128", "kubernetes")
    plain = from_kubeconfig(config({"token": "x"}), tmp_path)
    assert (plain.proxy_url, plain.tls_server_name) == (None, None)


@pytest.mark.parametrize("proxy, message", [
    ("socks5://u:secret@proxy:1080", "proxy-url socks5://proxy:1080: SOCKS proxies are not supported (tfop's HTTP "
                                     "client, aiohttp, speaks to http:// and https:// proxies only)"),
    ("socks5h://proxy", "proxy-url socks5h://proxy: SOCKS proxies are not supported"),
    ("ftp://proxy:21", "proxy-url ftp://proxy:21: not an http:// or https:// proxy URL"),
    ("u:secret@proxy:3128", "proxy-url has no scheme: give http://HOST:PORT or https://HOST:PORT"),
    ("http://proxy:99999", "proxy-url is not a URL"),
])
def test_a_proxy_aiohttp_cannot_use_is_refused_at_load(tmp_path, proxy, message):
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config({"token": "x"}, {"server": "https://h:1", "proxy-url": proxy})))
    with pytest.raises(ConfigError) as err:
        load(str(path), None, {})
    assert str(err.value).startswith(f"kubeconfig {path} (context 'dev'): {message}")
    assert "secret" not in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("server, environ, proxy", [
    ("https://10.0.0.5:6443", {}, None),
    ("https://10.0.0.5:6443", {"HTTPS_PROXY": "http://p:3128"}, "http://p:3128"),
    ("https://10.0.0.5:6443", {"https_proxy": "p:3128"}, "http://p:3128"),  # no scheme: http, as Go
    ("https://10.0.0.5:6443", {"HTTPS_PROXY": "http://a:1", "https_proxy": "http://b:1"}, "http://a:1"),
    ("https://10.0.0.5:6443", {"HTTP_PROXY": "http://p:3128"}, None),  # only for http:// servers
    ("http://10.0.0.5:8080", {"HTTP_PROXY": "http://p:3128"}, "http://p:3128"),
    ("https://127.0.0.1:6443", {"HTTPS_PROXY": "http://p:3128"}, None),  # loopback: never
    ("https://[::1]:6443", {"HTTPS_PROXY": "http://p:3128"}, None),
    ("https://localhost:6443", {"HTTPS_PROXY": "http://p:3128"}, None),
    ("https://10.0.0.5:6443", {"HTTPS_PROXY": "http://p:3128", "NO_PROXY": "*"}, None),
    ("https://10.0.0.5:6443", {"HTTPS_PROXY": "http://p:3128", "NO_PROXY": "a.b, 10.0.0.0/8"}, None),
    ("https://10.0.0.5:6443", {"HTTPS_PROXY": "http://p:3128", "no_proxy": "10.0.0.5"}, None),
    ("https://10.0.0.5:6443", {"HTTPS_PROXY": "http://p:3128", "NO_PROXY": "10.0.0.5:443"}, "http://p:3128"),
    ("https://10.0.0.5:6443", {"HTTPS_PROXY": "http://p:3128", "NO_PROXY": "10.0.0.5:6443"}, None),
    ("https://10.0.0.5:6443", {"HTTPS_PROXY": "http://p:3128", "NO_PROXY": "192.168.0.0/16"}, "http://p:3128"),
    ("https://api.corp.example", {"HTTPS_PROXY": "http://p:3128", "NO_PROXY": "corp.example"}, None),
    ("https://corp.example", {"HTTPS_PROXY": "http://p:3128", "NO_PROXY": "corp.example"}, None),
    ("https://api.corp.example", {"HTTPS_PROXY": "http://p:3128", "NO_PROXY": ".corp.example"}, None),
    ("https://corp.example", {"HTTPS_PROXY": "http://p:3128", "NO_PROXY": ".corp.example"}, "http://p:3128"),
    ("https://api.corp.example", {"HTTPS_PROXY": "http://p:3128", "NO_PROXY": "*.corp.example"}, None),
    ("https://notcorp.example", {"HTTPS_PROXY": "http://p:3128", "NO_PROXY": "corp.example"}, "http://p:3128"),
    ("https://[fd00::1]:443", {"HTTPS_PROXY": "http://p:3128", "NO_PROXY": "[fd00::1]:443"}, None),
    ("https://[fd00::1]:443", {"HTTPS_PROXY": "http://p:3128", "NO_PROXY": "fd00::/64"}, None),
])
def test_the_environment_proxy_follows_go(server, environ, proxy):
    assert env_proxy(server, environ) == proxy


def test_the_kubeconfig_proxy_wins_over_the_environment(tmp_path):
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config({"token": "x"}, {"server": "https://10.0.0.5:1", "proxy-url": "http://k:1"})))
    assert load(str(path), None, {"HTTPS_PROXY": "http://env:1"}).proxy_url == "http://k:1"
    path.write_text(yaml.safe_dump(config({"token": "x"}, {"server": "https://10.0.0.5:1"})))
    assert load(str(path), None, {"HTTPS_PROXY": "http://env:1"}).proxy_url == "http://env:1"
    with pytest.raises(ConfigError, match=r"^\$HTTPS_PROXY socks5://env:1: SOCKS proxies are not supported"):
        load(str(path), None, {"HTTPS_PROXY": "socks5://env:1"})


def test_the_in_cluster_endpoint_takes_the_environment_proxy(tmp_path):
    (tmp_path / "token").write_text("tok")
    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443", "HTTPS_PROXY": "http://p:1"}
    assert with_env_proxy(in_cluster(env, tmp_path), env).proxy_url == "http://p:1"
    assert with_env_proxy(in_cluster(env, tmp_path), {**env, "NO_PROXY": "10.96.0.0/12"}).proxy_url is None


def test_unknown_context_is_left_to_the_official_loader(tmp_path):
    assert from_kubeconfig(config({"token": "x"}), tmp_path, context="nope") is None


def test_which_kubeconfig(tmp_path):
    assert kubeconfig_path("/a/b", {"KUBECONFIG": "/c"}) == tmp_path.__class__("/a/b")
    assert str(kubeconfig_path(None, {"KUBECONFIG": "/c"})) == "/c"
    assert kubeconfig_path(None, {"KUBECONFIG": f"/c{os.pathsep}/d"}) is None  # merged lists: official loader
    assert kubeconfig_path(None, {"HOME": str(tmp_path)}) is None
    (tmp_path / ".kube").mkdir()
    (tmp_path / ".kube" / "config").write_text("{}")
    assert kubeconfig_path(None, {"HOME": str(tmp_path)}) == tmp_path / ".kube" / "config"


def test_in_cluster(tmp_path):
    assert in_cluster({}, tmp_path) is None
    (tmp_path / "token").write_text("tok")
    (tmp_path / "ca.crt").write_text("ca")
    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    assert in_cluster(env, tmp_path) == Endpoint(server="https://10.96.0.1:443", ca_file=str(tmp_path / "ca.crt"),
                                                 token_file=str(tmp_path / "token"))
    assert in_cluster({**env, "KUBERNETES_SERVICE_HOST": "fd00::1"}, tmp_path).server == "https://[fd00::1]:443"


def test_load_reads_the_file(tmp_path):
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config({"token": "abc"})))
    assert load(str(path), None, {}).token == "abc"
    assert load(None, None, {"KUBECONFIG": str(path)}).token == "abc"


def test_retry_after_follows_the_apiserver_and_backs_off():
    from tfop.kube.client import _retry_after

    for attempt in range(5):
        for header, base in (("1", 1.0), (None, 1.0), ("junk", 1.0), ("3", 3.0), ("600", 10.0), ("0", 0.1)):
            pause = _retry_after(header, attempt)
            scale = min(2 ** attempt, 4) / 2
            assert base * scale <= pause <= 2 * base * scale
