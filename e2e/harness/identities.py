"""Who each component is to the apiserver: the cluster's CA and certificates (pki.py), the
kubeconfigs made of them, and ServiceAccount kubeconfigs for tests."""
from __future__ import annotations

import ssl
from pathlib import Path

import yaml

from e2e.harness import pki, realnode

# The apiserver's identity towards kubelets (logs, exec), allowed by the kubelets' webhook
# authorization through this binding, as kubeadm sets it up.
KUBELET_API_CLIENT = "kube-apiserver-kubelet-client"
# Control-plane components use their built-in RBAC identities; kwok and
# the batch schedulers get system:masters: their RBAC is not under test.
COMPONENT_SUBJECTS = {
    "admin": "/O=system:masters/CN=tfop-e2e-admin",
    "kube-controller-manager": "/CN=system:kube-controller-manager",
    "kube-scheduler": "/CN=system:kube-scheduler",
    "kwok": "/O=system:masters/CN=tfop-e2e-kwok",
    "scheduler-plugins": "/O=system:masters/CN=tfop-e2e-scheduler-plugins",
    "volcano": "/O=system:masters/CN=tfop-e2e-volcano",
    "yunikorn": "/O=system:masters/CN=tfop-e2e-yunikorn",
    "koordinator": "/O=system:masters/CN=tfop-e2e-koordinator",
    "kueue": "/O=system:masters/CN=tfop-e2e-kueue",
}


def kubeconfig(server: str, ca: Path, user: dict) -> str:
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "tfop-e2e", "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": "user", "user": user}],
        "contexts": [{"name": "tfop-e2e", "context": {"cluster": "tfop-e2e", "user": "user"}}],
        "current-context": "tfop-e2e",
    })


def cert_kubeconfig(server: str, pki_dir: Path, cert: str) -> str:
    """A kubeconfig authenticating with client certificate `cert` of the cluster's PKI."""
    return kubeconfig(server, pki_dir / "ca.crt", {
        "client-certificate": str(pki_dir / f"{cert}.crt"), "client-key": str(pki_dir / f"{cert}.key")})


def component_kubeconfig(cluster, name: str) -> Path:
    return cluster.dir / "kubeconfigs" / f"{name}.kubeconfig"


def make_cluster_pki(cluster, server: str) -> None:
    """The CA, the apiserver's serving cert and ServiceAccount keys, and a client cert and
    kubeconfig for the admin and each component of COMPONENT_SUBJECTS."""
    d = cluster.pki
    pki.make_ca(d)
    pki.make_sa_keypair(d)
    pki.make_cert(d, "apiserver", "/CN=kube-apiserver", server_sans=[
        "IP:127.0.0.1", "DNS:localhost", f"IP:{realnode.NODE_IP}", "IP:10.0.0.1", "DNS:kubernetes",
        "DNS:kubernetes.default", "DNS:kubernetes.default.svc",
        "DNS:kubernetes.default.svc.cluster.local"])
    pki.make_cert(d, KUBELET_API_CLIENT, f"/CN={KUBELET_API_CLIENT}")
    for name, subj in COMPONENT_SUBJECTS.items():
        pki.make_cert(d, name, subj)
        kc = cluster.kubeconfig if name == "admin" else component_kubeconfig(cluster, name)
        kc.write_text(cert_kubeconfig(server, d, name))
        kc.chmod(0o600)


def admin_tls(pki_dir: Path) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki_dir / "ca.crt"))
    ctx.load_cert_chain(str(pki_dir / "admin.crt"), str(pki_dir / "admin.key"))
    return ctx


def service_account_kubeconfig(cluster, namespace: str, name: str, duration: str = "24h") -> Path:
    """Kubeconfig authenticating as ServiceAccount namespace/name, with a
    token from the TokenRequest API. Creates the ServiceAccount if missing."""
    cluster.apply({"apiVersion": "v1", "kind": "ServiceAccount",
                   "metadata": {"name": name, "namespace": namespace}})
    token = cluster.kubectl("create", "token", name, "-n", namespace, f"--duration={duration}").stdout.strip()
    d = cluster.dir / "sa-kubeconfigs"
    d.mkdir(exist_ok=True)
    path = d / f"{namespace}.{name}.kubeconfig"
    path.write_text(kubeconfig(cluster.server, cluster.pki / "ca.crt", {"token": token}))
    path.chmod(0o600)
    return path
