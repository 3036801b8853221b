"""Migrating from the Kubeflow training-operator (v1.9.3, the pinned upstream binary) to tfop, and back,
on the real control plane with Volcano gang scheduling.

Upstream is installed as its users have it: its own TFJob CRD (from the module's manifests, applied
server-side as upstream's README says) and the operator with `--gang-scheduler-name=volcano`
(e2e/harness/upstream_operator.py's UpstreamProcess: the binary as a local process, its webhook cert rotator
satisfied). It runs three gangs that stay Running and four jobs that finish (Succeeded with its pods
kept, Succeeded with a PS still running, Succeeded with cleanPodPolicy All, Failed). Then, with the
README's commands: upstream is stopped, its TFJob webhook removed, `tfop manifests` applied over the
CRD server-side with --force-conflicts, and tfop started (as its ServiceAccount). Then:

- the CRD is exactly tfop's, and no TFJob was lost;
- no pod, service or PodGroup of any job was deleted or re-created (same uids); tfop (the apiserver's
  audit log) created and deleted none of them and patched no pod or service, a PodGroup at most
  once (to its own spec), and claimed in no Event to have created one;
- every job keeps its status: conditions, times and replica counters unchanged (fields added only);
  the running gangs get tfop's view of their group (status.gang naming the PodGroup);
- a new job runs, and a migrated gang that finishes under tfop releases its PodGroup, as tfop's own do.

Then back: tfop stopped, upstream's CRD applied again, upstream started: nothing re-created, every
status kept, and a new job runs. Problems are collected and reported together at the end, so one run
lists every difference a migration would meet.
"""
from __future__ import annotations

import json
import time
from collections import Counter

import pytest
import yaml

from e2e.harness.upstream_operator import UpstreamProcess
from e2e.pytest_plugin import own_cluster
from e2e.tests.lifecycle_helpers import Env, is_true, operator, pod_names, replica, tfjob
from e2e.tests.migration_helpers import (
    UPSTREAM_WEBHOOK,
    Snapshot,
    crd_differences,
    install_upstream,
    install_upstream_crd,
    recreated,
    require_upstream_binary,
    snapshot,
    status_regressions,
    take_over,
    tfop_child_writes,
    tfop_events,
    upstream_crd,
)

pytestmark = [pytest.mark.cluster, pytest.mark.builds("training-operator")]

GANG = "volcano"
NAMESPACE = "migration"
TIMEOUT = 120  # s for a job to get where it is going; the machine is small and shared
QUIET = 5.0  # s after tfop's first status writes in which it must write no child of a migrated job
RUNNING = {"gang-ps": {"PS": 1, "Worker": 2}, "gang-chief": {"Chief": 1, "Worker": 1}, "gang-w": {"Worker": 2}}
FINISHED = {"done-ok": "Succeeded", "done-ps": "Succeeded", "done-clean": "Succeeded", "done-fail": "Failed"}
GROUP = "podgroups.scheduling.volcano.sh"


def upstream_jobs() -> list[dict]:
    return [
        tfjob("gang-ps", {"PS": replica(1), "Worker": replica(2)}),
        tfjob("gang-chief", {"Chief": replica(1), "Worker": replica(1)}),
        tfjob("gang-w", {"Worker": replica(2)}),
        tfjob("done-ok", {"Worker": replica(1, exit_code=0)}),
        # cleanPodPolicy None (the v1 default): the PS is still running when worker 0 has succeeded.
        tfjob("done-ps", {"PS": replica(1), "Worker": replica(1, exit_code=0)}),
        tfjob("done-clean", {"Worker": replica(2, exit_code=0)}, run_policy={"cleanPodPolicy": "All"}),
        tfjob("done-fail", {"Worker": replica(1, exit_code=1)}),
    ]


@pytest.fixture(scope="module")
def migration_cluster(tmp_path_factory):
    # A cluster of its own: the test replaces the cluster-wide TFJob CRD, twice.
    require_upstream_binary()
    with own_cluster(tmp_path_factory.mktemp("e2e-migration"), ("volcano",), gpu_nodes=2) as c:
        yield c


def test_training_operator_to_tfop_and_back(migration_cluster, tmp_path):
    cluster = migration_cluster
    install_upstream(cluster)
    env = Env(cluster, new_namespace(cluster))
    problems: list[str] = []

    before = run_under_upstream(env, tmp_path)
    op = operator(cluster, [env.ns], gang_scheduler_name=GANG, log_dir=tmp_path)
    try:
        hand_over_to_tfop(env, op, before, tmp_path, problems)
        run_under_tfop(env, problems)
    finally:
        op.stop()
    back_to_upstream(env, tmp_path, problems)
    assert not problems, (f"the migration changed what it must not (snapshots and logs: {tmp_path}):\n  "
                          + "\n  ".join(problems))


# -- the phases --------------------------------------------------------------------------------
def run_under_upstream(env: Env, log_dir) -> Snapshot:
    """Upstream runs every job to where it stays; it is stopped before the snapshot is taken, so
    nothing changes after it."""
    upstream = UpstreamProcess(env.cluster, env.ns, GANG, tuned=False, log_dir=log_dir)
    env.op = upstream
    try:
        upstream.start()
        env.apply(*upstream_jobs())
        wait_settled(env, RUNNING, FINISHED)
        # Upstream deletes a finished job's PodGroup, and the pods of one with cleanPodPolicy All.
        env.wait("upstream's clean-up of the finished jobs",
                 lambda: groups(env) == set(RUNNING) and not env.pods("done-clean"), TIMEOUT)
    finally:
        upstream.stop()
    before = snapshot(env.cluster, env.ns)
    before.dump(log_dir / "1-upstream.json")
    # 7 pods of running gangs; of the finished jobs' 6, the 2 of done-clean are gone.
    assert sum(k[0] == "pods" for k in before.uids) == 11, before.uids
    return before


def hand_over_to_tfop(env: Env, op, before: Snapshot, log_dir, problems: list[str]) -> None:
    cluster = env.cluster
    # Upstream's webhook validates TFJob creates and updates; with upstream gone it would refuse them.
    cluster.kubectl("delete", "validatingwebhookconfiguration", UPSTREAM_WEBHOOK)
    applied = take_over(cluster, GANG)
    problems += crd_differences(cluster, next(o for o in applied if o["kind"] == "CustomResourceDefinition"))
    since = cluster.audit_offset()
    op.start()
    env.op = op
    env.wait("tfop's status on every migrated job", lambda: all(
        tfop_saw(env.job(name)) for name in [*RUNNING, *FINISHED]), TIMEOUT)
    time.sleep(QUIET)  # what tfop does with the migrated jobs in its first passes, seen over a window
    after = snapshot(cluster, env.ns)
    after.dump(log_dir / "2-tfop.json")
    problems += recreated(before, after, before.uids)
    for name in before.jobs:
        problems += status_regressions(name, before.status(name), after.status(name))
    for name in RUNNING:
        gang = after.status(name).get("gang")
        if gang != {"backend": GANG, "group": name}:  # a whole gang: its group, no waiting details
            problems.append(f"{name}: status.gang is {gang}, not the whole gang of PodGroup {name}")
    problems += unexpected_writes(tfop_child_writes(cluster, since, env.ns))
    for name in before.jobs:
        problems += [f"{name}: tfop's Event {reason}: {message}" for reason, message
                     in tfop_events(cluster, env.ns, name) if reason.startswith("SuccessfulCreate")]


def run_under_tfop(env: Env, problems: list[str]) -> None:
    """A new job runs; a migrated gang that finishes under tfop releases its PodGroup."""
    env.apply(tfjob("new-tfop", {"Worker": replica(2)}))
    env.wait_pods_running("new-tfop", pod_names("new-tfop", Worker=2), TIMEOUT)
    env.wait_condition("new-tfop", "Running", TIMEOUT)
    env.mark_exit("gang-chief-chief-0", 0)
    env.wait_condition("gang-chief", "Succeeded", TIMEOUT)
    if not poll(lambda: "gang-chief" not in groups(env), 30):
        problems.append("gang-chief finished under tfop, but its PodGroup (created by upstream) was not deleted")


def back_to_upstream(env: Env, log_dir, problems: list[str]) -> None:
    cluster = env.cluster
    install_upstream_crd(cluster, force_conflicts=True)
    problems += crd_differences(cluster, yaml.safe_load(upstream_crd().read_text()))
    before = snapshot(cluster, env.ns)
    upstream = UpstreamProcess(cluster, env.ns, GANG, tuned=False, log_dir=log_dir)
    env.op = upstream
    try:
        upstream.start()
        env.apply(tfjob("new-upstream", {"Worker": replica(2)}))
        env.wait_pods_running("new-upstream", pod_names("new-upstream", Worker=2), TIMEOUT)
        env.wait_condition("new-upstream", "Running", TIMEOUT)
        env.wait("upstream's status on the jobs tfop ran", lambda: all(
            upstream_wrote(env.job(name)) for name in ("gang-ps", "gang-w", "new-tfop")), TIMEOUT)
    finally:
        upstream.stop()
    after = snapshot(cluster, env.ns)
    after.dump(log_dir / "3-back-to-upstream.json")
    # Upstream deletes a finished job's PodGroup (tfop should have: run_under_tfop); all else stays.
    keep = [k for k in before.uids if not (k[0] == GROUP and is_finished(before.jobs.get(k[1], {})))]
    problems += [f"back to upstream: {p}" for p in recreated(before, after, keep)]
    for name in before.jobs:
        problems += [f"back to upstream: {p}" for p in status_regressions(name, before.status(name),
                                                                            after.status(name))]


# -- small helpers -----------------------------------------------------------------------------
def new_namespace(cluster) -> str:
    cluster.kubectl("create", "namespace", NAMESPACE)
    # Pods are refused until the ServiceAccount controller has made `default`.
    if not poll(lambda: cluster.kubectl("get", "sa", "default", "-n", NAMESPACE, check=False).returncode == 0, 30):
        pytest.fail(f"no default ServiceAccount in {NAMESPACE}:\n{cluster.logs_tail('kube-controller-manager')}")
    return NAMESPACE


def wait_settled(env: Env, running: dict[str, dict[str, int]], finished: dict[str, str]) -> None:
    for name, counts in running.items():
        env.wait_pods_running(name, pod_names(name, **counts), TIMEOUT)
        env.wait_condition(name, "Running", TIMEOUT)
    for name, ctype in finished.items():
        env.wait_condition(name, ctype, TIMEOUT)


def groups(env: Env) -> set[str]:
    items = json.loads(env.kubectl("get", GROUP, "-o", "json").stdout)["items"]
    return {g["metadata"]["name"] for g in items if not g["metadata"].get("deletionTimestamp")}


def unexpected_writes(writes: list[tuple[str, str, str, int]]) -> list[str]:
    """tfop creates and deletes nothing of a migrated job, and patches no pod or service (their
    controller reference is already the job's). A PodGroup may be patched once, to tfop's spec
    (upstream's has no minTaskMember); twice would be a loop."""
    patched = Counter(name for verb, resource, name, _code in writes if (verb, resource) == ("patch", "podgroups"))
    return [f"tfop wrote a migrated job's child: {w}" + (f" (x{n})" if n > 1 else "")
            for w, n in Counter(writes).items()
            if (w[0], w[1]) != ("patch", "podgroups") or patched[w[2]] > 1 or w[3] >= 300]


def is_finished(job: dict) -> bool:
    return is_true(job, "Succeeded") or is_true(job, "Failed")


def tfop_saw(job: dict | None) -> bool:
    """The job's status was written by tfop: `ready` is a field only tfop writes (kubectl's READY)."""
    status = (job or {}).get("status") or {}
    if "ready" not in status:
        return False
    return not is_true(job, "Running") or status["ready"].split("/")[0] == status["ready"].split("/")[1]


def upstream_wrote(job: dict | None) -> bool:
    """Upstream rebuilds an unfinished job's replicaStatuses from nothing, without the labelSelector
    tfop adds (upstream's CRD keeps the field): a running job's status lacking it is upstream's."""
    statuses = ((job or {}).get("status") or {}).get("replicaStatuses") or {}
    return bool(statuses) and all("labelSelector" not in s for s in statuses.values())


def poll(pred, timeout: float, every: float = 0.5) -> bool:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            return False
        time.sleep(every)
    return True
