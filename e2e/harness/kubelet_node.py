"""The real node of a cluster: containerd, CoreDNS, a kubelet and kube-proxy as components, with
their certificates and the images its pods run. What they need of the machine (paths, bridge,
configuration files, teardown) is realnode.py's."""
from __future__ import annotations

import time
from pathlib import Path

from e2e import build
from e2e.harness import coredns, nodes, pki, processes, realnode
from e2e.harness.control_plane import SERVICE_CIDR
from e2e.harness.errors import ClusterError
from e2e.harness.identities import KUBELET_API_CLIENT, cert_kubeconfig, component_kubeconfig

# A probe instead of an HTTP health URL: containerd answers on its socket.
CONTAINERD_PROBE = "probe:containerd"
REAL_NODE_COMPONENTS = ("containerd", "coredns", "kubelet", "kube-proxy")


def real_node_images(node_images: tuple[str, ...]) -> tuple[str, ...]:
    """Every image a real node is given at its start: the pause image its pods' sandboxes run, then
    `node_images`."""
    return ("pause", *node_images)


def containerd_answers(cluster) -> bool:
    return realnode.containerd_ready(realnode.PATHS)


def claim(cluster, paths: realnode.Paths) -> None:
    """One real-node cluster per machine: refuse while another one runs, clean up after one
    that crashed, then record this cluster as the owner."""
    if paths.owner.exists():
        other = Path(paths.owner.read_text().strip()).resolve()
        alive = processes.alive_components(processes.load_state(other), other)
        if other != cluster.dir and any(alive.get(n) for n in REAL_NODE_COMPONENTS):
            raise ClusterError(f"a real-node cluster already runs in {other} (one per machine): "
                               f"`python -m e2e.harness down --dir {other}` first")
    realnode.teardown(paths)
    paths.root.mkdir(parents=True, exist_ok=True)
    paths.owner.write_text(str(cluster.dir))


def owns(cluster) -> bool:
    owner = realnode.PATHS.owner
    return bool(cluster.state.get("real_nodes")) or (owner.exists() and Path(owner.read_text().strip()) == cluster.dir)


def start(cluster, node_images: tuple[str, ...], timeout: float, tainted: bool) -> None:
    """containerd, CoreDNS, a kubelet and kube-proxy on this machine (e2e.harness.realnode): a Ready
    node whose pods really run, tainted when kwok nodes share the cluster."""
    from e2e.harness import images

    paths = realnode.PATHS  # claimed by Cluster.up, before the apiserver started on its bridge
    built = images.ensure(list(real_node_images(node_images)))
    cluster.state["node_images"] = {name: image.ref for name, image in built.items()}
    cluster.state["real_nodes"] = [realnode.NODE_NAME]
    cluster.state["real_node_tainted"] = tainted
    cluster.save()
    _make_identities(cluster)
    ports = cluster.state["ports"]
    kubeconfigs = {name: component_kubeconfig(cluster, name) for name in ("coredns", "kube-proxy")}
    realnode.prepare_host(paths, built["pause"].ref, kubeconfigs, ports, cluster.pki, SERVICE_CIDR, tainted)
    cluster.spawn("containerd", ["containerd", "--config", paths.containerd_config], health=CONTAINERD_PROBE)
    cluster.wait_healthy("containerd", timeout)
    for image in built.values():
        t0 = time.monotonic()
        realnode.import_image(paths, image.archive, image.ref)
        print(f"[e2e.harness] image {image.ref} in containerd ({time.monotonic() - t0:.1f}s)", flush=True)
    coredns.start(cluster, paths.corefile, timeout)
    node = realnode.NODE_NAME
    cluster.spawn("kubelet", realnode.kubelet_command(build.binary("kubelet"), paths,
                                                      component_kubeconfig(cluster, "kubelet")),
                  health=f"http://127.0.0.1:{ports['kubelet_healthz']}/healthz")
    cluster.wait_healthy("kubelet", timeout)
    cluster.wait(f"node {node} Ready", lambda: nodes.node_ready(cluster, node), timeout, "kubelet")
    cluster.spawn("kube-proxy", realnode.kube_proxy_command(build.binary("kube-proxy"), paths),
                  health=f"http://127.0.0.1:{ports['kube_proxy_healthz']}/healthz")
    cluster.wait_healthy("kube-proxy", timeout)


def _make_identities(cluster) -> None:
    """The kubelet's client and serving certs, CoreDNS's and kube-proxy's, their kubeconfigs, and
    the binding that lets the apiserver reach the kubelet (logs, exec)."""
    pk, node = cluster.pki, realnode.NODE_NAME
    pki.make_cert(pk, "kubelet-client", f"/O=system:nodes/CN=system:node:{node}")
    pki.make_cert(pk, "kubelet", f"/CN={node}", server_sans=[f"IP:{realnode.NODE_IP}", f"DNS:{node}"])
    pki.make_cert(pk, "coredns", "/O=system:masters/CN=tfop-e2e-coredns")
    pki.make_cert(pk, "kube-proxy", "/CN=system:kube-proxy")  # bound to system:node-proxier by default
    for name, cert in (("kubelet", "kubelet-client"), ("coredns", "coredns"), ("kube-proxy", "kube-proxy")):
        component_kubeconfig(cluster, name).write_text(cert_kubeconfig(cluster.server, pk, cert))
    cluster.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                   "metadata": {"name": KUBELET_API_CLIENT},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                               "name": "system:kubelet-api-admin"},
                   "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                                 "name": KUBELET_API_CLIENT}]})


def stop_kubelet(cluster) -> None:
    """Stop the real node's kubelet for good, as one that crashed: its pods' containers keep
    running under containerd, but nothing renews the node's Lease or reports its pods, so the
    node lifecycle controller marks its Ready condition Unknown after --node-monitor-grace-period.
    Alone in its cluster, the node may then get the unreachable NoSchedule taint only: with every
    node down the controller is in full disruption and adds no NoExecute taint, which
    wait_node_lost() waits for. start_kubelet() brings it back."""
    if not cluster.state.get("real_nodes"):
        raise ClusterError("this cluster has no real node")
    cluster.stop_component("kubelet")


def start_kubelet(cluster, timeout: float = 90) -> None:
    """Start the real node's kubelet again (the same command line, root dir and certificates)
    and wait until the node is Ready without the unreachable taint. It takes up the containers
    it finds and ends those of pods deleted while it was away."""
    cluster.start_component("kubelet", timeout)
    nodes.wait_recovered(cluster, realnode.NODE_NAME, timeout)


def load_image(cluster, name: str) -> str:
    """Build (unless cached) and import an e2e.harness.images image into the real node's
    containerd; its ref."""
    from e2e.harness import images

    if not owns(cluster):
        raise ClusterError("this cluster has no real node")
    image = images.ensure([name])[name]
    t0 = time.monotonic()
    realnode.import_image(realnode.PATHS, image.archive, image.ref)
    print(f"[e2e.harness] image {image.ref} in containerd ({time.monotonic() - t0:.1f}s)", flush=True)
    cluster.state.setdefault("node_images", {})[name] = image.ref
    cluster.save()
    return image.ref


def image_ref(cluster, name: str) -> str:
    """The reference of an e2e.harness.images image imported into the real node's containerd."""
    try:
        return cluster.state["node_images"][name]
    except KeyError:
        raise ClusterError(f"no image {name!r} on this cluster's real node; it has "
                           f"{sorted(cluster.state.get('node_images', {}))}") from None
