"""The local control plane really schedules and runs (fake) GPU pods."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from e2e.harness.cluster import Cluster
from e2e.harness.koordinator import KOORDINATOR_SCHEDULER_NAME
from e2e.harness.kwok import GPU_RESOURCE, NODE_LABEL, NODE_LABEL_VALUE
from e2e.harness.observed import request_counts
from e2e.harness.scheduler_plugins import COSCHEDULING_SCHEDULER_NAME
from e2e.harness.volcano import VOLCANO_SCHEDULER_NAME
from e2e.harness.kwok_stages import EXIT_CODE_ANNOTATION, EXIT_LABEL

pytestmark = pytest.mark.cluster
REPO = Path(__file__).resolve().parents[2]


def gpu_pod(name: str, scheduler: str = "default-scheduler", labels=None, annotations=None,
            gpus: int = 1) -> dict:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}},
        "spec": {
            "schedulerName": scheduler, "restartPolicy": "Never",
            "nodeSelector": {NODE_LABEL: NODE_LABEL_VALUE},
            "containers": [{"name": "main", "image": "tensorflow/tensorflow:2.16.1",
                            "resources": {"limits": {GPU_RESOURCE: str(gpus)}}}],
        },
    }


def create(kubectl, ns: str, *objs: dict) -> None:
    kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump_all(objs))


def wait_pod(kubectl, ns: str, name: str, phases: tuple[str, ...], timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    pod = {}
    while time.monotonic() < deadline:
        pod = kubectl.json("get", "pod", name, "-n", ns)
        if pod.get("status", {}).get("phase") in phases:
            return pod
        time.sleep(0.3)
    raise AssertionError(f"pod {ns}/{name} not in {phases} after {timeout}s: {json.dumps(pod.get('status'))}")


def test_fake_gpu_nodes(kubectl):
    # The session's own nodes: other tests add (and remove) nodes of other shapes.
    session_nodes = {f"tfop-gpu-{i}" for i in range(4)}
    nodes = [n for n in kubectl.json("get", "nodes", "-l", f"{NODE_LABEL}={NODE_LABEL_VALUE}")["items"]
             if n["metadata"]["name"] in session_nodes]
    assert len(nodes) == 4
    for n in nodes:
        assert n["status"]["capacity"][GPU_RESOURCE] == "1"
        assert n["status"]["allocatable"]["memory"] == "256Gi"
        ready = [c for c in n["status"]["conditions"] if c["type"] == "Ready"]
        assert ready and ready[0]["status"] == "True"


def test_default_scheduler_runs_gpu_pod(kubectl, namespace):
    create(kubectl, namespace, gpu_pod("p"))
    pod = wait_pod(kubectl, namespace, "p", ("Running",))
    assert pod["spec"]["nodeName"].startswith("tfop-gpu-")


def test_coscheduling_runs_gang(kubectl, namespace):
    pg = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
          "metadata": {"name": "gang"}, "spec": {"minMember": 2, "scheduleTimeoutSeconds": 30}}
    label = {"scheduling.x-k8s.io/pod-group": "gang"}
    create(kubectl, namespace, pg, *[gpu_pod(f"w{i}", COSCHEDULING_SCHEDULER_NAME, labels=label)
                                     for i in range(2)])
    nodes = {wait_pod(kubectl, namespace, f"w{i}", ("Running",))["spec"]["nodeName"] for i in range(2)}
    assert len(nodes) == 2  # one GPU per node
    # scheduler-plugins' controller writes the PodGroup status
    deadline = time.monotonic() + 30
    while kubectl.json("get", "podgroups.scheduling.x-k8s.io", "gang", "-n", namespace) \
            .get("status", {}).get("phase") != "Running":
        assert time.monotonic() < deadline, "PodGroup never reached phase Running"
        time.sleep(0.5)


def test_volcano_runs_pod_of_podgroup(kubectl, namespace):
    pg = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
          "metadata": {"name": "vg"}, "spec": {"minMember": 1, "queue": "default"}}
    pod = gpu_pod("v", "volcano", annotations={"scheduling.k8s.io/group-name": "vg"})
    create(kubectl, namespace, pg, pod)
    wait_pod(kubectl, namespace, "v", ("Running",))


def test_volcano_custom_queue(cluster, kubectl, namespace):
    queue = f"q-{namespace}"[:60]
    cluster.create_volcano_queue(queue, capability={GPU_RESOURCE: "1"})
    try:
        pg = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
              "metadata": {"name": "qg"}, "spec": {"minMember": 1, "queue": queue}}
        create(kubectl, namespace, pg, gpu_pod("q", "volcano", annotations={"scheduling.k8s.io/group-name": "qg"}))
        wait_pod(kubectl, namespace, "q", ("Running",))
    finally:
        kubectl("delete", "namespace", namespace, "--wait=true", "--timeout=60s", check=False)
        kubectl("delete", "queues.scheduling.volcano.sh", queue, check=False)


def test_volcano_gang_too_big_stays_pending(kubectl, namespace):
    pg = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
          "metadata": {"name": "big"}, "spec": {"minMember": 2, "queue": "default"}}
    ann = {"scheduling.k8s.io/group-name": "big"}
    # 2 pods x 2 GPUs: no node has 2 GPUs, so the gang can never start.
    create(kubectl, namespace, pg, *[gpu_pod(f"b{i}", "volcano", annotations=ann, gpus=2) for i in range(2)])
    time.sleep(5)
    for i in range(2):
        assert kubectl.json("get", "pod", f"b{i}", "-n", namespace)["status"]["phase"] == "Pending"


@pytest.mark.parametrize("code,phase", [("3", "Failed"), ("0", "Succeeded")])
def test_exit_markers(kubectl, namespace, code, phase):
    create(kubectl, namespace, gpu_pod("x", labels={EXIT_LABEL: "true"},
                                       annotations={EXIT_CODE_ANNOTATION: code}))
    pod = wait_pod(kubectl, namespace, "x", (phase,))
    term = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert term["exitCode"] == int(code)


def test_pod_deletion_completes(kubectl, namespace):
    create(kubectl, namespace, gpu_pod("d"))
    wait_pod(kubectl, namespace, "d", ("Running",))
    kubectl("delete", "pod", "d", "-n", namespace, "--timeout=30s")  # waits until gone
    assert kubectl("get", "pod", "d", "-n", namespace, check=False).returncode != 0


def test_garbage_collector_deletes_dependents(kubectl, namespace):
    owner = kubectl.json("create", "configmap", "owner", "-n", namespace)
    pod = gpu_pod("child")
    pod["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
                                           "uid": owner["metadata"]["uid"]}]
    create(kubectl, namespace, pod)
    kubectl("delete", "configmap", "owner", "-n", namespace)
    kubectl("wait", "--for=delete", "pod/child", "-n", namespace, "--timeout=30s")


def test_service_account_identity(cluster, namespace):
    kc = cluster.service_account_kubeconfig(namespace, "op")
    who = cluster.kubectl("auth", "whoami", "-o", "json", kubeconfig=kc)
    assert json.loads(who.stdout)["status"]["userInfo"]["username"] == f"system:serviceaccount:{namespace}:op"
    denied = cluster.kubectl("get", "nodes", kubeconfig=kc, check=False)
    assert denied.returncode != 0 and "forbidden" in denied.stderr


def test_add_and_remove_node(cluster, kubectl):
    (name,) = cluster.add_gpu_nodes(1, gpus=8)
    try:
        node = kubectl.json("get", "node", name)
        assert node["status"]["allocatable"][GPU_RESOURCE] == "8"
    finally:
        cluster.remove_node(name)
    assert kubectl("get", "node", name, check=False).returncode != 0


def test_cli_up_status_down_leaves_no_process(tmp_path):
    d = tmp_path / "c"
    run = lambda *a: subprocess.run([sys.executable, "-m", "e2e.harness", *a, "--dir", str(d)],  # noqa: E731
                                    cwd=REPO, capture_output=True, text=True, timeout=300)
    up = run("up", "--schedulers", "default", "--gpu-nodes", "1")
    try:
        assert up.returncode == 0, up.stderr
        assert f"kubeconfig: {d.resolve()}/kubeconfig" in up.stdout
        pids = json.loads((d / "state.json").read_text())["pids"]
        assert set(pids) >= {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"}
        assert run("status").returncode == 0
        restarted = run("restart", "--component", "kube-scheduler")  # a process of its own, attached
        assert restarted.returncode == 0, restarted.stderr
        new_pids = json.loads((d / "state.json").read_text())["pids"]
        assert new_pids["kube-scheduler"] != pids["kube-scheduler"]
        assert f"pid {new_pids['kube-scheduler']}" in restarted.stdout
        assert run("status").returncode == 0  # it outlived the command that started it
        pids = {**pids, "kube-scheduler (restarted)": new_pids["kube-scheduler"]}
    finally:
        down = run("down")
    assert down.returncode == 0, down.stderr
    alive = [p for p in pids.values() if os.path.exists(f"/proc/{p}")]
    assert not alive
    assert run("status").returncode != 0


def test_restart_keeps_ports_and_data(cluster, kubectl, namespace):
    """Cluster.restart: the apiserver, then etcd, come back as new processes on the same ports
    with the same data, and the state file says so (a second process attaching sees it)."""
    kept = kubectl.json("create", "configmap", "kept", "-n", namespace, "--from-literal=k=v")
    server, ports, pids = cluster.server, dict(cluster.state["ports"]), dict(cluster.state["pids"])
    for component in ("kube-apiserver", "etcd"):
        new_pid = cluster.restart(component)
        assert new_pid != pids[component] and cluster.alive_components()[component]
        assert not _pid_running(pids[component])
        got = kubectl.json("get", "configmap", "kept", "-n", namespace)  # the same address (kubeconfig)
        assert (got["metadata"]["uid"], got["data"]) == (kept["metadata"]["uid"], {"k": "v"})
        kubectl("create", "configmap", f"after-{component}", "-n", namespace)  # and it takes writes
    assert (cluster.server, cluster.state["ports"]) == (server, ports)
    assert all(cluster.alive_components().values()), cluster.alive_components()
    assert Cluster.attach(cluster.dir).state["pids"] == cluster.state["pids"]


def test_a_stopped_scheduler_leaves_pods_pending_until_started(cluster, kubectl, namespace):
    cluster.stop_component("kube-scheduler")
    try:
        assert cluster.alive_components()["kube-scheduler"] is False
        create(kubectl, namespace, cpu_pod("waits"))
        time.sleep(3)
        pod = kubectl.json("get", "pod", "waits", "-n", namespace)
        assert not pod["spec"].get("nodeName") and pod["status"]["phase"] == "Pending"
    finally:
        cluster.start_component("kube-scheduler")
    wait_pod(kubectl, namespace, "waits", ("Running",))


def test_every_other_component_restarts_in_place(cluster, kubectl, namespace):
    """Each restart is a new process passing the health check it passed at start; then the
    controller-manager still gives a new namespace its ServiceAccount, and every scheduler
    still places a pod, which kwok runs."""
    others = [n for n in cluster.alive_components() if n not in ("etcd", "kube-apiserver")]
    for component in others:
        old = cluster.state["pids"][component]
        assert cluster.restart(component) != old and not _pid_running(old), component
    fresh = f"{namespace}-sa"
    kubectl("create", "namespace", fresh)
    try:
        kubectl("wait", "--for=jsonpath={.metadata.name}=default", "serviceaccount/default", "-n", fresh,
                "--timeout=30s", timeout=40)
    finally:
        kubectl("delete", "namespace", fresh, "--wait=false")
    schedulers = {"kube-scheduler": "default-scheduler", "volcano-scheduler": VOLCANO_SCHEDULER_NAME,
                  "scheduler-plugins-scheduler": COSCHEDULING_SCHEDULER_NAME,
                  "koord-scheduler": KOORDINATOR_SCHEDULER_NAME}
    for component, scheduler in schedulers.items():
        if component not in others:
            continue
        name = f"by-{component}"
        pod = cpu_pod(name, scheduler)
        if scheduler == VOLCANO_SCHEDULER_NAME:  # Volcano places only pods of a PodGroup
            create(kubectl, namespace, {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
                                        "metadata": {"name": name}, "spec": {"minMember": 1, "queue": "default"}})
            pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"] = name
        create(kubectl, namespace, pod)
        wait_pod(kubectl, namespace, name, ("Running",))
    assert all(cluster.alive_components().values()), cluster.alive_components()


def test_apiserver_metrics_count_creates_without_dry_runs(cluster, kubectl, namespace):
    """request_counts reads apiserver_request_total as admin: POSTs answered 201 per resource,
    dry runs (label dry_run="All") apart. PodTemplates: nothing else in the cluster makes them."""
    template = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"},
                "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}
    before_families = cluster.apiserver_metrics(("apiserver_request_total",))
    before = request_counts(before_families)
    for i in range(3):
        template["metadata"]["name"] = f"t{i}"
        kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(template))
    template["metadata"]["name"] = "never"
    kubectl("create", "-n", namespace, "--dry-run=server", "-f", "-", input=json.dumps(template))
    families = cluster.apiserver_metrics(("apiserver_request_total",))
    assert request_counts(families).get("podtemplates", 0) - before.get("podtemplates", 0) == 3
    assert dry_run_creates(families) - dry_run_creates(before_families) == 1


def dry_run_creates(families) -> float:
    return sum(s.value for f in families for s in f.samples if s.name == "apiserver_request_total"
               and s.labels.get("resource") == "podtemplates" and s.labels.get("dry_run") == "All"
               and (s.labels.get("verb"), s.labels.get("code")) == ("POST", "201"))


def cpu_pod(name: str, scheduler: str = "default-scheduler") -> dict:
    pod = gpu_pod(name, scheduler)
    pod["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "10m"}}
    return pod


def _pid_running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"  # a zombie has exited
    except FileNotFoundError:
        return False
