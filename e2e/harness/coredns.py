"""CoreDNS for a real node's pods: cluster.local names from the apiserver, on the node's DNS
address (realnode.prepare_host writes its Corefile)."""
from __future__ import annotations

from pathlib import Path

from e2e import build


def start(cluster, corefile: Path, timeout: float) -> None:
    ready = cluster.state["ports"]["coredns_ready"]
    cluster.spawn("coredns", [build.binary("coredns"), "-conf", corefile],
                  health=f"http://127.0.0.1:{ready}/ready")
    cluster.wait_healthy("coredns", timeout)
