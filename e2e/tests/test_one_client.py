"""`tfop run`, `tfop doctor` and `tfop gang` reach the real apiserver the same way: credentials
loaded once, by tfop.kube.credentials.load_credentials, and every request of tfop's sent by its one
client (tfop.kube.client.KubeClient, over aiohttp), for each way a user hands over credentials: an
exec plugin, a merged KUBECONFIG list and the in-cluster service account.

Each command runs as the `tfop` process does, with hooks installed first that count the loader's
calls, the sockets connected to the apiserver (and which library connected them) and the HTTP
requests sent (and by whom). kopf runs `tfop run`'s process and sends its own start-up discovery
GETs through its aiohttp session; nothing else may send a request.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from e2e import build
from e2e.harness.processes import free_port
from e2e.harness.tfop_operator import deploy_manifests

pytestmark = pytest.mark.cluster

HOOKS = r'''
import atexit, json, socket, sys, traceback
from pathlib import Path

report, port = Path(sys.argv[1]), int(sys.argv[2])
found = {"load_credentials": 0, "Credentials.load": 0, "connects": [], "requests": []}
LIBRARIES = ("/urllib3/", "/http/client.py", "/requests/", "/websocket/", "/httpx/", "/aiohttp/", "/asyncio/")

import tfop.kube.credentials as credentials
loader, load = credentials.load_credentials, credentials.Credentials.load.__func__
def counted_loader(*args, **kwargs):
    found["load_credentials"] += 1
    return loader(*args, **kwargs)
def counted_load(cls, *args, **kwargs):
    found["Credentials.load"] += 1
    return load(cls, *args, **kwargs)
credentials.load_credentials = counted_loader
credentials.Credentials.load = classmethod(counted_load)

connect = socket.socket.connect
def watched_connect(self, address):
    if isinstance(address, tuple) and len(address) >= 2 and address[1] == port:
        stack = "".join(traceback.format_stack())
        found["connects"].append(sorted(lib for lib in LIBRARIES if lib in stack))
    return connect(self, address)
socket.socket.connect = watched_connect

import aiohttp
send = aiohttp.ClientSession._request
async def watched_request(self, method, url, *args, **kwargs):
    files = [frame.filename for frame in traceback.extract_stack()]
    who = ("tfop.kube.client" if any(f.endswith("tfop/kube/client.py") for f in files)
           else "kopf" if any("/kopf/" in f for f in files) else "other")
    found["requests"].append([who, method, str(url)])
    return await send(self, method, url, *args, **kwargs)
aiohttp.ClientSession._request = watched_request

atexit.register(lambda: report.write_text(json.dumps(found)))
sys.argv = ["tfop", *sys.argv[3:]]
from tfop.tools.cli import main
main()
'''
# What kopf's start-up scan asks: the API groups and versions, nothing else.
DISCOVERY_PATH = re.compile(r"^/(api|apis)(/[^/]+){0,2}$")
ENGINEER = "one-client-engineer"  # who runs doctor and gang: an administrator
PLUGIN = '''#!{python}
import json, subprocess
token = subprocess.run({command!r}, check=True, capture_output=True, text=True).stdout.strip()
print(json.dumps({{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                  "status": {{"token": token}}}}))
'''


def token_config(cluster, namespace: str, account: str) -> dict:
    return yaml.safe_load(cluster.service_account_kubeconfig(namespace, account).read_text())


def exec_form(cluster, config: dict, folder: Path, account: tuple[str, str]) -> dict:
    """KUBECONFIG naming a plugin that asks the TokenRequest API for the account's token."""
    plugin = folder / "plugin.py"
    command = [str(build.binary("kubectl")), "--kubeconfig", str(cluster.kubeconfig), "create", "token",
               account[1], "-n", account[0], "--duration=10m"]
    plugin.write_text(PLUGIN.format(python=sys.executable, command=command))
    plugin.chmod(0o755)
    config = {**config, "users": [{"name": config["users"][0]["name"], "user": {"exec": {
        "apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin), "interactiveMode": "Never"}}}]}
    path = folder / "exec.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return {"KUBECONFIG": str(path)}


def merged_form(config: dict, folder: Path) -> dict:
    """The cluster and context in one file, the user in another: KUBECONFIG lists both."""
    first, second = folder / "clusters.kubeconfig", folder / "users.kubeconfig"
    first.write_text(yaml.safe_dump({**config, "users": []}))
    second.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "users": config["users"]}))
    return {"KUBECONFIG": f"{first}{os.pathsep}{second}"}


def in_cluster_prefix(config: dict, folder: Path, server: str) -> tuple[list[str], dict]:
    """A private mount namespace whose /run holds the account's token and CA, where a pod has them."""
    account = folder / "serviceaccount"
    account.mkdir()
    (account / "token").write_text(config["users"][0]["user"]["token"])
    cluster = config["clusters"][0]["cluster"]
    ca = cluster.get("certificate-authority")
    (account / "ca.crt").write_text(Path(ca).read_text())
    (account / "namespace").write_text("kubeflow")
    script = ("mount -t tmpfs tmpfs /run && mkdir -p /run/secrets/kubernetes.io && "
              f"cp -r {account} /run/secrets/kubernetes.io/serviceaccount && exec \"$@\"")
    address = urlsplit(server)
    return (["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "in-cluster"],
            {"KUBERNETES_SERVICE_HOST": address.hostname, "KUBERNETES_SERVICE_PORT": str(address.port)})


def run_command(cluster, folder: Path, prefix: list[str], env: dict, args: list[str],
                ready_port: int | None = None) -> tuple[subprocess.CompletedProcess, dict]:
    """One tfop command with the hooks; `tfop run` is stopped with SIGTERM once it is ready."""
    report = folder / f"report-{args[0]}.json"
    port = urlsplit(cluster.server).port
    base = {k: v for k, v in os.environ.items() if not k.startswith(("KUBECONFIG", "KUBERNETES_SERVICE"))}
    command = [*prefix, sys.executable, "-c", HOOKS, str(report), str(port), *args]
    process = subprocess.Popen(command, env={**base, "HOME": str(folder), **env}, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, cwd=Path(__file__).resolve().parents[2])
    try:
        if ready_port is not None:
            wait_ready(process, ready_port)
            process.terminate()
        output, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert report.exists(), output
    return subprocess.CompletedProcess(command, process.returncode, output), json.loads(report.read_text())


def wait_ready(process: subprocess.Popen, port: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.3)
    raise AssertionError(f"tfop run not ready within {timeout:g}s (exit code {process.poll()})")


def assert_one_client(found: dict, output: str, kopf_runs: bool) -> None:
    assert (found["load_credentials"], found["Credentials.load"]) == (1, 1), output
    # Every socket to the apiserver connected by asyncio's loop for aiohttp; none by a blocking client.
    assert found["connects"] and all(libs == ["/aiohttp/", "/asyncio/"] for libs in found["connects"]), found["connects"]
    senders = {who for who, _, _ in found["requests"]}
    assert senders == ({"tfop.kube.client", "kopf"} if kopf_runs else {"tfop.kube.client"}), found["requests"]
    kopf_paths = [urlsplit(url).path for who, _, url in found["requests"] if who == "kopf"]
    assert all(DISCOVERY_PATH.match(path) for path in kopf_paths), kopf_paths


@pytest.fixture(scope="module")
def accounts(cluster):
    deploy_manifests(cluster, None)
    cluster.kubectl("create", "serviceaccount", ENGINEER, "-n", "kubeflow", check=False)
    cluster.kubectl("create", "clusterrolebinding", ENGINEER, "--clusterrole=cluster-admin",
                    f"--serviceaccount=kubeflow:{ENGINEER}", check=False)
    return {"run": ("kubeflow", "tfop"), "doctor": ("kubeflow", ENGINEER), "gang": ("kubeflow", ENGINEER)}


@pytest.fixture
def gang_target(cluster, namespace):
    """A Deployment and a ClusterRole of the operator's for `tfop gang` to patch (dry run)."""
    from tfop.tools.deploy.manifests import deploy_objects

    objects = {o["kind"]: o for o in deploy_objects(namespace=namespace, include_crds=False)}
    role = objects["ClusterRole"]
    role["metadata"]["name"] = f"tfop-one-client-{namespace}"
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([objects["Deployment"], role]))
    yield role["metadata"]["name"]
    cluster.kubectl("delete", "clusterrole", role["metadata"]["name"], check=False)


@pytest.mark.parametrize("form", ["exec plugin", "merged KUBECONFIG", "in-cluster"])
@pytest.mark.parametrize("command", ["run", "doctor", "gang"])
def test_each_command_loads_once_and_sends_through_one_client(cluster, namespace, accounts, gang_target,
                                                               tmp_path, form, command):
    account = accounts[command]
    config = token_config(cluster, *account)
    prefix, env = [], {}
    if form == "exec plugin":
        env = exec_form(cluster, config, tmp_path, account)
    elif form == "merged KUBECONFIG":
        env = merged_form(config, tmp_path)
    else:
        prefix, env = in_cluster_prefix(config, tmp_path, cluster.server)
    ready = free_port() if command == "run" else None
    args = {"run": ["run", "--namespace", namespace, "--health-probe-bind-address", f"127.0.0.1:{ready}",
                    "--metrics-bind-address", "0", "--event-loop", "asyncio"],
            "doctor": ["doctor", "--namespace", "kubeflow", "--service-account", "tfop"],
            "gang": ["gang", "enable", "--dry-run", "--gang-scheduler-name", "volcano", "--namespace", namespace,
                     "--deployment", "tfop", "--cluster-role", gang_target]}[command]
    done, found = run_command(cluster, tmp_path, prefix, env, args, ready_port=ready)
    if command == "doctor":  # the checks ran; some may fail (no scheduler, no Deployment here)
        assert done.returncode in (0, 1) and "[PASS] CRD tfjobs.kubeflow.org exists" in done.stdout, done.stdout
    else:
        assert done.returncode == 0, done.stdout
    if command == "gang":
        assert done.stdout.startswith(f"Deployment {namespace}/tfop: args += --enable-gang-scheduling"), done.stdout
    assert_one_client(found, done.stdout, kopf_runs=command == "run")
