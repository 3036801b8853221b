"""Kueue's manager (job queueing, quota admission, MultiKueue; not a scheduler) with only its
kubeflow.org/tfjob integration. Of the webhooks in its module's manifest the harness registers
those of that integration and of Kueue's own API group, never the pod/deployment/job/... ones:
they would go through every pod the cluster creates.

Two releases: a cluster's "kueue" entry runs v0.15.0 (managedBy defaulting under MultiKueue, from
v0.11; its API served at v1beta1 and v1beta2), "kueue-0.10" runs v0.10.2 (reads no managedBy)."""
from __future__ import annotations

import base64
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import yaml

from e2e import build
from e2e.harness import pki
from e2e.harness.control_plane import install_crds
from e2e.harness.errors import ClusterError
from e2e.harness.identities import component_kubeconfig

KUEUE_NAMESPACE = "kueue-system"
KUEUE_API = "kueue.x-k8s.io/v1beta1"  # served by v0.10.2 and v0.15.0 alike
KUEUE_FRAMEWORK = "kubeflow.org/tfjob"
KUEUE_WEBHOOK_PATHS = ("-kubeflow-org-v1-tfjob", "-kueue-x-k8s-io-")
TFJOB_CRD = Path(__file__).resolve().parents[2] / "crds" / "kubeflow.org_tfjobs.yaml"
# From v0.11 Kueue reads its metrics serving certificate from here (no flag or setting names another
# place) when its own cert management is off. Each Kueue process gets its cluster's certificate
# bind-mounted there in a mount namespace of its own: only the empty mount point stays on the machine.
METRICS_CERT_DIR = Path("/etc/kueue/metrics/certs")
# MultiKueue: orphaned copies on workers collected every 10 s; a job on a worker that stopped
# answering is dispatched again after 30 s (Kueue's defaults: 1 min, 15 min).
MULTIKUEUE = {"gcInterval": "10s", "workerLostTimeout": "30s"}


@dataclass(frozen=True)
class Release:
    component: str  # of e2e.build
    binary: str
    fixed_metrics_cert: bool  # reads METRICS_CERT_DIR


RELEASES = {"kueue": Release("kueue", "kueue-manager", True),
            "kueue-0.10": Release("kueue-0.10", "kueue-manager-0.10", False)}


def release_of(schedulers) -> str | None:
    """The Kueue entry of a cluster's schedulers, if any."""
    found = [s for s in schedulers if s in RELEASES]
    if len(found) > 1:
        raise ClusterError(f"one Kueue per cluster: {found}")
    return found[0] if found else None


def start(cluster, timeout: float, entry: str = "kueue") -> None:
    """Kueue's manager as a process: its webhook serves TLS on 127.0.0.1 with a cert of the
    harness CA (its own cert management wants an in-cluster Service), and the harness makes the
    webhook configurations and the CRDs' conversion webhooks, by URL, from the module's manifests."""
    rel = RELEASES[entry]
    src = build.module_dir(rel.component, "sigs.k8s.io/kueue")
    p, pk = cluster.state["ports"], cluster.pki
    url = f"https://127.0.0.1:{p['kueue_webhook']}"
    ca = base64.b64encode((pk / "ca.crt").read_bytes()).decode()
    crds = cluster.dir / "kueue-crds.yaml"
    crds.write_text(yaml.safe_dump_all(_crds(src / "config/components/crd", url + "/convert", ca)))
    # The TFJob CRD first: an integration whose API is missing is set up only after a backoff.
    install_crds(cluster, [TFJOB_CRD, crds], timeout)
    (cluster.dir / "kueue.yaml").write_text(yaml.safe_dump(_config(p, _serving_cert(pk, "kueue-webhook"))))
    cluster.apply(_webhook_configs(src / "config/components/webhook/manifests.yaml", url, ca))
    cluster.kubectl("create", "namespace", KUEUE_NAMESPACE)
    cmd = [build.binary(rel.binary), "--config", cluster.dir / "kueue.yaml"]
    if rel.fixed_metrics_cert:
        cmd = _with_metrics_cert(_serving_cert(pk, "kueue-metrics"), cmd)
    cluster.spawn("kueue", cmd, env={"KUBECONFIG": str(component_kubeconfig(cluster, "kueue"))},
                  health=f"http://127.0.0.1:{p['kueue_health']}/readyz")
    cluster.wait_healthy("kueue", timeout)
    cluster.wait("kueue's webhook called by the apiserver", lambda: _webhook_answers(cluster), timeout, "kueue")


def _serving_cert(pk: Path, name: str) -> Path:
    """A directory with tls.crt and tls.key (the names controller-runtime reads) for 127.0.0.1."""
    pki.make_cert(pk, name, f"/CN={name}", server_sans=["IP:127.0.0.1"])
    certs = pk / name
    certs.mkdir(exist_ok=True)
    shutil.copyfile(pk / f"{name}.crt", certs / "tls.crt")
    shutil.copyfile(pk / f"{name}.key", certs / "tls.key")
    return certs


def _with_metrics_cert(certs: Path, cmd: list) -> list:
    """cmd run in a mount namespace of its own, with `certs` bind-mounted on METRICS_CERT_DIR."""
    if os.geteuid() != 0:
        raise ClusterError(f"Kueue v0.11+ reads its metrics certificate from {METRICS_CERT_DIR}: the harness "
                           "bind-mounts one there, which needs root (CI runs as root)")
    METRICS_CERT_DIR.mkdir(parents=True, exist_ok=True)
    unshare = shutil.which("unshare")
    if unshare is None:
        raise ClusterError("unshare (util-linux) not found: Kueue's metrics certificate is mounted with it")
    mount_then_run = 'mount --bind "$1" "$2" && shift 2 && exec "$@"'
    return [unshare, "--mount", "--propagation", "private", "sh", "-c", mount_then_run, "kueue",
            certs, METRICS_CERT_DIR, *cmd]


def _crds(crd_dir: Path, convert_url: str, ca_bundle: str) -> list[dict]:
    """Kueue's CRDs; those its kustomization gives a conversion webhook (the ones served at two
    versions that convert) get it by URL."""
    kustomization = yaml.safe_load((crd_dir / "kustomization.yaml").read_text())
    converted = set()
    for patch in kustomization.get("patches") or []:
        doc = yaml.safe_load((crd_dir / patch["path"]).read_text())
        if ((doc.get("spec") or {}).get("conversion") or {}).get("strategy") == "Webhook":
            converted.add(doc["metadata"]["name"])
    docs = [yaml.safe_load(f.read_text()) for f in sorted((crd_dir / "bases").glob("*.yaml"))]
    for doc in docs:
        if doc["metadata"]["name"] in converted:
            doc["spec"]["conversion"] = {"strategy": "Webhook", "webhook": {
                "clientConfig": {"url": convert_url, "caBundle": ca_bundle}, "conversionReviewVersions": ["v1"]}}
    return docs


def _webhook_answers(cluster) -> bool:
    # A dry-run ResourceFlavor goes through Kueue's mutating and validating webhooks.
    probe = {"apiVersion": KUEUE_API, "kind": "ResourceFlavor",
             "metadata": {"name": "kueue-webhook-probe"}}
    return cluster.kubectl("create", "--dry-run=server", "-f", "-", check=False,
                           input=json.dumps(probe)).returncode == 0


def _config(ports: dict, cert_dir: Path) -> dict:
    """Kueue's Configuration (config.kueue.x-k8s.io/v1beta1): one process, everything on 127.0.0.1."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta1", "kind": "Configuration",
        "namespace": KUEUE_NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{ports['kueue_health']}"},
        "metrics": {"bindAddress": f"127.0.0.1:{ports['kueue_metrics']}"},
        "webhook": {"host": "127.0.0.1", "port": ports["kueue_webhook"], "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "manageJobsWithoutQueueName": False,  # TFJobs without a queue label are tfop's alone
        "integrations": {"frameworks": [KUEUE_FRAMEWORK]},
        "multiKueue": MULTIKUEUE,
        # Off: the on-demand visibility API server wants its own certs and an APIService.
        "featureGates": {"VisibilityOnDemand": False, "MultiKueue": True},
    }


def _webhook_configs(manifest: Path, url: str, ca_bundle: str) -> list[dict]:
    """The Mutating/ValidatingWebhookConfigurations of Kueue's manifest, with only the webhooks of
    KUEUE_WEBHOOK_PATHS, each called by URL instead of through an in-cluster Service."""
    configs = []
    for doc in yaml.safe_load_all(manifest.read_text()):
        if not doc or not doc.get("webhooks"):
            continue
        webhooks = []
        for hook in doc["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            if any(part in path for part in KUEUE_WEBHOOK_PATHS):
                webhooks.append({**hook, "clientConfig": {"url": url + path, "caBundle": ca_bundle}})
        configs.append({"apiVersion": doc["apiVersion"], "kind": doc["kind"],
                        "metadata": {"name": "kueue-" + doc["metadata"]["name"]}, "webhooks": webhooks})
    return configs


def config_text(cluster) -> str:
    """The Configuration Kueue runs with, as its release's ConfigMap would hold it."""
    return (cluster.dir / "kueue.yaml").read_text()


def restart_with_frameworks(cluster, frameworks: list[str], timeout: float) -> None:
    """Kueue started again with these integrations (it reads its Configuration at start only). A
    framework left out keeps a webhook that admits unchanged (Kueue's no-op one): the harness's
    webhook configurations stay as they are."""
    cluster.stop_component("kueue")
    config = yaml.safe_load(config_text(cluster))
    config["integrations"]["frameworks"] = list(frameworks)
    (cluster.dir / "kueue.yaml").write_text(yaml.safe_dump(config))
    cluster.start_component("kueue", timeout)
    cluster.wait("kueue's webhook called by the apiserver", lambda: _webhook_answers(cluster), timeout, "kueue")
