"""Kueue's manager (job queueing, quota admission; not a scheduler) with only its
kubeflow.org/tfjob integration. Of the webhooks in its module's manifest the harness registers
those of that integration and of Kueue's own API group, never the pod/deployment/job/... ones:
they would go through every pod the cluster creates."""
from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

import yaml

from e2e import build
from e2e.harness import pki
from e2e.harness.control_plane import install_crds
from e2e.harness.identities import component_kubeconfig

KUEUE_NAMESPACE = "kueue-system"
KUEUE_FRAMEWORK = "kubeflow.org/tfjob"
KUEUE_WEBHOOK_PATHS = ("-kubeflow-org-v1-tfjob", "-kueue-x-k8s-io-")
TFJOB_CRD = Path(__file__).resolve().parents[2] / "crds" / "kubeflow.org_tfjobs.yaml"


def start(cluster, timeout: float) -> None:
    """Kueue's manager as a process: its webhook serves TLS on 127.0.0.1 with a cert of the
    harness CA (its own cert management wants an in-cluster Service), and the harness makes the
    webhook configurations, by URL, from the module's manifest."""
    src = build.module_dir("kueue", "sigs.k8s.io/kueue")
    # The TFJob CRD first: an integration whose API is missing is set up only after a backoff.
    kueue_crds = sorted((src / "config/components/crd/bases").glob("*.yaml"))
    install_crds(cluster, [TFJOB_CRD, *kueue_crds], timeout)
    p, pk = cluster.state["ports"], cluster.pki
    pki.make_cert(pk, "kueue-webhook", "/CN=kueue-webhook", server_sans=["IP:127.0.0.1"])
    certs = pk / "kueue-webhook"  # the names controller-runtime's webhook server reads
    certs.mkdir(exist_ok=True)
    shutil.copyfile(pk / "kueue-webhook.crt", certs / "tls.crt")
    shutil.copyfile(pk / "kueue-webhook.key", certs / "tls.key")
    (cluster.dir / "kueue.yaml").write_text(yaml.safe_dump(_config(p, certs)))
    ca = base64.b64encode((pk / "ca.crt").read_bytes()).decode()
    cluster.apply(_webhook_configs(src / "config/components/webhook/manifests.yaml",
                                   f"https://127.0.0.1:{p['kueue_webhook']}", ca))
    cluster.kubectl("create", "namespace", KUEUE_NAMESPACE)
    cluster.spawn("kueue", [build.binary("kueue-manager"), "--config", cluster.dir / "kueue.yaml"],
                  env={"KUBECONFIG": str(component_kubeconfig(cluster, "kueue"))},
                  health=f"http://127.0.0.1:{p['kueue_health']}/readyz")
    cluster.wait_healthy("kueue", timeout)
    cluster.wait("kueue's webhook called by the apiserver", lambda: _webhook_answers(cluster), timeout, "kueue")


def _webhook_answers(cluster) -> bool:
    # A dry-run ResourceFlavor goes through Kueue's mutating and validating webhooks.
    probe = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor",
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
        # Off: the on-demand visibility API server wants its own certs and an APIService; MultiKueue
        # is not tested here.
        "featureGates": {"VisibilityOnDemand": False, "MultiKueue": False},
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
