"""Credentials for the common cases, read without the official client; the rest is left to it."""
import base64
import os
import stat

import pytest
import yaml

from tfop.kube.kubeconfig import Endpoint, from_kubeconfig, in_cluster, kubeconfig_path, load


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
    ({"exec": {"command": "aws"}}, None),
    ({"auth-provider": {"name": "oidc"}}, None),
    ({"username": "a", "password": "b"}, None),
    ({"token": "x"}, {"server": "https://h", "proxy-url": "http://proxy"}),
    ({"token": "x"}, {"certificate-authority": "ca"}),  # no server
])
def test_what_only_the_official_loader_reads(tmp_path, user, cluster):
    assert from_kubeconfig(config(user, cluster), tmp_path) is None


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
