"""kwok: fake GPU nodes, with pods that run as kwok_stages says; and lost nodes, as a machine
that died or was cut off behaves."""
from __future__ import annotations

import json

from e2e import build
from e2e.harness import kwok_stages, nodes
from e2e.harness.errors import ClusterError
from e2e.harness.identities import component_kubeconfig

NODE_LABEL = "tfop.test/node"  # value "fake-gpu" on every fake node
NODE_LABEL_VALUE = "fake-gpu"
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"  # kwok manages nodes with value "fake"
# A lost node's value of KWOK_NODE_ANNOTATION (Cluster.lose_node): out of kwok's selector.
KWOK_LOST_NODE_VALUE = "lost"
GPU_RESOURCE = "nvidia.com/gpu"


def start(cluster, timeout: float) -> None:
    kwok_src = build.module_dir("kwok", "sigs.k8s.io/kwok")
    (cluster.dir / "kwok.yaml").write_text(kwok_stages.stages_yaml(kwok_src))
    port = cluster.state["ports"]["kwok"]
    cluster.spawn("kwok", [
        build.binary("kwok"), "--kubeconfig", component_kubeconfig(cluster, "kwok"),
        "--config", cluster.dir / "kwok.yaml", "--manage-all-nodes=false",
        "--manage-nodes-with-annotation-selector", f"{KWOK_NODE_ANNOTATION}=fake",
        "--cidr", "10.244.0.1/16", "--node-ip", "10.240.0.1",
        "--node-lease-duration-seconds", "40", "--server-address", f"127.0.0.1:{port}"],
        health=f"http://127.0.0.1:{port}/healthz")
    cluster.wait_healthy("kwok", timeout)


def add_gpu_nodes(cluster, n: int, gpus: int = 1, *, wait: bool = True) -> list[str]:
    """Create n fake nodes (cpu 32, memory 256Gi, pods 110, nvidia.com/gpu
    = gpus) managed by kwok; returns their names."""
    if cluster.state.get("real_nodes") and not cluster.state.get("real_node_tainted"):
        raise ClusterError("this cluster's real node is not tainted (it was started alone): kwok tests' pods "
                           "would land on it; start the cluster with gpu_nodes > 0")
    start_at = cluster.state.get("next_node", 0)
    names = [f"tfop-gpu-{i}" for i in range(start_at, start_at + n)]
    alloc = {"cpu": "32", "memory": "256Gi", "pods": "110", GPU_RESOURCE: str(gpus)}
    cluster.apply([{
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "annotations": {KWOK_NODE_ANNOTATION: "fake"},
                     "labels": {NODE_LABEL: NODE_LABEL_VALUE, "type": "kwok",
                                "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                "kubernetes.io/arch": "amd64"}},
        "status": {"capacity": alloc, "allocatable": alloc},
    } for name in names])
    # Server-side apply ignores status on create for some versions; make sure.
    for name in names:
        cluster.kubectl("patch", "node", name, "--subresource=status", "--type=merge",
                        "-p", json.dumps({"status": {"capacity": alloc, "allocatable": alloc}}))
    cluster.state["next_node"] = start_at + n
    cluster.save()
    if wait:
        for name in names:
            cluster.wait(f"node {name} Ready", lambda nm=name: nodes.node_ready(cluster, nm), 60, "kwok")
    return names


def release_nodes(cluster) -> list[str]:
    """Delete the node Leases the stopped kwok held, so that the new one (another identity:
    hostname + a random id) takes its nodes at once instead of after the lease duration
    (40 s), as a restarted kubelet renews its own lease. Returns those nodes' names."""
    got = cluster.kubectl("get", "nodes", "-o", "json", check=False)
    if got.returncode != 0:  # no apiserver: nothing to release, kwok waits for it anyway
        return []
    names = [n["metadata"]["name"] for n in json.loads(got.stdout)["items"]
             if (n["metadata"].get("annotations") or {}).get(KWOK_NODE_ANNOTATION) == "fake"]
    if names:
        cluster.kubectl("delete", "leases", "-n", "kube-node-lease", "--ignore-not-found", *names)
    return names


def wait_leased(cluster, names: list[str], timeout: float) -> None:
    """Wait until a restarted kwok holds the Leases of these nodes again."""
    def leased() -> bool:
        leases = json.loads(cluster.kubectl("get", "leases", "-n", "kube-node-lease", "-o", "json").stdout)
        return set(names) <= {lease["metadata"]["name"] for lease in leases["items"]}
    cluster.wait("kwok leasing its nodes again", leased, timeout, "kwok")


def set_management(cluster, name: str, value: str) -> None:
    """Set node `name`'s kwok.x-k8s.io/node annotation to `value` ("fake": kwok's, anything
    else: nobody's) and restart kwok, which reads its nodes anew only at start."""
    annotations = (nodes.node(cluster, name)["metadata"].get("annotations") or {})
    if annotations.get(KWOK_NODE_ANNOTATION) not in ("fake", KWOK_LOST_NODE_VALUE):
        raise ClusterError(f"node {name} is not a kwok node ({KWOK_NODE_ANNOTATION}: "
                           f"{annotations.get(KWOK_NODE_ANNOTATION)!r})")
    cluster.kubectl("annotate", "node", name, "--overwrite", f"{KWOK_NODE_ANNOTATION}={value}")
    cluster.restart("kwok")


def lose_node(cluster, name: str) -> None:
    """Make kwok node `name` lost, as a machine that died or was cut off behaves: nothing
    renews its Lease in kube-node-lease any more and nothing completes its pods' deletions
    (they stay Terminating). kube-controller-manager's node lifecycle controller then marks
    its Ready condition Unknown after --node-monitor-grace-period (see Cluster.up) and taints
    it node.kubernetes.io/unreachable; wait_node_lost() waits for that. The node object and
    its pods stay. Returns once kwok runs again for the other nodes.

    How: the node's kwok.x-k8s.io/node annotation leaves kwok's selector, then kwok is
    restarted, since a running kwok keeps renewing the lease of a node it once took."""
    set_management(cluster, name, KWOK_LOST_NODE_VALUE)


def recover_node(cluster, name: str, *, wait: bool = True, timeout: float = 60) -> None:
    """Undo lose_node(): kwok manages node `name` again (its lease renewed, its Ready condition
    True, its pods' pending deletions completed), and the node lifecycle controller removes
    its unreachable taints. With `wait`, returns once the node is Ready without them. Taints
    an admin added (node.kubernetes.io/out-of-service) are left for the caller to remove."""
    set_management(cluster, name, "fake")
    if wait:
        nodes.wait_recovered(cluster, name, timeout)
