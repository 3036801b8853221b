"""What the official `kubernetes` client's kubeconfig loader does with an exec plugin and a proxy-url:
the measurements behind keeping tfop's own reader and exec-plugin runner (README, "How it is built").

    python -m e2e.experiments.credential_loaders

No apiserver is needed: the loader runs the plugin when it loads the kubeconfig and again when a
request asks for the token (Configuration.get_api_key_with_prefix, as each request of its ApiClient
does). The plugin is a small script that counts its runs.
"""
from __future__ import annotations

import datetime
import json
import logging
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

PLUGIN = '''#!{python}
import datetime, json, os, sys, time
runs = os.path.join(os.path.dirname(os.path.abspath(__file__)), "runs")
count = int(open(runs).read()) if os.path.exists(runs) else 0
open(runs, "w").write(str(count + 1))
if os.environ["MODE"] == "hang":
    time.sleep(3600)
if os.environ["MODE"] == "fail":
    print("no credentials for you", file=sys.stderr)
    sys.exit(3)
expires = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=int(os.environ["LIFETIME"]))
print(json.dumps({{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                  "status": {{"token": "t", "expirationTimestamp": expires.strftime("%Y-%m-%dT%H:%M:%SZ")}}}}))
'''
REQUESTS = 100
HUNG_WAIT_SECONDS = 10.0


def kubeconfig(folder: Path, mode: str, lifetime: int) -> str:
    path = folder / f"kubeconfig-{mode}-{lifetime}"
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": str(folder / "plugin.py"),
                     "interactiveMode": "Never", "env": [{"name": "MODE", "value": mode},
                                                         {"name": "LIFETIME", "value": str(lifetime)}]}}
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1", "proxy-url": "http://127.0.0.1:3128"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "users": [{"name": "u", "user": user}]}))
    return str(path)


def runs(folder: Path) -> int:
    counted = folder / "runs"
    found = int(counted.read_text()) if counted.exists() else 0
    counted.unlink(missing_ok=True)
    return found


def measure(folder: Path) -> dict:
    from kubernetes import client, config

    def load(mode: str, lifetime: int = 3600):
        cfg = client.Configuration()
        config.load_kube_config(config_file=kubeconfig(folder, mode, lifetime), client_configuration=cfg)
        return cfg

    found: dict = {}
    for lifetime in (240, 3600):
        cfg = load("ok", lifetime)
        for _ in range(REQUESTS):
            cfg.get_api_key_with_prefix("authorization")
        found[f"plugin runs, a {lifetime // 60}-minute token, load + {REQUESTS} requests"] = runs(folder)
    found["proxy-url read"] = cfg.proxy
    logging.disable(logging.ERROR)  # the loader logs the failure it swallows
    try:
        failed = load("fail")
        found["a failing plugin: load raised"] = False
        found["a failing plugin: credentials"] = dict(failed.api_key)
    except Exception as err:  # noqa: BLE001 - what it raises is the finding
        found["a failing plugin: load raised"] = f"{type(err).__name__}: {err}"
    logging.disable(logging.NOTSET)
    runs(folder)
    loaded = threading.Event()
    threading.Thread(target=lambda: (load("hang"), loaded.set()), daemon=True).start()
    loaded.wait(HUNG_WAIT_SECONDS)
    found[f"a hung plugin: load returned within {HUNG_WAIT_SECONDS:g} s"] = loaded.is_set()
    return found


# Kubeconfigs that cannot work, as users write them: what does the loader say of each?
BROKEN = {
    "not YAML": "clusters: [\n  - {",
    "a missing context": {"current-context": "prod"},
    "a missing cluster": {"contexts": [{"name": "dev", "context": {"cluster": "gone", "user": "u"}}]},
    "no server": {"clusters": [{"name": "c", "cluster": {"insecure-skip-tls-verify": True}}]},
    "a missing CA file": {"clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1",
                                                                 "certificate-authority": "pki/ca.crt"}}]},
}


def broken_kubeconfigs(folder: Path) -> dict:
    """Per broken kubeconfig: the loader's error in one line, and whether it names the file."""
    from kubernetes import client, config

    found = {}
    for case, change in BROKEN.items():
        path = folder / f"broken-{case.replace(' ', '-')}"
        good = {"apiVersion": "v1", "kind": "Config", "current-context": "dev",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                "contexts": [{"name": "dev", "context": {"cluster": "c", "user": "u"}}],
                "users": [{"name": "u", "user": {"token": "t"}}]}
        path.write_text(change if isinstance(change, str) else yaml.safe_dump({**good, **change}))
        try:
            config.load_kube_config(config_file=str(path), client_configuration=client.Configuration())
            found[case] = "loaded without an error"
        except Exception as err:  # noqa: BLE001 - what it raises is the finding
            text = " ".join(str(err).split())
            found[case] = f"{type(err).__name__}: {text[:160]} (names the file: {str(path) in text})"
    return found


def main() -> int:
    import kubernetes

    with tempfile.TemporaryDirectory(prefix="tfop-loaders-") as tmp:
        folder = Path(tmp)
        plugin = folder / "plugin.py"
        plugin.write_text(PLUGIN.format(python=sys.executable))
        plugin.chmod(0o755)
        started = time.monotonic()
        found = measure(folder)
        found["broken kubeconfigs"] = broken_kubeconfigs(folder)
        found["kubernetes"] = kubernetes.__version__
        found["date"] = datetime.date.today().isoformat()
        found["seconds"] = round(time.monotonic() - started, 1)
        print(json.dumps(found, indent=1))
        logging.disable(logging.CRITICAL)  # the loader logs the plugin killed below
        stop_children()
    return 0


def stop_children() -> None:
    """The hung plugin, which the loader started and never stops."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == os.getpid():
            os.kill(int(stat.parent.name), signal.SIGKILL)


if __name__ == "__main__":
    sys.exit(main())
