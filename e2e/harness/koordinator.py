"""Koordinator's koord-scheduler with only its gang plugin (Coscheduling) on the in-tree defaults."""
from __future__ import annotations

import yaml

from e2e import build
from e2e.harness.control_plane import install_crds
from e2e.harness.identities import component_kubeconfig

KOORDINATOR_SCHEDULER_NAME = "koord-scheduler"


def start(cluster, timeout: float) -> None:
    src = build.module_dir("koordinator", "github.com/koordinator-sh/koordinator")
    install_crds(cluster, sorted((src / "config/crd/bases").glob("*.yaml")), timeout)
    kc, port = component_kubeconfig(cluster, "koordinator"), cluster.state["ports"]["koord"]
    gang = [{"name": "Coscheduling"}]
    conf = {
        "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
        "leaderElection": {"leaderElect": False}, "clientConnection": {"kubeconfig": str(kc)},
        # Only koordinator's gang plugin on top of the in-tree defaults:
        # annotations gang.scheduling.koordinator.sh/{name,min-available,...}.
        "profiles": [{"schedulerName": KOORDINATOR_SCHEDULER_NAME, "plugins": {
            p: {"enabled": gang} for p in
            ("preEnqueue", "preFilter", "postFilter", "reserve", "permit", "postBind")}}],
    }
    (cluster.dir / "koordinator.yaml").write_text(yaml.safe_dump(conf))
    cluster.spawn("koord-scheduler", [
        build.binary("koord-scheduler"), "--config", cluster.dir / "koordinator.yaml",
        "--authentication-kubeconfig", kc, "--authorization-kubeconfig", kc,
        "--bind-address", "127.0.0.1", "--secure-port", port,
        # Its deprecated plain-HTTP port defaults to 0.0.0.0:10251, config file or not: off, or
        # a second cluster on the machine cannot start.
        "--port", "0"], health=f"https://127.0.0.1:{port}/healthz")
    cluster.wait_healthy("koord-scheduler", timeout)
