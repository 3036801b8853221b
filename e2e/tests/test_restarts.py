"""The operator rides out restarts of kube-apiserver and etcd in the middle of a burst of jobs.

Three operators, each watching a namespace of its own (Volcano gangs, scheduler-plugins gangs,
no gang), get 12 jobs between them, submitted one after another by a thread that retries
while the apiserver is away. The apiserver is restarted once the operators have begun creating
the 4th job's children, etcd at the 8th's (`Cluster.stop_component`/`start_component`: SIGTERM,
then the same command, ports and data dir). While the apiserver starts again, another client
creates a TFJob-owned child as soon as it can (EarlyClient), which makes the apiserver refuse
such creates for about 30 s after its restart, every run. Then:

- every job converges as its pods dictate: Running with all its pods Running, or Succeeded
  (pods that exit 0 through kwok's tfop-test-exit stage, some of them only after the restarts);
- every pod, service and PodGroup was created exactly once, and no create was tried again
  without backoff. Counted in the apiserver's audit log, which the apiserver appends to across
  restarts and writes before it answers (blocking mode), per object name. Its /metrics counters
  cannot say this: they count per resource, not per name or user, and start again from zero at
  each restart, losing whatever was answered between the last scrape and the stop;
- no operator process exited or was replaced (same pid, still running).
"""
from __future__ import annotations

import json
import threading
import time
from collections import Counter, defaultdict
from datetime import datetime

import pytest
import yaml

from e2e.harness.kwok_stages import EXIT_LABEL
from e2e.tests.gang_helpers import Api, ScopedOperator, expected_pods, new_namespace
from e2e.tests.lifecycle_helpers import replica, tfjob

pytestmark = pytest.mark.cluster

# The gang backends' group objects, as the audit log names them (objectRef.apiGroup, resource).
GROUPS = {"volcano": ("scheduling.volcano.sh", "podgroups"),
          "scheduler-plugins": ("scheduling.x-k8s.io", "podgroups")}
BACKENDS = ("volcano", "scheduler-plugins", None)  # None: gang scheduling off, default scheduler
CHILD_RESOURCES = {("", "pods"), ("", "services"), *GROUPS.values()}
RESTART_AFTER = {4: "kube-apiserver", 8: "etcd"}  # jobs submitted -> the component restarted then
CONVERGE_TIMEOUT = 180  # s; the informers relist after a broken watch, and waiting gangs are rechecked every 30 s
# Creates of one child, at most. A refusal after an apiserver restart lasts up to about 30 s
# (e2e/README.md, "Restarting a component"); tried again on a backoff (2 s doubling), that is a
# handful of tries, never hundreds.
MAX_TRIES = 20


def jobs_for(ns: str) -> list[dict]:
    """Four jobs of different shapes: two stay Running, two succeed (one before the restarts
    are over, one only well after them)."""
    shapes = [
        ("ps-workers", {"PS": replica(1), "Worker": replica(2)}),
        ("quick", {"Worker": replica(2, exit_code=0, exit_delay="1s")}),
        ("single", {"Worker": replica(1)}),
        ("late", {"Worker": replica(2, exit_code=0, exit_delay="25s")}),
    ]
    out = []
    for name, replicas in shapes:
        job = tfjob(name, replicas)
        job["metadata"]["namespace"] = ns
        out.append(job)
    return out


def succeeds(job: dict) -> bool:
    """Its pods exit 0 (kwok's exit stage), so the job must end Succeeded."""
    return any(EXIT_LABEL in (r["template"].get("metadata") or {}).get("labels", {})
               for r in job["spec"]["tfReplicaSpecs"].values())


class Burst(threading.Thread):
    """Creates the jobs one by one, 0.3 s apart, each retried until the apiserver takes it
    (AlreadyExists: an earlier try went through before its answer was lost)."""

    def __init__(self, cluster, jobs: list[dict]):
        super().__init__(daemon=True, name="burst")
        self.cluster, self.jobs = cluster, jobs
        self.submitted = 0
        self.retries: list[str] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for job in self.jobs:
                self._create(job)
                self.submitted += 1
                time.sleep(0.3)
        except BaseException as e:  # noqa: BLE001 - re-raised by the test
            self.error = e

    def _create(self, job: dict) -> None:
        deadline = time.monotonic() + 90
        while True:
            p = self.cluster.kubectl("create", "-f", "-", input=yaml.safe_dump(job), check=False, timeout=70)
            if p.returncode == 0 or "AlreadyExists" in p.stderr:
                return
            self.retries.append(f"{job['metadata']['name']}: {p.stderr.strip()[:200]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"could not create {job['metadata']['name']}: {self.retries[-5:]}")
            time.sleep(0.3)

    def wait_for(self, count: int, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while self.submitted < count:
            assert self.error is None, self.error
            assert time.monotonic() < deadline, f"only {self.submitted} of {count} jobs submitted: {self.retries}"
            time.sleep(0.05)


class EarlyClient(threading.Thread):
    """Another client of the apiserver that creates a TFJob-owned child (blockOwnerDeletion) as
    soon as it listens again, as any controller of the cluster may: a dry-run Service every
    0.1 s, as a ServiceAccount of its own. Whether the operators' own first creates come that
    early is chance; this makes the apiserver's state after its restart the same every run: if
    such a create comes before the apiserver serves the CRDs' discovery, its
    OwnerReferencesPermissionEnforcement refuses TFJob-owned children for about 30 s
    (e2e/README.md, "Restarting a component"). Dry runs are not counted as creates."""

    def __init__(self, cluster, owner_job: dict):
        super().__init__(daemon=True, name="early-client")
        ns = owner_job["metadata"]["namespace"]
        cluster.apply([
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
             "metadata": {"name": "early-client", "namespace": ns},
             "rules": [{"apiGroups": [""], "resources": ["services"], "verbs": ["create"]}]},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
             "metadata": {"name": "early-client", "namespace": ns},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "early-client"},
             "subjects": [{"kind": "ServiceAccount", "name": "early-client", "namespace": ns}]}])
        self.kubeconfig = cluster.service_account_kubeconfig(ns, "early-client")
        owner = json.loads(cluster.kubectl("get", "tfjob", owner_job["metadata"]["name"], "-n", ns,
                                           "-o", "json").stdout)
        self.service = {"apiVersion": "v1", "kind": "Service", "metadata": {
            "name": "early-client", "namespace": ns, "ownerReferences": [{
                "apiVersion": "kubeflow.org/v1", "kind": "TFJob", "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]},
            "spec": {"clusterIP": "None", "ports": [{"port": 2222}]}}
        self.cluster, self.refused, self._done = cluster, 0, threading.Event()
        self.start()

    def run(self) -> None:
        while not self._done.is_set():
            p = self.cluster.kubectl("create", "--dry-run=server", "--validate=false", "-f", "-",
                                     input=json.dumps(self.service), kubeconfig=self.kubeconfig, check=False)
            self.refused += "cannot find RESTMapping" in p.stderr
            time.sleep(0.1)

    def stop(self) -> None:
        self._done.set()
        self.join(timeout=30)


# -- what converged looks like ----------------------------------------------------------
def condition_true(job: dict | None, ctype: str) -> bool:
    return any(c.get("type") == ctype and c.get("status") == "True"
               for c in ((job or {}).get("status") or {}).get("conditions") or [])


def converged(api: Api, job: dict) -> bool:
    ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
    got = api.tfjob(ns, name)
    if succeeds(job):
        return condition_true(got, "Succeeded")
    pods = {p["metadata"]["name"]: (p.get("status") or {}).get("phase")
            for p in api.pods(ns, name) if not p["metadata"].get("deletionTimestamp")}
    return condition_true(got, "Running") and pods == {p: "Running" for p in expected_pods(job)}


def describe(api: Api, job: dict) -> str:
    ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
    got = api.tfjob(ns, name) or {}
    conds = [(c.get("type"), c.get("status"), c.get("reason"))
             for c in (got.get("status") or {}).get("conditions") or []]
    pods = {p["metadata"]["name"]: (p.get("status") or {}).get("phase") for p in api.pods(ns, name)}
    return f"{ns}/{name}: conditions {conds}, pods {pods}, gang {(got.get('status') or {}).get('gang')}"


# -- what the audit log says was created -------------------------------------------------
NOT_READ = "(refused before its body was read)"  # e.g. 503 while the apiserver installs its CRD paths


def create_outcomes(entries: list[dict], namespaces: set[str]) -> dict[tuple, list[int]]:
    """(namespace, apiGroup, resource, name) -> the codes the apiserver answered to each create
    of that child, dry runs left out. A create refused before its body was read has no name."""
    out: dict[tuple, list[int]] = defaultdict(list)
    for e in entries:
        ref = e.get("objectRef") or {}
        key = (ref.get("apiGroup", ""), ref.get("resource"))
        if (e.get("verb") != "create" or ref.get("subresource") or key not in CHILD_RESOURCES
                or ref.get("namespace") not in namespaces or "dryRun" in e.get("requestURI", "")):
            continue
        code = int((e.get("responseStatus") or {}).get("code") or 0)
        out[(ref["namespace"], *key, ref.get("name") or NOT_READ)].append(code)
    return out


def expected_children(job: dict, backend: str | None) -> set[tuple]:
    ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
    pods = expected_pods(job)
    out = {(ns, "", "pods", p) for p in pods} | {(ns, "", "services", p) for p in pods}
    if backend in GROUPS:
        out.add((ns, *GROUPS[backend], name))
    return out


def wait_first_create(cluster, offset: int, job: dict, timeout: float = 60) -> None:
    ns, name = job["metadata"]["namespace"], job["metadata"]["name"]

    def begun() -> bool:
        return any(e.get("verb") == "create" and (e.get("objectRef") or {}).get("namespace") == ns
                   and ((e.get("objectRef") or {}).get("name") or "").startswith(name)
                   for e in cluster.audit_entries(offset))
    deadline = time.monotonic() + timeout
    while not begun():
        assert time.monotonic() < deadline, f"no child of {ns}/{name} created in {timeout}s"
        time.sleep(0.02)


def assert_operators_alive(operators: dict, pids: dict) -> None:
    """Each operator is the process it was at start, still running."""
    for backend, op in operators.items():
        assert op.process.poll() is None and op.process.pid == pids[backend], \
            f"operator {backend or 'off'} exited ({op.process.returncode}); {op.log_path}:\n{op.log_tail(80)}"


def test_jobs_converge_once_through_apiserver_and_etcd_restarts(cluster):
    api = Api(cluster)
    namespaces = {backend: new_namespace(cluster, f"restarts-{backend or 'off'}") for backend in BACKENDS}
    operators = {b: ScopedOperator(cluster, [ns], b) for b, ns in namespaces.items()}
    try:
        for op in operators.values():
            op.start()
        pids = {b: op.process.pid for b, op in operators.items()}
        per_ns = {b: jobs_for(ns) for b, ns in namespaces.items()}
        jobs = [j for group in zip(*per_ns.values()) for j in group]  # each restart among every backend's
        offset = cluster.audit_offset()
        burst, restarts = burst_through_restarts(cluster, jobs, offset)

        deadline = time.monotonic() + CONVERGE_TIMEOUT
        waiting = list(jobs)
        while waiting and time.monotonic() < deadline:
            assert_operators_alive(operators, pids)
            waiting = [j for j in waiting if not converged(api, j)]
            time.sleep(0.5)
        logs = "\n".join(f"--- tfop ({b or 'off'}) log tail ({op.log_path}) ---\n{op.log_tail(30)}"
                         for b, op in operators.items())
        assert not waiting, ("not converged:\n" + "\n".join(describe(api, j) for j in waiting) + "\n" + logs)
        assert_operators_alive(operators, pids)

        entries = cluster.audit_entries(offset)
        outcomes = create_outcomes(entries, set(namespaces.values()))
        expected = set().union(*(expected_children(j, b) for b, js in per_ns.items() for j in js))
        assert_created_once(outcomes, expected, logs)
        # The burst straddled both restarts: the operators created children before each stop
        # and after the component was gone (so after it came back).
        times = sorted(created_at(entries, set(namespaces.values())))
        for component, began, gone in restarts:
            assert times[0] < began and times[-1] > gone, (component, began, gone, times[0], times[-1])
        print(f"\nretries of the burst while the apiserver was away: {len(burst.retries)}; "
              f"create answers other than 201: {Counter(c for v in outcomes.values() for c in v if c != 201)}; "
              f"most creates of one child: {max((len(v), k) for k, v in outcomes.items() if k[-1] != NOT_READ)}")
    finally:
        for op in operators.values():
            op.stop()
        for ns in namespaces.values():
            cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def burst_through_restarts(cluster, jobs: list[dict], offset: int) -> tuple[Burst, list[tuple]]:
    """Submit the jobs; restart each RESTART_AFTER component once the operator has begun
    creating the children of the job submitted last before it. Returns the finished burst and
    (component, stop sent at, gone at) per restart, wall clock like the audit log."""
    burst = Burst(cluster, jobs)
    burst.start()
    restarts = []
    for count, component in sorted(RESTART_AFTER.items()):
        burst.wait_for(count)
        wait_first_create(cluster, offset, jobs[count - 1])
        early = EarlyClient(cluster, jobs[0]) if component == "kube-apiserver" else None
        began = time.time()
        cluster.stop_component(component)  # restart(), in two steps for the times between
        gone = time.time()
        cluster.start_component(component)
        if early is not None:
            early.stop()
            print(f"\nan early client was refused for want of TFJob's RESTMapping: {early.refused}")
        restarts.append((component, began, gone))
    burst.join(timeout=120)
    assert burst.error is None, burst.error
    assert burst.submitted == len(jobs), burst.retries
    return burst, restarts


def assert_created_once(outcomes: dict[tuple, list[int]], expected: set[tuple], logs: str) -> None:
    """Each expected child answered 201 exactly once, none tried without backoff, nothing else made."""
    hot = {k: Counter(codes) for k, codes in outcomes.items() if k[-1] != NOT_READ and len(codes) > MAX_TRIES}
    assert not hot, f"creates tried again without backoff (answers: how many): {hot}\n{logs}"
    created = Counter({k: codes.count(201) for k, codes in outcomes.items()})
    twice = {k: outcomes[k] for k, n in created.items() if n > 1}
    assert not twice, f"created more than once (codes of every create): {twice}\n{logs}"
    # A create answered 504 (the apiserver's own timeout, on a loaded machine) may have been stored:
    # its retries then meet 409, never 201.
    never = {k: outcomes.get(k, []) for k in expected if created[k] != 1 and 504 not in outcomes.get(k, [])}
    assert not never, f"never created by a 201 (codes of every create): {never}\n{logs}"
    extra = {k: v for k, v in outcomes.items() if k not in expected and created[k]}
    assert not extra, f"created objects no job should have: {extra}"


def created_at(entries: list[dict], namespaces: set[str]) -> list[float]:
    """When each child create answered 201 (epoch seconds)."""
    out = []
    for e in entries:
        ref = e.get("objectRef") or {}
        if (e.get("verb") == "create" and ref.get("namespace") in namespaces
                and (ref.get("apiGroup", ""), ref.get("resource")) in CHILD_RESOURCES
                and (e.get("responseStatus") or {}).get("code") == 201):
            out.append(datetime.fromisoformat(e["stageTimestamp"].replace("Z", "+00:00")).timestamp())
    return out
