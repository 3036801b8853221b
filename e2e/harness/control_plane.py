"""etcd, kube-apiserver and kube-controller-manager: the control plane every cluster starts first,
in the harness's own Kubernetes version or an optional one (KUBERNETES_VERSIONS)."""
from __future__ import annotations

from pathlib import Path

import yaml

from e2e import build
from e2e.harness.identities import KUBELET_API_CLIENT, component_kubeconfig
from e2e.harness.observed import AUDIT_LOG

# Optional control planes besides the harness's own (the `kubernetes` component): version ->
# build component, whose binaries are named <binary>-<version>. Only apiserver, controller
# manager and kube-scheduler; kubectl, etcd and kwok stay the harness's own.
# 1.37: native gang scheduling (Workload API, scheduling.k8s.io/v1beta1 PodGroup), off by default
# there, so enabled in all three: with the scheduler's gate on but v1beta1 not served, the
# scheduler schedules no pod at all.
# 1.30: the oldest release tfop supports (e2e/tests/test_kubernetes_versions.py): it takes every
# flag the harness gives its own 1.34 (found by starting it); only 1.37 gets NATIVE_GANG_FLAGS.
KUBERNETES_VERSIONS = {"1.30": "kubernetes-1.30", "1.37": "kubernetes-1.37"}
NATIVE_GANG_FLAGS = {
    "kube-apiserver": ["--runtime-config=scheduling.k8s.io/v1beta1=true", "--feature-gates=GenericWorkload=true"],
    "kube-controller-manager": ["--feature-gates=GenericWorkload=true"],  # podgroup-protection's finalizer
    "kube-scheduler": ["--feature-gates=GenericWorkload=true"],
}
SERVICE_CIDR = "10.0.0.0/24"
# On top of the apiserver's default plugins. OwnerReferencesPermissionEnforcement (on in
# OpenShift): setting blockOwnerDeletion on a child needs `update` on its owner's finalizers,
# so every test proves the operator's ClusterRole grants it.
# NodeRestriction (on in every real cluster): a kubelet writes only its own Node and its pods.
EXTRA_ADMISSION_PLUGINS = ("OwnerReferencesPermissionEnforcement", "NodeRestriction")
# DIR/AUDIT_LOG: one JSON line per request of a ServiceAccount (Metadata level: who, verb,
# object, response code), so a test can compare what the operator did with what its role grants.
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1", "kind": "Policy",
    "omitStages": ["RequestReceived"],  # each request once, when answered (watches: when started)
    "rules": [
        # kube-controller-manager acts as ServiceAccounts of kube-system: not under test, and most
        # of the traffic.
        {"level": "None", "userGroups": ["system:serviceaccounts:kube-system"]},
        # A TFJob a ServiceAccount creates (MultiKueue's copy on a worker), with what it sent.
        {"level": "Request", "userGroups": ["system:serviceaccounts"], "verbs": ["create"],
         "resources": [{"group": "kubeflow.org", "resources": ["tfjobs"]}]},
        {"level": "Metadata", "userGroups": ["system:serviceaccounts"]},
        {"level": "None"},
    ],
}


def binary(cluster, name: str) -> Path:
    """kube-apiserver, kube-controller-manager or kube-scheduler of this cluster's version."""
    version = cluster.state.get("kubernetes")
    return build.binary(f"{name}-{version}" if version else name)


def version_flags(cluster, name: str) -> list[str]:
    return NATIVE_GANG_FLAGS[name] if cluster.state.get("kubernetes") == "1.37" else []


def start_etcd(cluster, timeout: float) -> str:
    """etcd on 127.0.0.1, without fsync (a test cluster's data need not survive the machine);
    returns its client URL."""
    d, p = cluster.dir, cluster.state["ports"]
    etcd_url = f"http://127.0.0.1:{p['etcd']}"
    cluster.spawn("etcd", [
        build.binary("etcd"), "--data-dir", d / "etcd", "--name", "tfop-e2e",
        "--listen-client-urls", etcd_url, "--advertise-client-urls", etcd_url,
        "--listen-peer-urls", f"http://127.0.0.1:{p['etcd_peer']}",
        "--initial-advertise-peer-urls", f"http://127.0.0.1:{p['etcd_peer']}",
        "--initial-cluster", f"tfop-e2e=http://127.0.0.1:{p['etcd_peer']}",
        "--unsafe-no-fsync", "--log-level", "warn"], health=f"{etcd_url}/health")
    cluster.wait_healthy("etcd", timeout)
    return etcd_url


def start_apiserver(cluster, etcd_url: str, address: str, timeout: float) -> None:
    """kube-apiserver with RBAC, the audit log and the kubelet client certs, on `address`."""
    d, pk = cluster.dir, cluster.pki
    (d / "audit-policy.yaml").write_text(yaml.safe_dump(AUDIT_POLICY, sort_keys=False))
    cluster.spawn("kube-apiserver", [
        binary(cluster, "kube-apiserver"), *version_flags(cluster, "kube-apiserver"),
        "--etcd-servers", etcd_url,
        "--bind-address", address, "--advertise-address", address,
        "--secure-port", cluster.state["ports"]["apiserver"],
        "--tls-cert-file", pk / "apiserver.crt", "--tls-private-key-file", pk / "apiserver.key",
        "--client-ca-file", pk / "ca.crt", "--authorization-mode", "Node,RBAC",
        "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
        "--service-account-key-file", pk / "sa.pub",
        "--service-account-signing-key-file", pk / "sa.key",
        "--service-cluster-ip-range", SERVICE_CIDR, "--allow-privileged=true",
        # To kubelets (logs, exec) as a real cluster does: a client cert of our CA, their
        # serving certs checked against it, at the node's InternalIP.
        "--kubelet-client-certificate", pk / f"{KUBELET_API_CLIENT}.crt",
        "--kubelet-client-key", pk / f"{KUBELET_API_CLIENT}.key",
        "--kubelet-certificate-authority", pk / "ca.crt",
        "--kubelet-preferred-address-types", "InternalIP",
        # The `kubernetes` Service's endpoint is the apiserver's address, when pods can
        # reach it; never a loopback address (validation rejects it anyway).
        "--endpoint-reconciler-type", "none" if address.startswith("127.") else "lease",
        "--enable-admission-plugins", ",".join(EXTRA_ADMISSION_PLUGINS),
        "--audit-policy-file", d / "audit-policy.yaml", "--audit-log-path", d / AUDIT_LOG,
        "--audit-log-format", "json", "--audit-log-mode", "blocking",  # written before the answer
        "--audit-log-maxsize", "100000",  # MB; never rotated (default 100): readers keep byte offsets
        # /debug/pprof: what the apiserver spends its CPU on in a benchmark row (`go tool pprof`)
        "--enable-priority-and-fairness=false", "--profiling=true",
        # On SIGTERM: new requests answered 429 until those in flight are done, then out in
        # about 2 s (otherwise open watches hold the HTTP server's shutdown for 60 s).
        "--shutdown-send-retry-after=true"], health=f"{cluster.server}/readyz", admin=True)
    cluster.wait_healthy("kube-apiserver", timeout)


def start_controller_manager(cluster, timeout: float) -> None:
    pk, port = cluster.pki, cluster.state["ports"]["kcm"]
    kc = component_kubeconfig(cluster, "kube-controller-manager")
    cluster.spawn("kube-controller-manager", [
        binary(cluster, "kube-controller-manager"), *version_flags(cluster, "kube-controller-manager"),
        "--kubeconfig", kc, "--authentication-kubeconfig", kc, "--authorization-kubeconfig", kc,
        "--bind-address", "127.0.0.1", "--secure-port", port, "--leader-elect=false",
        "--root-ca-file", pk / "ca.crt", "--service-account-private-key-file", pk / "sa.key",
        "--cluster-signing-cert-file", pk / "ca.crt", "--cluster-signing-key-file", pk / "ca.key",
        # each controller acts as its own ServiceAccount, as in a real cluster
        "--use-service-account-credentials=true", "--controllers=*", *_kcm_client_flags(cluster),
        *_kcm_node_monitor_flags(cluster)],
        health=f"https://127.0.0.1:{port}/healthz")
    cluster.wait_healthy("kube-controller-manager", timeout)


def _kcm_client_flags(cluster) -> list[str]:
    """kube-controller-manager's client QPS (default 20, burst 30) bounds its endpoints and
    namespace controllers: a benchmark row would otherwise share it with the previous row's
    deletions, so it is raised with the schedulers'."""
    qps = cluster.state.get("scheduler_qps")
    return ["--kube-api-qps", str(qps), "--kube-api-burst", str(2 * qps)] if qps else []


def _kcm_node_monitor_flags(cluster) -> list[str]:
    grace = cluster.state.get("node_monitor_grace_period")
    return [f"--node-monitor-grace-period={grace:g}s"] if grace else []


def install_crds(cluster, files: list[Path], timeout: float) -> None:
    """Apply these CRD manifests and wait until every CRD in them is Established."""
    for f in files:
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(f))
    names = []
    for f in files:
        names += [doc["metadata"]["name"] for doc in yaml.safe_load_all(f.read_text())
                  if doc and doc.get("kind") == "CustomResourceDefinition"]
    cluster.kubectl("wait", "--for=condition=Established", f"--timeout={int(timeout)}s",
                    *[f"crd/{n}" for n in names], timeout=timeout + 10)
