"""A running `tfop run` speaks to the apiserver through one HTTP client stack, aiohttp, for every
request and watch.

The operator runs as `tfop run` does, with a thread beside it that waits for the test's signal (a
job's pods created: requests and watches made), then lists the modules loaded and counts the live
connection objects of every HTTP client library, and stops the process. The official `kubernetes`
package is loaded (kopf imports its models), and with it urllib3, requests and websocket-client:
the count of their live connection objects says none of them carried a request.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from e2e.tests.lifecycle_helpers import Env, operator, pod_names, replica, tfjob
from e2e.harness.tfop_operator import deploy_manifests

pytestmark = pytest.mark.cluster

INVENTORY = r'''
import gc, json, os, signal, sys, threading, time
from pathlib import Path

report, go = Path(sys.argv[1]), Path(sys.argv[2])


def live(module: str, *classes: str) -> int:
    found = sys.modules.get(module)
    if found is None:
        return 0
    kinds = tuple(getattr(found, name) for name in classes)
    return sum(isinstance(obj, kinds) for obj in gc.get_objects())


def inventory() -> None:
    while not go.exists():
        time.sleep(0.1)
    report.write_text(json.dumps({
        "modules": sorted(sys.modules),
        "aiohttp sessions": live("aiohttp", "ClientSession"),
        "urllib3 pools": live("urllib3.connectionpool", "HTTPConnectionPool"),
        "http.client connections": live("http.client", "HTTPConnection"),
        "requests sessions": live("requests", "Session"),
        "websockets": live("websocket", "WebSocket"),
    }))
    os.kill(os.getpid(), signal.SIGTERM)


threading.Thread(target=inventory, daemon=True).start()
sys.argv = ["tfop", *sys.argv[3:]]
from tfop.tools.cli import main
main()
'''
NEVER_LOADED = ("tfop.kube.http1", "httpx", "httplib2", "pycurl")
UNUSED = ("urllib3 pools", "http.client connections", "requests sessions", "websockets")


def test_requests_and_watches_go_through_aiohttp_alone(cluster, namespace, tmp_path):
    deploy_manifests(cluster, None)
    op = operator(cluster, [namespace])
    report, go, log = tmp_path / "inventory.json", tmp_path / "go", tmp_path / "tfop.log"
    command = [sys.executable, "-c", INVENTORY, str(report), str(go), *op.args()[3:]]
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    with open(log, "wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env,
                                   cwd=Path(__file__).resolve().parents[2])
    try:
        job = Env(cluster, namespace, op)
        job.apply(tfjob("one-stack", {"Worker": replica(2)}))
        job.wait_children("one-stack", pod_names("one-stack", worker=2))
        go.touch()
        assert process.wait(timeout=30) == 0, log.read_text()[-3000:]
    finally:
        if process.poll() is None:
            process.kill()
    found = json.loads(report.read_text())
    modules = set(found["modules"])
    assert "aiohttp" in modules and found["aiohttp sessions"] >= 1
    assert [m for m in NEVER_LOADED if m in modules] == []
    assert {what: found[what] for what in UNUSED} == dict.fromkeys(UNUSED, 0)
