"""Volcano: vc-scheduler with open queues (vc-controller-manager, which would open them, is not
run), and on request vc-webhook-manager's admission webhooks."""
from __future__ import annotations

import base64
import json

from e2e import build
from e2e.harness import pki
from e2e.harness.control_plane import install_crds
from e2e.harness.identities import component_kubeconfig

VOLCANO_SCHEDULER_NAME = "volcano"
# What the harness enables of vc-webhook-manager: the pod validation (the webhook that once
# refused pods of a Pending PodGroup) and the PodGroup validation, where Volcano moved its queue
# check (volcano-sh/volcano#4132). Upstream's chart names each configuration
# volcano-admission-service-<path with / as ->; the manager polls for them, then serves.
VOLCANO_ADMISSIONS = ("/pods/validate", "/podgroups/validate")
# The health check of vc-webhook-manager, which has no health URL: a dry-run pod it must deny.
VOLCANO_WEBHOOK_PROBE = "probe:volcano-webhook-denies"

# Volcano's enqueue step (overcommit and proportion) weighs a gang against the whole cluster and
# every gang admitted before it: tests that share this Volcano run one at a time (gang_helpers.ConcurrentTests).
_VOLCANO_TIERS = """\
tiers:
- plugins:
  - name: priority
  - name: gang{gang_options}
  - name: conformance
- plugins:
  - name: overcommit
  - name: drf
  - name: predicates
  - name: proportion
  - name: nodeorder
"""


def volcano_conf(actions: str = "enqueue, allocate, backfill", gang_options: str = "") -> str:
    """vc-scheduler's configuration: these actions, and these lines of the gang plugin's options."""
    return f'actions: "{actions}"\n' + _VOLCANO_TIERS.format(gang_options=gang_options)


VOLCANO_CONF = volcano_conf()


def start_scheduler(cluster, timeout: float) -> None:
    src = build.module_dir("volcano", "volcano.sh/volcano")
    install_crds(cluster, sorted((src / "config/crd/volcano/bases").glob("*.yaml")), timeout)
    (cluster.dir / "volcano.conf").write_text(VOLCANO_CONF)
    p = cluster.state["ports"]
    cluster.spawn("volcano-scheduler", [
        build.binary("vc-scheduler"), "--kubeconfig", component_kubeconfig(cluster, "volcano"),
        "--scheduler-conf", cluster.dir / "volcano.conf", "--scheduler-name", VOLCANO_SCHEDULER_NAME,
        "--leader-elect=false", "--cache-dumper=false", "--schedule-period", "500ms",
        "--listen-address", f"127.0.0.1:{p['volcano_metrics']}",
        "--enable-healthz", "--healthz-address", f"127.0.0.1:{p['volcano_healthz']}"],
        health=f"http://127.0.0.1:{p['volcano_healthz']}/healthz")
    cluster.wait_healthy("volcano-scheduler", timeout)
    # Volcano creates its `default` and `root` queues itself once its cache syncs.
    for q in ("root", "default"):
        cluster.wait(f"volcano queue {q}", lambda q=q: cluster.kubectl(
            "get", "queues.scheduling.volcano.sh", q, check=False).returncode == 0,
            timeout, "volcano-scheduler")
        open_queue(cluster, q)


def open_queue(cluster, name: str) -> None:
    """Mark a Volcano Queue Open. vc-controller-manager normally does this;
    we don't run it, and the scheduler allocates nothing in a queue whose
    status.state is not Open."""
    cluster.kubectl("patch", "queues.scheduling.volcano.sh", name, "--subresource=status",
                    "--type=merge", "-p", '{"status":{"state":"Open"}}')


def create_queue(cluster, name: str, weight: int = 1, capability: dict | None = None) -> None:
    spec: dict = {"weight": weight, "reclaimable": True}
    if capability:
        spec["capability"] = capability
    cluster.apply({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
                   "metadata": {"name": name}, "spec": spec})
    open_queue(cluster, name)


def start_webhook(cluster, timeout: float) -> None:
    """vc-webhook-manager outside a cluster: it serves TLS on 127.0.0.1 and the webhook
    configurations name it by URL. This manager only fills in caBundles of configurations
    that exist (it creates none), so the harness creates them, as upstream's chart does."""
    port, pk = cluster.state["ports"]["volcano_webhook"], cluster.pki
    pki.make_cert(pk, "volcano-webhook", "/CN=volcano-webhook", server_sans=["IP:127.0.0.1"])
    ca = base64.b64encode((pk / "ca.crt").read_bytes()).decode()
    cluster.apply([_webhook_config(path, f"https://127.0.0.1:{port}", ca) for path in VOLCANO_ADMISSIONS])
    cluster.spawn("volcano-webhook", [
        build.binary("vc-webhook-manager"), "--kubeconfig", component_kubeconfig(cluster, "volcano"),
        "--listen-address", "127.0.0.1", "--port", port,
        # --webhook-url is only checked for being set (or a Service namespace/name) at start.
        "--webhook-url", f"https://127.0.0.1:{port}",
        "--tls-cert-file", pk / "volcano-webhook.crt",
        "--tls-private-key-file", pk / "volcano-webhook.key", "--ca-cert-file", pk / "ca.crt",
        "--enabled-admission", ",".join(VOLCANO_ADMISSIONS), "--scheduler-name", VOLCANO_SCHEDULER_NAME,
        "--graceful-shutdown-time", "1s",
        "-v", "3"],  # logs each admission ("admitting pods -- CREATE"): tests count them
        health=VOLCANO_WEBHOOK_PROBE)
    cluster.wait_healthy("volcano-webhook", timeout)


def webhook_denies(cluster) -> bool:
    # A pod the pod validation must deny (invalid JDB annotation): proves the apiserver
    # reaches the manager with our CA, and that its caches synced (it serves only then).
    p = cluster.kubectl("create", "--dry-run=server", "-f", "-", check=False, input=json.dumps(_bad_pod()))
    return "validatepod.volcano.sh" in p.stderr and "denied the request" in p.stderr


def _webhook_config(path: str, url: str, ca_bundle: str) -> dict:
    """A ValidatingWebhookConfiguration as Volcano's chart (installer/helm/.../webhooks.yaml)
    makes it for `path`, with a URL instead of its in-cluster Service."""
    resource = path.strip("/").split("/")[0]  # pods, podgroups
    api = {"pods": ("", "v1"), "podgroups": ("scheduling.volcano.sh", "v1beta1")}[resource]
    webhook = {
        "name": f"validate{resource[:-1]}.volcano.sh",  # validatepod, validatepodgroup
        "admissionReviewVersions": ["v1"], "clientConfig": {"url": url + path, "caBundle": ca_bundle},
        "failurePolicy": "Fail", "matchPolicy": "Equivalent", "sideEffects": "NoneOnDryRun",
        "timeoutSeconds": 10,
        "namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                                                    "values": ["volcano-system", "kube-system"]}]},
        "rules": [{"apiGroups": [api[0]], "apiVersions": [api[1]], "operations": ["CREATE"],
                   "resources": [resource], "scope": "*"}],
    }
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "volcano-admission-service" + path.replace("/", "-")},
            "webhooks": [webhook]}


def _bad_pod() -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "volcano-webhook-probe", "namespace": "default",
                         "annotations": {"volcano.sh/jdb-min-available": "0"}},
            "spec": {"schedulerName": VOLCANO_SCHEDULER_NAME,
                     "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}
