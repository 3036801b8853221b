"""Helpers for the gang scenarios on the real local control plane.

- `Api`: a fast admin client (plain HTTPS, one keep-alive session per thread),
  so pods can be sampled every 0.2 s without forking kubectl each time.
- `Pool`: GPU nodes of one test only. The session cluster is shared, so a
  capacity test makes its own kwok nodes, labelled and tainted
  `tfop.test/pool=<namespace>`, and its jobs select and tolerate exactly them.
- `prepare_job`: a seed's TFJob placed in the test's namespace and pool,
  otherwise keeping the seed's shape.
- sampling and waiting helpers that say what they saw when they fail.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import copy
import inspect
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterable

import pytest
import requests
import yaml

from e2e.harness.kwok import GPU_RESOURCE, KWOK_NODE_ANNOTATION
from e2e.harness.kwok_stages import EXIT_CODE_ANNOTATION, EXIT_LABEL
from e2e.harness.tfop_operator import OPERATOR_NAMESPACE, OperatorProcess, wait_established
from tests.seeds import seed_jobs

POOL_LABEL = "tfop.test/pool"
JOB_LABEL = "training.kubeflow.org/job-name"
TFJOB_API = "/apis/kubeflow.org/v1"
POLL = 0.2  # seconds between samples
PENDING_WINDOW = 10.0  # a gang that must wait is watched this long (Volcano's period is 1 s or less)

# Group objects of the backends that have one: (api path prefix, plural).
GROUP_APIS = {
    "volcano": ("/apis/scheduling.volcano.sh/v1beta1", "podgroups"),
    "scheduler-plugins": ("/apis/scheduling.x-k8s.io/v1alpha1", "podgroups"),
    "kube-batch": ("/apis/scheduling.incubator.k8s.io/v1alpha1", "podgroups"),
    "kube-arbitrator": ("/apis/policy/v1", "poddisruptionbudgets"),
    "kubernetes": ("/apis/scheduling.k8s.io/v1beta1", "podgroups"),  # served from Kubernetes 1.37 (test_native_gang)
}
SCHEDULER_OF = {"volcano": "volcano", "scheduler-plugins": "scheduler-plugins-scheduler",
                "koordinator": "koord-scheduler"}


def seed(seed_id: str) -> dict:
    for sid, job in seed_jobs():
        if sid == seed_id:
            return copy.deepcopy(job)
    raise KeyError(f"no seed job {seed_id}")


# ---------------------------------------------------------------------------- API


class Api:
    def __init__(self, cluster):
        self.base = cluster.server
        self.cert = (str(cluster.pki / "admin.crt"), str(cluster.pki / "admin.key"))
        self.ca = str(cluster.pki / "ca.crt")
        self._local = threading.local()

    @property
    def session(self) -> requests.Session:
        s = getattr(self._local, "session", None)
        if s is None:
            s = requests.Session()
            s.cert, s.verify = self.cert, self.ca
            s.trust_env = False  # REQUESTS_CA_BUNDLE would otherwise replace our CA
            self._local.session = s
        return s

    def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json",
                ok: Iterable[int] = (200, 201, 202)) -> dict | None:
        data = None if body is None else json.dumps(body)
        for _ in range(10):
            r = self.session.request(method, self.base + path, data=data,
                                     headers={"Content-Type": content_type}, timeout=30,
                                     verify=self.ca, cert=self.cert)
            # 429 "storage is (re)initializing": a CRD another scenario just created
            # (e.g. kube-batch's) is not served yet. Transient; wait as told.
            if r.status_code != 429:
                break
            time.sleep(float(r.headers.get("Retry-After") or 1))
        if r.status_code == 404 and method in ("GET", "DELETE"):
            return None
        if r.status_code not in ok:
            raise AssertionError(f"{method} {path}: {r.status_code} {r.text[:500]}")
        return r.json() if r.content else {}

    def get(self, path: str) -> dict | None:
        return self.request("GET", path)

    def items(self, path: str, selector: str | None = None) -> list[dict]:
        got = self.get(path + (f"?labelSelector={selector}" if selector else "")) or {}
        return got.get("items") or []

    def create(self, path: str, obj: dict) -> dict:
        return self.request("POST", path, obj)

    def merge_patch(self, path: str, patch: dict) -> dict:
        return self.request("PATCH", path, patch, "application/merge-patch+json")

    def delete(self, path: str) -> dict | None:
        return self.request("DELETE", path)

    # -- shortcuts -----------------------------------------------------------------
    def pods(self, ns: str, job: str | None = None) -> list[dict]:
        return self.items(f"/api/v1/namespaces/{ns}/pods", f"{JOB_LABEL}={job}" if job else None)

    def tfjob(self, ns: str, name: str) -> dict | None:
        return self.get(f"{TFJOB_API}/namespaces/{ns}/tfjobs/{name}")

    def group(self, backend: str, ns: str, name: str) -> dict | None:
        prefix, plural = GROUP_APIS[backend]
        return self.get(f"{prefix}/namespaces/{ns}/{plural}/{name}")

    def events(self, ns: str, reason: str | None = None) -> list[dict]:
        evs = self.items(f"/api/v1/namespaces/{ns}/events")
        return [e for e in evs if reason is None or e.get("reason") == reason]

    def bind(self, ns: str, pod: str, node: str) -> None:
        """Act as the scheduler of a backend whose scheduler does not run here."""
        self.create(f"/api/v1/namespaces/{ns}/pods/{pod}/binding", {
            "apiVersion": "v1", "kind": "Binding", "metadata": {"name": pod, "namespace": ns},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}})

    def exit_pod(self, ns: str, pod: str, code: int) -> None:
        """kwok ends this Running pod with `code` (e2e.harness.kwok_stages)."""
        self.merge_patch(f"/api/v1/namespaces/{ns}/pods/{pod}", {"metadata": {
            "labels": {EXIT_LABEL: "true"}, "annotations": {EXIT_CODE_ANNOTATION: str(code)}}})


# ---------------------------------------------------------------------------- nodes


class Pool:
    """kwok GPU nodes only this test's pods can use (label + NoSchedule taint)."""

    def __init__(self, cluster, api: Api, name: str):
        self.cluster, self.api, self.name = cluster, api, name
        self.nodes: list[str] = []

    def add(self, n: int, gpus: int) -> list[str]:
        alloc = {"cpu": "32", "memory": "256Gi", "pods": "110", GPU_RESOURCE: str(gpus)}
        names = [f"{self.name}-{len(self.nodes) + i}"[-63:].lstrip("-") for i in range(n)]
        # Shaped like Cluster.add_gpu_nodes' nodes, plus the pool label and taint.
        self.cluster.apply([{
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {KWOK_NODE_ANNOTATION: "fake"},
                         "labels": {POOL_LABEL: self.name, "type": "kwok", "kubernetes.io/hostname": name,
                                    "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}},
            "spec": {"taints": [{"key": POOL_LABEL, "value": self.name, "effect": "NoSchedule"}]},
            "status": {"capacity": alloc, "allocatable": alloc},
        } for name in names])
        self.nodes += names
        for name in names:
            self.api.request("PATCH", f"/api/v1/nodes/{name}/status",
                             {"status": {"capacity": alloc, "allocatable": alloc}},
                             "application/merge-patch+json")
        for name in names:
            wait_until(lambda nm=name: node_ready(self.api.get(f"/api/v1/nodes/{nm}")), 60,
                       f"pool node {name} Ready")
        return names

    def remove_all(self) -> None:
        for name in self.nodes:
            self.api.delete(f"/api/v1/nodes/{name}")
        self.nodes = []

    def place(self, job: dict) -> dict:
        """Pin every replica's pods to this pool (nodeSelector + toleration)."""
        for rspec in job["spec"]["tfReplicaSpecs"].values():
            spec = rspec.setdefault("template", {}).setdefault("spec", {})
            spec["nodeSelector"] = {POOL_LABEL: self.name}
            spec["tolerations"] = [*spec.get("tolerations", []),
                                   {"key": POOL_LABEL, "operator": "Equal", "value": self.name,
                                    "effect": "NoSchedule"}]
        return job


def node_ready(node: dict | None) -> bool:
    return bool(node) and any(c["type"] == "Ready" and c["status"] == "True"
                              for c in node.get("status", {}).get("conditions", []))


@contextlib.contextmanager
def pool(cluster, api: Api, namespace: str):
    """The test's nodes, for the pods of its namespace. Its pods go before its nodes do: pods left
    bound to deleted nodes still count in Volcano's queue until the pod GC removes them (about 40 s
    later), while the nodes no longer count in the cluster's total: the next test's gang would wait.
    (Deleting the pods takes about 1 s.)"""
    p = Pool(cluster, api, namespace)
    try:
        yield p
    finally:
        cluster.kubectl("delete", "pods", "--all", "-n", namespace, "--wait=true", "--timeout=60s",
                        check=False, timeout=70)
        p.remove_all()


# ---------------------------------------------------------------------------- jobs


@contextlib.contextmanager
def gpu_pool(cluster, api: Api, ns: str):
    """The test's pool (see pool), and its namespace deleted after it (not waited for: 10 s)."""
    with pool(cluster, api, ns) as p:
        try:
            yield p
        finally:
            cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def prepare_job(job: dict, ns: str, pool: Pool | None = None, name: str | None = None,
                keep_scheduler_name: bool = False, replicas: dict[str, int] | None = None) -> dict:
    """A seed's job in this test's namespace (and pool). The seeds' schedulerName
    (kube-batch/kube-batchd) names the scheduler of their era; unless kept, it is
    dropped so the operator's gang backend (or the default scheduler) applies."""
    job = copy.deepcopy(job)
    meta = job.setdefault("metadata", {})
    meta["namespace"] = ns
    if name:
        meta["name"] = name
    for rtype, rspec in job["spec"]["tfReplicaSpecs"].items():
        if replicas and rtype in replicas:
            rspec["replicas"] = replicas[rtype]
        spec = rspec.setdefault("template", {}).setdefault("spec", {})
        if not keep_scheduler_name:
            spec.pop("schedulerName", None)
    if pool is not None:
        pool.place(job)
    return job


def submit(cluster, *jobs: dict) -> None:
    cluster.kubectl("create", "-f", "-", input=yaml.safe_dump_all(list(jobs)))


def expected_pods(job: dict) -> list[str]:
    name = job["metadata"]["name"]
    return [f"{name}-{rtype.lower()}-{i}" for rtype, rspec in job["spec"]["tfReplicaSpecs"].items()
            for i in range(rspec.get("replicas", 1))]


def gpu_pods(job: dict) -> list[str]:
    name = job["metadata"]["name"]
    out = []
    for rtype, rspec in job["spec"]["tfReplicaSpecs"].items():
        containers = rspec["template"]["spec"]["containers"]
        if any(GPU_RESOURCE in ((c.get("resources") or {}).get("limits") or {}) for c in containers):
            out += [f"{name}-{rtype.lower()}-{i}" for i in range(rspec.get("replicas", 1))]
    return out


def phases(api: Api, ns: str, job: str) -> dict[str, str]:
    """{pod name: phase (+ '@node' when bound)} for the job's live pods."""
    out = {}
    for p in api.pods(ns, job):
        if p["metadata"].get("deletionTimestamp"):
            continue
        node = p["spec"].get("nodeName")
        out[p["metadata"]["name"]] = p["status"].get("phase", "Pending") + (f"@{node}" if node else "")
    return out


def phase_counts(api: Api, ns: str, job: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for p in api.pods(ns, job):
        if not p["metadata"].get("deletionTimestamp"):
            ph = p["status"].get("phase", "Pending")
            counts[ph] = counts.get(ph, 0) + 1
    return counts


# ---------------------------------------------------------------------------- waiting


def wait_until(pred: Callable[[], Any], timeout: float, what: str,
               describe: Callable[[], Any] | None = None, interval: float = POLL):
    deadline = time.monotonic() + timeout
    last_err = None
    while True:
        try:
            got = pred()
            if got:
                return got
        except AssertionError as e:  # an API error: retry until the deadline
            last_err = e
        if time.monotonic() > deadline:
            seen = describe() if describe else ""
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}"
                                 + (f"; last seen: {seen}" if seen else "")
                                 + (f"; last error: {last_err}" if last_err else ""))
        time.sleep(interval)


def all_running(api: Api, job: dict) -> bool:
    ns = job["metadata"]["namespace"]
    seen = phases(api, ns, job["metadata"]["name"])
    return set(seen) == set(expected_pods(job)) and all(v.startswith("Running@") for v in seen.values())


def wait_all_running(api: Api, job: dict, timeout: float = 60) -> dict[str, str]:
    ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
    def seen() -> dict:  # the pods, and why the gang waits as the job says (the scheduler's words)
        return {**phases(api, ns, name), "status.gang": ((api.tfjob(ns, name) or {}).get("status") or {}).get("gang")}
    wait_until(lambda: all_running(api, job), timeout, f"every pod of {name} Running", seen)
    return phases(api, ns, name)


def watch_gang_waits(api: Api, job: dict, seconds: float = PENDING_WINDOW,
                     require_pods: bool = True) -> list[dict[str, str]]:
    """Sample every POLL s for `seconds`: no pod of the job is ever bound or
    Running. With require_pods, every expected pod must exist (Pending) by the end."""
    ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
    samples = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        seen = phases(api, ns, name)
        samples.append(seen)
        bad = {p: v for p, v in seen.items() if v != "Pending"}
        assert not bad, f"gang {name} must wait whole, but after {len(samples) * POLL:.1f}s: {seen}"
        time.sleep(POLL)
    if require_pods:
        assert set(samples[-1]) == set(expected_pods(job)), \
            f"every pod of {name} should exist and be Pending: {samples[-1]}"
    return samples


def gang_status(api: Api, ns: str, name: str) -> dict:
    """status.gang of a job: why its gang waits, in tfop's words and the scheduler's."""
    return ((api.tfjob(ns, name) or {}).get("status") or {}).get("gang") or {}


def group_waiting(api: Api, backend: str, job: dict) -> dict:
    grp = api.group(backend, job["metadata"]["namespace"], job["metadata"]["name"])
    assert grp is not None, f"no {backend} group for {job['metadata']['name']}"
    return grp


# ---------------------------------------------------------------------------- operator


@contextlib.contextmanager
def operator(cluster, ns: str, gang: str | None, extra_args: list[str] | None = None):
    op = ScopedOperator(cluster, [ns], gang, extra_args).start()
    try:
        yield op
    except BaseException as e:
        if isinstance(e, AssertionError):
            e.args = (f"{e.args[0] if e.args else ''}\n--- tfop log tail ---\n{op.log_tail(40)}"
                      f"{scheduler_log_lines(cluster, ns)}",)
        raise
    finally:
        op.stop()


# The schedulers' logs (e2e.cluster component names): the session cluster's are deleted with it.
SCHEDULER_LOGS = ("kube-scheduler", "scheduler-plugins-scheduler", "volcano-scheduler", "koord-scheduler",
                  "yunikorn-scheduler")
KEPT_LOGS = "tfop-e2e-failed-scheduler-logs"  # under the temporary directory


def scheduler_log_lines(cluster, ns: str, lines: int = 60) -> str:
    """For a failed test: the last lines of each scheduler's log that name its namespace, and a copy of
    those logs whole, kept after the cluster is gone."""
    kept = Path(tempfile.gettempdir()) / KEPT_LOGS / ns
    out = []
    for name in SCHEDULER_LOGS:
        log = cluster.logs / f"{name}.log"
        if not log.exists():
            continue
        text = log.read_text(errors="replace")
        ours = [line for line in text.splitlines() if ns in line]
        if ours:
            kept.mkdir(parents=True, exist_ok=True)
            (kept / log.name).write_text(text)
            out.append(f"\n--- {name} log, lines naming {ns} (whole log kept in {kept / log.name}) ---\n"
                       + "\n".join(ours[-lines:]))
    return "".join(out)


def condition(job_obj: dict | None, ctype: str) -> dict | None:
    for c in ((job_obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype and c.get("status") == "True":
            return c
    return None


# ---------------------------------------------------------------------------- concurrent operators

_deployed: set[tuple[str, str]] = set()  # (cluster dir, account): a test may run its own cluster
_deploy_lock = threading.Lock()


class ScopedOperator(OperatorProcess):
    """OperatorProcess whose ServiceAccount, ClusterRole and ClusterRoleBinding are
    named after its backend (`tfop-<backend>`), holding exactly the rules `tfop
    manifests` renders for that backend. The stock names (`tfop`) hold one backend's
    rules at a time, so operators of different backends could not run at once."""

    def __init__(self, cluster, namespaces: list[str], gang: str | None, extra_args: list[str] | None = None):
        super().__init__(cluster, namespaces, gang_scheduler_name=gang, extra_args=extra_args)
        self.account = f"tfop-{gang or 'off'}"

    def deploy(self) -> None:
        from tfop.tools.deploy.manifests import deploy_objects

        with _deploy_lock:
            if (str(self.cluster.dir), self.account) in _deployed:
                return
            objs = []
            for o in deploy_objects(enable_gang=bool(self.gang), gang_scheduler_name=self.gang, create_namespace=True):
                if o["kind"] == "Deployment":
                    continue
                if o["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding"):
                    o["metadata"]["name"] = self.account
                if o["kind"] == "ClusterRoleBinding":
                    o["roleRef"]["name"] = self.account
                    for s in o["subjects"]:
                        s["name"] = self.account
                objs.append(o)
            self.cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-",
                                 input=yaml.safe_dump_all(objs))
            wait_established(self.cluster, "tfjobs.kubeflow.org")
            _deployed.add((str(self.cluster.dir), self.account))

    def args(self) -> list[str]:
        token = self.cluster.kubectl("create", "token", self.account, "-n", OPERATOR_NAMESPACE,
                                     "--duration=2h").stdout.strip()
        kc = self.log_path.with_suffix(".kubeconfig")
        kc.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "c", "cluster": {"server": self.cluster.server,
                                                   "certificate-authority": str(self.cluster.pki / "ca.crt")}}],
            "users": [{"name": "u", "user": {"token": token}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}], "current-context": "c"}))
        kc.chmod(0o600)
        args = [sys.executable, "-m", "tfop", "run", "--health-probe-bind-address", "0", "--metrics-bind-address", "0",
                "--kubeconfig", str(kc)]
        for ns in self.namespaces:
            args += ["--namespace", ns]
        if self.gang:
            args += ["--enable-gang-scheduling", "--gang-scheduler-name", self.gang]
        return args + self.extra_args

    def start(self) -> "ScopedOperator":
        self.deploy()
        log = open(self.log_path, "ab")
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        self.process = subprocess.Popen(self.args(), stdout=log, stderr=subprocess.STDOUT, env=env,
                                        cwd=Path(__file__).resolve().parents[2], start_new_session=True)
        log.close()
        self.wait_started(timeout=60)
        return self


# ---------------------------------------------------------------------------- concurrent tests


def new_namespace(cluster, test_name: str) -> str:
    name = namespace_name(test_name)
    create_namespace(cluster, name)
    return name


def namespace_name(test_name: str) -> str:
    base = re.sub(r"[^a-z0-9-]+", "-", test_name.lower()).strip("-")[:40].strip("-")
    return f"{base}-{uuid.uuid4().hex[:5]}"


def create_namespace(cluster, name: str) -> None:
    cluster.kubectl("create", "namespace", name)
    wait_until(lambda: cluster.kubectl("get", "sa", "default", "-n", name, check=False).returncode == 0,
               30, f"default ServiceAccount in {name}")


class ConcurrentTests:
    """Runs the selected tests of a module on a few threads at once, from the module's start: most of
    their time is spent watching gangs wait. pytest then calls each test as usual, and the call waits
    for, and reports, that test's own run (pytest_pyfunc_call below): a failure's traceback is the
    test's. Every test still gets its own namespace, operator process and nodes.

    A test's arguments come from its parameters, `namespace` (made for its run here, deleted after
    it) and `shared` (the module's fixtures, by name): it names only those.

    Nodes of its own do not isolate a test on a scheduler that admits gangs against the whole
    cluster: Volcano's enqueue step weighs a gang's minResources against every node and every gang
    it admitted earlier, so one test's gang waiting on its own too-small pool holds back another's.
    Tests for which `one_at_a_time(test name, params)` is true run on a thread of their own, one
    after another, beside the others."""

    def __init__(self, cluster, items, shared: dict[str, Any], workers: int,
                 one_at_a_time: Callable[[str, dict], bool] = lambda name, params: False):
        self.cluster, self.shared = cluster, shared
        self.executor = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="test")
        self.serial = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="test-serial")
        self.futures: dict[str, concurrent.futures.Future] = {}
        self.namespaces: dict[str, str] = {}
        for item in items:
            params = dict(getattr(getattr(item, "callspec", None), "params", {}) or {})
            self.namespaces[item.nodeid] = namespace_name(item.name)
            executor = self.serial if one_at_a_time(item.originalname, params) else self.executor
            self.futures[item.nodeid] = executor.submit(self._run, item, params)

    def _run(self, item, params: dict) -> float:
        t0 = time.monotonic()
        ns = self.namespaces[item.nodeid]
        create_namespace(self.cluster, ns)
        try:
            given = {**self.shared, **params, "namespace": ns}
            item.function(**{arg: given[arg] for arg in inspect.signature(item.function).parameters})
        finally:
            self.cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        return time.monotonic() - t0

    @pytest.hookimpl(tryfirst=True)
    def pytest_pyfunc_call(self, pyfuncitem) -> bool | None:
        """The test's call: its run's outcome, raised as it was raised in the test."""
        future = self.futures.get(pyfuncitem.nodeid)
        if future is None:
            return None  # not one of this module's: pytest calls it
        took = future.result()
        pyfuncitem.user_properties.append(("scenario_seconds", round(took, 1)))
        return True

    def close(self) -> None:
        for executor in (self.executor, self.serial):
            executor.shutdown(wait=True, cancel_futures=True)
