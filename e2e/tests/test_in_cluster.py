"""tfop as users run it: its image, built from the project's own Dockerfile (e2e.harness.images "operator"),
in the Deployment its manifests make, on the real node (e2e.harness.realnode). The pods reach the apiserver
only as pods do in a cluster: the `kubernetes` Service through kube-proxy, the projected token and
CA; two replicas elect one leader, and a gang TFJob trains under it to Succeeded.

The cluster's real node is untainted (no kwok node shares it), so the Deployment lands there as
applied, with nothing of it changed but the image (kustomize's own `images:`).
"""
from __future__ import annotations

import itertools
import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from e2e import build
from e2e.harness.installed import (DEPLOYMENT, LEASE, NAMESPACE, READY_SECONDS, REPO, host_pid, kustomize_overlay,
                           leader_identity, memory_mb, operator_pods, ready, remove_install, time_of,
                           wait_leader, wait_ready_pods)
from e2e.pytest_plugin import REAL_CLUSTER_IMAGES
from e2e.tests.lifecycle_helpers import Env
from e2e.tests.realnode_helpers import TRAIN_SECONDS, describe_pods, running, sigkill_process, wait_finished
from e2e.harness.training import replica, tfjob, workload_configmap
from tfop.tools.deploy import rbac

pytestmark = [pytest.mark.cluster, pytest.mark.realnode,
              pytest.mark.images(*REAL_CLUSTER_IMAGES, "operator")]
TRAIN = ["--steps", "40", "--target-loss", "0.05"]


@pytest.fixture(scope="module")
def operator_ref(real_cluster) -> str:
    return real_cluster.load_node_image("operator")


def reconciles(log: str) -> bool:
    """The replica logged that it leads and reconciles (tfop.runtime.controller.run)."""
    return any(line.rstrip().endswith(" reconciling") for line in log.splitlines())


def helm(cluster, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    kubeconfig = ["--kubeconfig", str(cluster.dir / "kubeconfig")]
    proc = subprocess.run([str(build.built_binary("helm")), *kubeconfig, *args], capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"helm {' '.join(args)}: {proc.stdout}{proc.stderr}"
    return proc


def a_gang_job_succeeds(cluster, namespace: str, name: str) -> None:
    """Two workers that exit 0 at once, placed together by Volcano: the job Succeeded."""
    env = Env(cluster, namespace)
    worker = {"replicas": 2, "restartPolicy": "Never", "template": {"spec": {"containers": [
        {"name": "tensorflow", "image": cluster.node_image("tf"), "command": ["true"]}]}}}
    env.apply(tfjob(name, {"Worker": worker}))
    job = wait_finished(env, name, TRAIN_SECONDS)
    succeeded = any(c["type"] == "Succeeded" and c["status"] == "True" for c in job["status"]["conditions"])
    assert succeeded, f"{json.dumps(job['status'])}\n{describe_pods(env, name)}"
    pods = env.pods(name)
    assert {p["spec"]["schedulerName"] for p in pods} == {"volcano"} and len(pods) == 2, describe_pods(env, name)


def test_helm_install_runs_two_replicas_one_leading(real_cluster, real_namespace, operator_ref):
    """Runs first: the kustomize install below (module-scoped) makes the same objects."""
    name, _, tag = operator_ref.rpartition(":")
    helm(real_cluster, "install", "tfop", str(REPO / "charts" / "tfop"), "--namespace", NAMESPACE,
         "--create-namespace", "--set", f"image.repository={name}", "--set", f"image.tag={tag}",
         "--set", "gang.schedulerName=volcano", "--wait", "--timeout", f"{READY_SECONDS}s")
    try:
        pods = wait_ready_pods(real_cluster, 2)
        assert {p["spec"]["containers"][0]["image"] for p in pods} == {operator_ref}
        names = {p["metadata"]["name"] for p in pods}
        leader = wait_leader(real_cluster, names)
        assert leader in names
        a_gang_job_succeeds(real_cluster, real_namespace, "under-helm")
    finally:
        helm(real_cluster, "uninstall", "tfop", "--namespace", NAMESPACE, "--wait")
        real_cluster.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=true", timeout=150)


def sleeper(image: str, n: int) -> dict:
    """Replicas that run until deleted, asking for little: the jobs here test the operator, not TF."""
    return {"replicas": n, "restartPolicy": "Never", "template": {"spec": {
        "containers": [{"name": "tensorflow", "image": image, "command": ["sleep", "3600"],
                        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}],
        "terminationGracePeriodSeconds": 1}}}


def tfop(*args: str) -> subprocess.CompletedProcess:
    """The `tfop` command as a user runs it (its exit code is the caller's to judge)."""
    return subprocess.run([sys.executable, "-m", "tfop", *args], capture_output=True, text=True, timeout=120,
                          cwd=REPO)


def doctor(cluster) -> subprocess.CompletedProcess:
    return tfop("doctor", "--kubeconfig", str(cluster.dir / "kubeconfig"))


def pasted_rules(report: str, title: str) -> list[dict]:
    """The rules doctor tells to add under the failed check `title` (the YAML after its fix line)."""
    lines = report.splitlines()
    start = lines.index(f"[FAIL] {title}")
    fix = next(i for i in range(start, len(lines)) if lines[i].strip().startswith("add to the rules of"))
    body = itertools.takewhile(lambda line: line.startswith(" " * 7), lines[fix + 1:])
    return yaml.safe_load("\n".join(line[7:] for line in body))


def test_tfop_manifests_install_passes_doctor_which_names_a_removed_rule(real_cluster, real_namespace,
                                                                         operator_ref):
    """`tfop manifests | kubectl apply --server-side -f -`, as its help says: two pods Ready, one
    leading, a gang job Succeeded under Volcano. `tfop doctor` then finds the installed operator
    healthy; with one rule removed from its ClusterRole it fails and pastes exactly that rule; with
    the rule back it passes again."""
    text = tfop("manifests", "--create-namespace", "--gang-scheduler-name", "volcano", "--image", operator_ref)
    assert text.returncode == 0, text.stderr
    rendered = [o for o in yaml.safe_load_all(text.stdout) if o]
    real_cluster.kubectl("apply", "--server-side", "-f", "-", input=text.stdout, timeout=120)
    try:
        names = {p["metadata"]["name"] for p in wait_ready_pods(real_cluster, 2)}
        leader = wait_leader(real_cluster, names)
        a_gang_job_succeeds(real_cluster, real_namespace, "under-manifests")

        report = doctor(real_cluster)
        assert report.returncode == 0, report.stdout + report.stderr
        assert "[PASS] Deployment kubeflow/tfop has every replica Ready" in report.stdout, report.stdout
        assert (f"[PASS] one replica of kubeflow/tfop leads (Lease kubeflow/tfop)\n"
                f"       held by pod {leader}, renewed") in report.stdout, report.stdout

        role = next(o for o in rendered if o["kind"] == "ClusterRole" and o["metadata"]["name"] == DEPLOYMENT)
        # a rule the running replicas' watches do not need: they keep working while it is gone
        index, removed = next((i, r) for i, r in enumerate(role["rules"]) if "tfjobs/finalizers" in r["resources"])
        real_cluster.kubectl("patch", "clusterrole", DEPLOYMENT, "--type=json",
                             "-p", json.dumps([{"op": "remove", "path": f"/rules/{index}"}]))
        report = doctor(real_cluster)
        assert report.returncode == 1, report.stdout
        title = "ServiceAccount kubeflow/tfop has every permission the operator uses"
        assert rbac.permissions(pasted_rules(report.stdout, title)) == rbac.permissions([removed]), report.stdout
        real_cluster.kubectl("patch", "clusterrole", DEPLOYMENT, "--type=json",
                             "-p", json.dumps([{"op": "add", "path": f"/rules/{index}", "value": removed}]))
        report = doctor(real_cluster)
        assert report.returncode == 0, report.stdout
    finally:
        remove_install(real_cluster, rendered)  # the Namespace too: --create-namespace made it


@pytest.fixture(scope="module")
def kustomize_install(real_cluster, operator_ref, tmp_path_factory):
    """The gang-volcano overlay with the image swapped, applied as its header says; its pods Ready."""
    base = REPO / "manifests" / "overlays" / "gang-volcano"
    overlay = kustomize_overlay(tmp_path_factory.mktemp("kustomize") / "overlay", base, operator_ref)
    rendered = [o for o in yaml.safe_load_all(real_cluster.kubectl("kustomize", str(overlay)).stdout) if o]
    deployment = next(o for o in rendered if o["kind"] == "Deployment")
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == operator_ref
    real_cluster.kubectl("apply", "--server-side", "-k", str(overlay), timeout=120)
    try:
        yield wait_ready_pods(real_cluster, 2)
    finally:
        remove_install(real_cluster, rendered)


def test_kustomize_install_runs_two_replicas_one_leading_and_a_gang_job_trains(
        real_cluster, real_namespace, operator_ref, kustomize_install):
    pods = kustomize_install
    names = {p["metadata"]["name"] for p in pods}
    assert {p["spec"]["nodeName"] for p in pods} == {"tfop-node-0"}
    container = pods[0]["spec"]["containers"][0]
    assert container["image"] == operator_ref and "--gang-scheduler-name" in " ".join(container["args"])
    # the in-cluster path: the Service's environment and the projected token, nothing else
    env_names = {e["name"] for e in container.get("env") or []}
    assert not env_names & {"KUBECONFIG"}, env_names
    leader = wait_leader(real_cluster, names)
    standby = (names - {leader}).pop()
    standby_log = real_cluster.kubectl("logs", "-n", NAMESPACE, standby, check=False).stdout
    assert "standby: caches warm" in standby_log and not reconciles(standby_log), standby_log[-3000:]

    env = Env(real_cluster, real_namespace)
    real_cluster.apply(workload_configmap(real_namespace))
    tf = real_cluster.node_image("tf")
    env.apply(tfjob("gang", {"Chief": replica(tf, 1, TRAIN), "Worker": replica(tf, 2, TRAIN)}))
    pods = env.wait("3 pods Running", lambda: running(env, "gang", 3), TRAIN_SECONDS, job="gang")
    assert {p["spec"]["schedulerName"] for p in pods} == {"volcano"}
    assert {p["metadata"]["annotations"].get("scheduling.k8s.io/group-name") for p in pods} == {"gang"}
    job = wait_finished(env, "gang")
    succeeded = any(c["type"] == "Succeeded" and c["status"] == "True" for c in job["status"]["conditions"])
    assert succeeded, f"{json.dumps(job['status'])}\n{describe_pods(env, 'gang')}"
    leader_log = real_cluster.kubectl("logs", "-n", NAMESPACE, leader, check=False).stdout
    assert reconciles(leader_log), leader_log[-3000:]


def metrics(pod: dict) -> dict[str, float]:
    """The pod's /metrics, from its `metrics` port at the pod's address (unlabelled samples)."""
    port = next(p["containerPort"] for p in pod["spec"]["containers"][0]["ports"] if p["name"] == "metrics")
    with urllib.request.urlopen(f"http://{pod['status']['podIP']}:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    return {s.name: s.value for family in text_string_to_metric_families(text) for s in family.samples
            if not s.labels}


def test_the_pods_run_as_uid_65532_on_a_read_only_root_and_serve_metrics(real_cluster, kustomize_install):
    leading = []
    for pod in kustomize_install:
        pid = host_pid(pod)
        uids = next(line.split()[1:] for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                    if line.startswith("Uid:"))
        assert set(uids) == {"65532"}, uids
        root = next(line.split() for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines()
                    if line.split()[4] == "/")
        assert "ro" in root[5].split(","), root
        leading.append(metrics(pod)["tfop_leader"])
    assert sorted(leading) == [0.0, 1.0], leading


BURST = 200  # jobs submitted at once
BURST_SECONDS = 300  # their 400 pods created, on a 2-core machine that also runs the control plane
UNPLACEABLE = {"tfop.e2e/burst": "no-such-node"}  # a nodeSelector no node matches


def mebibytes(quantity: str) -> float:
    units = {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024, "K": 1e3 / 2**20, "M": 1e6 / 2**20, "G": 1e9 / 2**20}
    unit = next((u for u in sorted(units, key=len, reverse=True) if quantity.endswith(u)), "")
    return float(quantity[:len(quantity) - len(unit)]) * units[unit] if unit else float(quantity) / 2**20


def test_a_burst_of_200_jobs_stays_within_the_memory_limit(real_cluster, real_namespace, kustomize_install):
    """200 gang jobs of 2 workers at once, their pods never placed (a nodeSelector no node matches),
    so all of them stay in the operator's caches: both replicas (the leader reconciling, the standby
    keeping its caches warm) peak below the Deployment's memory limit, and neither restarts."""
    pods = wait_ready_pods(real_cluster, 2)
    limit = mebibytes(pods[0]["spec"]["containers"][0]["resources"]["limits"]["memory"])
    image = real_cluster.node_image("tf")
    worker = {"replicas": 2, "restartPolicy": "Never", "template": {"spec": {
        "nodeSelector": UNPLACEABLE, "containers": [{"name": "tensorflow", "image": image}]}}}
    jobs = [tfjob(f"burst-{i:03d}", {"Worker": worker}) for i in range(BURST)]
    env = Env(real_cluster, real_namespace)
    started = time.monotonic()
    real_cluster.kubectl("create", "-n", real_namespace, "-f", "-", timeout=120,
                         input=json.dumps({"apiVersion": "v1", "kind": "List", "items": jobs}))

    def created() -> int:
        return len(env.kubectl("get", "pods", "-o", "name").stdout.split())
    env.wait(f"{2 * BURST} pods created", lambda: created() == 2 * BURST, BURST_SECONDS)
    took = time.monotonic() - started
    time.sleep(10)  # the scheduler's answers about the pods, and the passes they cause
    peaks = {p["metadata"]["name"]: memory_mb(p, "VmHWM") for p in pods}
    now = {p["metadata"]["name"]: memory_mb(p) for p in pods}
    print(f"[burst] {BURST} jobs, {2 * BURST} pods created in {took:.0f} s; peak RSS {peaks} MiB, "
          f"now {now} MiB; limit {limit:.0f} MiB")
    assert max(peaks.values()) < limit, (peaks, limit)
    for pod in operator_pods(real_cluster):
        status = pod["status"]["containerStatuses"][0]
        assert status["restartCount"] == 0, status
    assert {p["metadata"]["name"] for p in operator_pods(real_cluster)} == set(peaks)


LEASE_SECONDS, RETRY_SECONDS = 15.0, 2.0  # tfop run's defaults (client-go's)
CREATE_SECONDS = 10.0  # from a Lease taken to a new job's pods created, on a busy machine


def created_once(cluster, since: int, namespace: str) -> None:
    """Every pod, service and PodGroup of `namespace` was created by exactly one successful request."""
    creates: dict[tuple[str, str], int] = {}
    for entry in cluster.audit_entries(since):
        ref = entry.get("objectRef") or {}
        if (entry.get("verb") == "create" and ref.get("namespace") == namespace
                and ref.get("resource") in ("pods", "services", "podgroups")
                and (entry.get("responseStatus") or {}).get("code") == 201):
            key = (ref["resource"], ref.get("name") or "")
            creates[key] = creates.get(key, 0) + 1
    assert creates and all(n == 1 for n in creates.values()), creates


@pytest.mark.parametrize("how", ["deleted", "sigkilled"])
def test_the_standby_takes_over_when_the_leader_goes(real_cluster, real_namespace, kustomize_install, how):
    """Deleted: the leader releases the Lease as it stops, the standby takes it at its next try.
    SIGKILLed through containerd: nothing is released; the standby takes the Lease once it expires.
    Either way another replica leads within a lease and a retry of the leader going (the standby,
    or the killed container started again, whichever tries first), and creates the next job's pods;
    no object is created twice (audit log)."""
    names = {p["metadata"]["name"] for p in wait_ready_pods(real_cluster, 2)}
    leader = wait_leader(real_cluster, names)
    identity = leader_identity(real_cluster)
    since = real_cluster.audit_offset()
    env = Env(real_cluster, real_namespace)
    tf = real_cluster.node_image("tf")
    env.apply(tfjob("before", {"Worker": sleeper(tf, 2)}))
    env.wait("2 pods Running", lambda: running(env, "before", 2), TRAIN_SECONDS, job="before")
    pod = next(p for p in operator_pods(real_cluster) if p["metadata"]["name"] == leader)
    went = time.monotonic()
    if how == "deleted":
        real_cluster.kubectl("delete", "pod", "-n", NAMESPACE, leader, "--wait=false")
    else:
        sigkill_process(pod)
    env.apply(tfjob("after", {"Worker": sleeper(tf, 2)}))
    env.wait("another replica leading", lambda: leader_identity(real_cluster) not in ("", identity),
             LEASE_SECONDS + RETRY_SECONDS + 5, job="after")
    took_over = time.monotonic() - went
    assert took_over <= LEASE_SECONDS + RETRY_SECONDS + 2, took_over
    env.wait("the next job's pods created", lambda: len(env.pods("after")) == 2, CREATE_SECONDS, job="after")
    env.wait("2 pods Running", lambda: running(env, "after", 2), TRAIN_SECONDS, job="after")
    wait_ready_pods(real_cluster, 2)  # the Deployment's new pod, or the restarted container, as standby
    created_once(real_cluster, since, real_namespace)


def writers_in_turn(entries: list[dict], namespace: str) -> list[str]:
    """The source addresses of the writes to `namespace`'s objects, in order, one entry per turn: a
    replica that writes again after another one did shows up twice."""
    turns: list[str] = []
    for entry in sorted(entries, key=lambda e: e.get("requestReceivedTimestamp", "")):
        ref = entry.get("objectRef") or {}
        if ref.get("namespace") != namespace or entry.get("verb") not in ("create", "update", "patch", "delete"):
            continue
        if ref.get("resource") not in ("pods", "services", "podgroups", "tfjobs", "events"):
            continue
        source = (entry.get("sourceIPs") or ["?"])[0]
        if not turns or turns[-1] != source:
            turns.append(source)
    return turns


def test_a_rolling_update_hands_over_without_a_gap_or_two_writers(real_cluster, real_namespace, kustomize_install):
    """An argument changed: the Deployment rolls (maxSurge 1, maxUnavailable 0). Watched every 0.5 s,
    the Lease is never unheld or unrenewed for longer than a lease; jobs submitted meanwhile all get
    their pods; and no replica writes again once another one has (audit log, by pod address)."""
    since = real_cluster.audit_offset()
    env = Env(real_cluster, real_namespace)
    tf = real_cluster.node_image("tf")
    old = {p["metadata"]["name"] for p in operator_pods(real_cluster)}
    real_cluster.kubectl("patch", "deployment", DEPLOYMENT, "-n", NAMESPACE, "--type=json", "-p", json.dumps(
        [{"op": "add", "path": "/spec/template/spec/containers/0/args/-", "value": "--max-concurrent-requests=24"}]))
    renewed: list[float] = []  # wall times at which the Lease was seen held and freshly renewed
    jobs, started, last_job = [], time.monotonic(), 0.0
    while time.monotonic() - started < READY_SECONDS:
        out = real_cluster.kubectl("get", "lease", LEASE, "-n", NAMESPACE, "-o", "json", check=False)
        spec = json.loads(out.stdout)["spec"] if out.returncode == 0 else {}
        if spec.get("holderIdentity") and spec.get("renewTime"):
            renewed.append(time_of(spec["renewTime"]))
        if time.monotonic() - last_job >= 5:
            name = f"roll-{len(jobs)}"
            env.apply(tfjob(name, {"Worker": sleeper(tf, 1)}))
            jobs.append(name)
            last_job = time.monotonic()
        pods = operator_pods(real_cluster)
        if len(pods) == 2 and all(ready(p) for p in pods) and not old & {p["metadata"]["name"] for p in pods}:
            break
        time.sleep(0.5)
    else:
        raise AssertionError(f"the rolling update did not finish in {READY_SECONDS}s")
    leader = wait_leader(real_cluster, {p["metadata"]["name"] for p in operator_pods(real_cluster)})
    assert "--max-concurrent-requests=24" in next(
        p for p in operator_pods(real_cluster) if p["metadata"]["name"] == leader)["spec"]["containers"][0]["args"]
    for name in jobs:
        env.wait(f"{name}'s pod created", lambda n=name: len(env.pods(n)) == 1, LEASE_SECONDS + CREATE_SECONDS,
                 job=name)
    renewals = sorted(set(renewed))
    gaps = [b - a for a, b in zip(renewals, renewals[1:])]
    assert renewals and max(gaps, default=0.0) <= LEASE_SECONDS, (gaps, renewals)
    turns = writers_in_turn(real_cluster.audit_entries(since), real_namespace)
    assert len(turns) == len(set(turns)), f"a replica wrote again after another one did: {turns}"
    created_once(real_cluster, since, real_namespace)
