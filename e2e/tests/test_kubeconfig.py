"""Out of the cluster, on the real apiserver: an exec plugin's short-lived tokens are fetched again
and again, `tls-server-name` is the name the certificate is checked against, and `proxy-url` carries
every request and watch (tfop/kube/exec_credential.py, tfop/kube/kubeconfig.py, tfop/kube/client.py).

Each test asks the apiserver who it is (a SelfSubjectReview): only a credential it accepts answers
with the ServiceAccount's name. The proxy and the relay are small asyncio servers written here,
which count what went through them.
"""
from __future__ import annotations

import asyncio
import base64
import copy
import ssl
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
import pytest
import yaml

from e2e import build
from tfop.kube.client import KubeClient
from tfop.kube.credentials import load_credentials

pytestmark = pytest.mark.cluster

ACCOUNT = "kubeconfig-user"
REVIEW = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
REVIEW_PATH = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
LIFETIME_SECONDS = 4  # what the plugin claims; the tokens it hands out are valid for 10 minutes

# Run 1 prints a token the apiserver refuses (401); every later run a fresh one from the TokenRequest API.
PLUGIN = '''#!{python}
import json, os, subprocess, time
from datetime import datetime, timezone
here = os.path.dirname(os.path.abspath(__file__))
counter = os.path.join(here, "runs")
runs = int(open(counter).read()) + 1 if os.path.exists(counter) else 1
open(counter, "w").write(str(runs))
if runs == 1:
    token = "not-a-token-the-apiserver-knows"
else:
    token = subprocess.run([os.environ["KUBECTL"], "--kubeconfig", os.environ["ADMIN_KUBECONFIG"], "create", "token",
                            os.environ["ACCOUNT"], "-n", os.environ["NAMESPACE"], "--duration=10m"],
                           check=True, capture_output=True, text=True).stdout.strip()
with open(os.path.join(here, "tokens"), "a") as f:
    f.write(token + "\\n")
expires = datetime.fromtimestamp(time.time() + int(os.environ["LIFETIME"]), timezone.utc)
print(json.dumps({{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                  "status": {{"token": token, "expirationTimestamp": expires.strftime("%Y-%m-%dT%H:%M:%SZ")}}}}))
'''


@pytest.fixture
def account(cluster, namespace) -> dict:
    """The kubeconfig of a ServiceAccount (a token) that may view its namespace."""
    config = yaml.safe_load(cluster.service_account_kubeconfig(namespace, ACCOUNT).read_text())
    cluster.kubectl("create", "rolebinding", "view", "--clusterrole=view",
                    f"--serviceaccount={namespace}:{ACCOUNT}", "-n", namespace)
    return config


def account_kubeconfig(account: dict, folder: Path, name: str, *, user: dict | None = None,
                       **cluster_fields) -> str:
    """The ServiceAccount's kubeconfig with its user or cluster fields changed."""
    config = copy.deepcopy(account)
    config["clusters"][0]["cluster"].update(cluster_fields)
    if user is not None:
        config["users"][0]["user"] = user
    path = folder / name
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return str(path)


async def who(client: KubeClient) -> str:
    review = await client.request("POST", REVIEW_PATH, REVIEW)
    return review["status"]["userInfo"]["username"]


def test_exec_plugin_tokens_are_fetched_again_before_they_expire_and_after_a_401(cluster, namespace, account,
                                                                                  tmp_path):
    plugin = tmp_path / "plugin.py"
    plugin.write_text(PLUGIN.format(python=sys.executable))
    plugin.chmod(0o755)
    env = {"KUBECTL": str(build.binary("kubectl")), "ADMIN_KUBECONFIG": str(cluster.kubeconfig),
           "ACCOUNT": ACCOUNT, "NAMESPACE": namespace, "LIFETIME": str(LIFETIME_SECONDS)}
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin),
                     "interactiveMode": "Never", "env": [{"name": k, "value": v} for k, v in env.items()]}}
    kubeconfig = account_kubeconfig(account, tmp_path, "exec.kubeconfig", user=user)

    def runs() -> int:
        return int((tmp_path / "runs").read_text()) if (tmp_path / "runs").exists() else 0

    async def scenario() -> list[str]:
        async with KubeClient(load_credentials(kubeconfig)) as client:
            assert runs() == 0  # loading runs nothing
            names = [await who(client)]
            # Run 1's token was refused; the request was sent again with run 2's.
            assert runs() == 2, runs()
            deadline = time.monotonic() + 4 * LIFETIME_SECONDS
            while time.monotonic() < deadline:
                names.append(await who(client))
                await asyncio.sleep(0.25)
            listing = await client.list("v1", "configmaps", namespace)
            before = runs()
            await asyncio.sleep(LIFETIME_SECONDS / 2 + 0.5)  # the token is due: the watch fetches the next
            async for _ in client.watch("v1", "configmaps", namespace, listing["metadata"]["resourceVersion"],
                                        timeout_seconds=1):
                pass
            assert runs() == before + 1
            return names
    names = asyncio.run(scenario())
    assert set(names) == {f"system:serviceaccount:{namespace}:{ACCOUNT}"}
    tokens = (tmp_path / "tokens").read_text().split()
    # A 4 s token is fetched again at half its life: over 16 s some 8 times, not once per request.
    assert 6 <= runs() <= len(names) / 2, (runs(), len(names))
    assert len(set(tokens)) == len(tokens) == runs()


# ------------------------------------------------------------------ tls-server-name
async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(1 << 16):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


async def splice(a: tuple, b: tuple) -> None:
    await asyncio.gather(pipe(a[0], b[1]), pipe(b[0], a[1]))


class Relay:
    """Listens on 127.0.0.2 (an address the apiserver's certificate does not hold) and passes each
    connection to the apiserver on 127.0.0.1."""

    def __init__(self, target: tuple[str, int]):
        self.target, self.connections = target, 0

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self.handle, "127.0.0.2", 0)
        return f"https://127.0.0.2:{self.server.sockets[0].getsockname()[1]}"

    async def __aexit__(self, *exc) -> None:
        self.server.close()

    async def handle(self, reader, writer) -> None:
        self.connections += 1
        await splice((reader, writer), await asyncio.open_connection(*self.target))


def apiserver(cluster) -> tuple[str, int]:
    url = urlsplit(cluster.server)
    return url.hostname, url.port


def test_tls_server_name_is_the_name_the_certificate_is_checked_against(cluster, namespace, account, tmp_path):
    # e2e/harness/pki.py: the apiserver's certificate holds 127.0.0.1, localhost, kubernetes(.default...), not 127.0.0.2.
    def config(name: str, **fields) -> str:
        return account_kubeconfig(account, tmp_path, name, **fields)
    me = f"system:serviceaccount:{namespace}:{ACCOUNT}"

    async def ask(kubeconfig: str) -> str:
        async with KubeClient(load_credentials(kubeconfig)) as client:
            return await who(client)

    async def scenario() -> int:
        relay = Relay(apiserver(cluster))
        async with relay as relayed:
            with pytest.raises(ssl.SSLCertVerificationError, match="127.0.0.2"):
                await ask(config("relayed", server=relayed))  # the URL's host is not in the certificate
            assert await ask(config("relayed-named", server=relayed, **{"tls-server-name": "kubernetes"})) == me
            assert await ask(config("relayed-default", server=relayed,
                                    **{"tls-server-name": "kubernetes.default.svc"})) == me
            with pytest.raises(ssl.SSLCertVerificationError, match="not-in-the-cert.example"):
                await ask(config("relayed-wrong", server=relayed, **{"tls-server-name": "not-in-the-cert.example"}))
        # Directly on 127.0.0.1, which the certificate holds: a wrong name still fails, so the name is what counts.
        assert await ask(config("direct")) == me
        with pytest.raises(ssl.SSLCertVerificationError, match="not-in-the-cert.example"):
            await ask(config("direct-wrong", **{"tls-server-name": "not-in-the-cert.example"}))
        return relay.connections
    assert asyncio.run(scenario()) == 4  # every relayed attempt went through the relay


# ------------------------------------------------------------------ proxy-url
class ConnectProxy:
    """An HTTP proxy that only tunnels (CONNECT), counting the tunnels and what asked for them."""

    def __init__(self):
        self.tunnels: list[str] = []
        self.authorizations: list[str | None] = []

    async def __aenter__(self) -> int:
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def __aexit__(self, *exc) -> None:
        self.server.close()
        await self.server.wait_closed()

    async def handle(self, reader, writer) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        method, target, _ = head[0].split(" ", 2)
        headers = dict(line.split(": ", 1) for line in head[1:] if ": " in line)
        if method != "CONNECT":
            writer.write(b"HTTP/1.1 405 Method Not Allowed\r\ncontent-length: 0\r\n\r\n")
            writer.close()
            return
        self.tunnels.append(target)
        self.authorizations.append(headers.get("Proxy-Authorization"))
        host, port = target.rsplit(":", 1)
        upstream = await asyncio.open_connection(host, int(port))
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await writer.drain()
        await splice((reader, writer), upstream)


def test_proxy_url_carries_every_request_and_watch(cluster, namespace, account, tmp_path):
    host, port = apiserver(cluster)
    me = f"system:serviceaccount:{namespace}:{ACCOUNT}"

    async def scenario() -> tuple[ConnectProxy, str]:
        proxy = ConnectProxy()
        async with proxy as proxy_port:
            kubeconfig = account_kubeconfig(account, tmp_path, "proxied",
                                            **{"proxy-url": f"http://tfop:s3cret@127.0.0.1:{proxy_port}"})
            async with KubeClient(load_credentials(kubeconfig)) as client:
                listing = await client.list("v1", "configmaps", namespace)
                assert len(proxy.tunnels) == 1
                # A watch holds its connection: the requests beside it need a second tunnel.
                watch = client.watch("v1", "configmaps", namespace, listing["metadata"]["resourceVersion"],
                                     timeout_seconds=3)
                watching = asyncio.create_task(anext(watch, None))
                await asyncio.sleep(0.5)
                assert await who(client) == me
                cluster.kubectl("create", "configmap", "seen-through-the-proxy", "-n", namespace)
                event = await asyncio.wait_for(watching, 10)
                await watch.aclose()
        # The proxy is gone: a new client cannot reach the apiserver, it does not go around the proxy.
        async with KubeClient(load_credentials(kubeconfig)) as client:
            with pytest.raises(aiohttp.ClientProxyConnectionError):
                await who(client)
        return proxy, event["object"]["metadata"]["name"]
    proxy, seen = asyncio.run(scenario())
    assert seen == "seen-through-the-proxy"
    assert proxy.tunnels == [f"{host}:{port}"] * 2
    assert proxy.authorizations == ["Basic " + base64.b64encode(b"tfop:s3cret").decode()] * 2
