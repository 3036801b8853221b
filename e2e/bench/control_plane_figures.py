"""The control plane's side of a row: its components' CPU, etcd compaction, and the schedulers'
client rate limits (their configz and throttle metrics)."""
from __future__ import annotations

import json
import ssl
import urllib.request
from pathlib import Path

from e2e.bench.machine import proc_cpu
from e2e.bench.operator_metrics import metric_sum


def component_cpu(cluster) -> dict[str, float]:
    """CPU seconds so far of each control-plane process the cluster started (its state's pids)."""
    cpu = {name: proc_cpu(pid) for name, pid in (cluster.state.get("pids") or {}).items()}
    return {name: s for name, s in cpu.items() if s is not None}


def compact_etcd(cluster) -> int:
    """Compact etcd's history up to now (its HTTP gateway); returns the revision. The apiserver
    compacts only every 5 min, keeping 5-10 min of history: rows of big pods one after another
    (--replicas 2000w: 2000 pods of 76 kB TF_CONFIG, ~5 revisions each with their deletion) would
    otherwise pile up past etcd's 2 GiB quota, after which the cluster takes no more writes."""
    url = f"http://127.0.0.1:{cluster.state['ports']['etcd']}/v3"

    def post(path: str, body: dict) -> dict:
        req = urllib.request.Request(url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            return json.loads(r.read() or b"{}")

    revision = int(post("/kv/range", {"key": "AA==", "count_only": True})["header"]["revision"])
    post("/kv/compaction", {"revision": revision, "physical": True})
    return revision


# Schedulers with a client-side rate limit (kube-scheduler's own and scheduler-plugins'; Volcano's is
# 2000 QPS by default, kwok has none): component -> its secure port's key in the cluster's ports.
# Components whose client QPS --scheduler-qps raises (their name -> their port's key in the cluster's state).
RATE_LIMITED_SCHEDULERS = {"kube-scheduler": "scheduler", "scheduler-plugins-scheduler": "cosched",
                           "kube-controller-manager": "kcm"}
SECURE_PORTS = {**RATE_LIMITED_SCHEDULERS, "kube-apiserver": "apiserver"}


def component_get(cluster, name: str, path: str, timeout: float = 10, binary: bool = False) -> str | bytes:
    """GET a component's secure port as admin (a scheduler's serving certificate is self-signed)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    ctx.load_cert_chain(str(cluster.pki / "admin.crt"), str(cluster.pki / "admin.key"))
    port = cluster.state["ports"][SECURE_PORTS[name]]
    with urllib.request.urlopen(f"https://127.0.0.1:{port}{path}", timeout=timeout, context=ctx) as r:
        data = r.read()
    return data if binary else data.decode()


def running_schedulers(cluster) -> list[str]:
    return [n for n in RATE_LIMITED_SCHEDULERS if n in (cluster.state.get("pids") or {})]


def scheduler_clients(cluster) -> dict[str, dict]:
    """The client QPS and burst each scheduler runs with (its /configz): proof of --scheduler-qps."""
    out = {}
    for name in running_schedulers(cluster):
        try:
            conn = client_connection(json.loads(component_get(cluster, name, "/configz")))
            out[name] = {"qps": conn.get("QPS"), "burst": conn.get("Burst")}
        except (OSError, ValueError, KeyError):
            pass
    controller = cosched_controller_client(cluster)
    if controller:
        out["scheduler-plugins-controller"] = controller
    return out


def cosched_controller_client(cluster) -> dict | None:
    """The scheduler-plugins controller's client QPS and burst, from its command line (it has no /configz)."""
    pid = (cluster.state.get("pids") or {}).get("scheduler-plugins-controller")
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0") if pid else []
    except OSError:
        return None
    flags = dict(zip(args, args[1:]))
    return {"qps": int(flags.get("--qps", 5)), "burst": int(flags.get("--burst", 10))} if args else None


def client_connection(configz: dict) -> dict:
    """The ClientConnection of a /configz answer (a scheduler's at its top, the controller manager's
    under Generic)."""
    for value in configz.values():
        if isinstance(value, dict):
            if "ClientConnection" in value:
                return value["ClientConnection"]
            found = client_connection(value)
            if found:
                return found
    return {}


def scheduler_throttle(cluster) -> dict[str, float]:
    """Seconds each scheduler's requests have waited so far for its client-side rate limiter."""
    out = {}
    for name in running_schedulers(cluster):
        try:
            text = component_get(cluster, name, "/metrics")
        except OSError:
            continue
        out[name] = metric_sum(text, "rest_client_rate_limiter_duration_seconds_sum{")
    return out
