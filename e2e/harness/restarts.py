"""One component stopped and started again in place: the same command line, environment, ports
and data, as a crashed or restarted process of a real cluster."""
from __future__ import annotations

import time

from e2e.harness import kwok, processes
from e2e.harness.errors import ClusterError


def stop_component(cluster, name: str, grace: float = 10.0) -> None:
    """Stop one component's process group: SIGTERM, then SIGKILL after `grace` s. Its
    command, ports and data stay recorded for start_component()."""
    _component(cluster, name)
    proc, pid = cluster.forget_process(name), cluster.state["pids"].pop(name, None)
    if pid is not None:
        processes.kill_groups([pid], cluster.dir, grace)
    if proc is not None:
        proc.wait(timeout=5)  # kill_groups may have reaped it already: then this returns at once
    cluster.save()


def start_component(cluster, name: str, timeout: float = 60) -> int:
    """Start a stopped component again with the same command line, environment, ports
    and data dir, and wait until it is healthy by the check it passed at start. After
    etcd, also until the apiserver's /readyz is OK again. Returns the new pid."""
    _component(cluster, name)
    if cluster.alive_components().get(name):
        raise ClusterError(f"{name} is running (pid {cluster.state['pids'][name]}): stop it first")
    with open(cluster.logs / f"{name}.log", "ab") as log:  # where one run ends in the log
        log.write(f"\n===== e2e.harness: {name} started again at {time.strftime('%H:%M:%S')} =====\n".encode())
    kwok_nodes = kwok.release_nodes(cluster) if name == "kwok" else []
    cluster.launch(name)
    cluster.wait_healthy(name, timeout)
    if name == "etcd" and cluster.alive_components().get("kube-apiserver"):
        cluster.wait_healthy("kube-apiserver", timeout)
    if kwok_nodes:
        kwok.wait_leased(cluster, kwok_nodes, timeout)
    return cluster.state["pids"][name]


def _component(cluster, name: str) -> dict:
    known = cluster.state.get("components", {})
    if name not in known:
        raise ClusterError(f"no component {name!r} in this cluster; it has {sorted(known)}")
    return known[name]
