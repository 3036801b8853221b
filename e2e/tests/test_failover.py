"""Two operators with --leader-elect on the real control plane: failover, handover, split brain, and
a process that never stays alive doing nothing.

Each operator runs as `tfop manifests` deploys it (its ServiceAccount, ClusterRole and the leader
election's Role) with a token of its own, so the apiserver's audit log (e2e/harness/control_plane.py AUDIT_POLICY)
tells which replica made each request. Jobs are small gangs on Volcano.
"""
from __future__ import annotations

import asyncio
import random
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
from datetime import datetime
from pathlib import Path

import pytest
import yaml

from e2e.harness.processes import free_port
from e2e.tests.lifecycle_helpers import Env, active, phase, replica, tfjob
from e2e.tests.audit_helpers import CREDENTIAL_ID, credential_id
from e2e.tests.lifecycle_helpers import operator as make_operator
from tfop.kube.client import KubeClient
from tfop.kube.credentials import load_credentials
from tfop.kube.leader import LeaderElector
from tfop.kube.lease import LEASE_API, LEASE_PLURAL, LeaseTiming
from tfop.tools.deploy import rbac

pytestmark = pytest.mark.cluster

GANG = "volcano"
WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection"}
LEASE = ("coordination.k8s.io", "leases")


# -- operators ---------------------------------------------------------------------------
def grant_lease_rights(env: Env) -> None:
    """The manifests' leader-election Role and RoleBinding, in this test's namespace (its Lease's)."""
    objs = rbac.leader_election_objects(env.ns)
    objs[1]["subjects"][0]["namespace"] = "kubeflow"  # the operator's ServiceAccount lives there
    env.cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objs))


def audited_operator(env: Env, extra_args: list[str], kubeconfig: Path | None = None):
    """An operator, started; `credential` names its token in the audit log (tokens are made anew
    at each start, so it is read when the args are)."""
    op = make_operator(env.cluster, [env.ns], gang_scheduler_name=GANG, extra_args=extra_args)
    base = op.args

    def args() -> list[str]:
        args = base()
        if kubeconfig is not None:
            args[args.index("--kubeconfig") + 1] = str(kubeconfig)
        op.credential = credential_id(Path(args[args.index("--kubeconfig") + 1]))
        return args
    op.args = args
    return op.start()


def leader_operator(env: Env, kubeconfig: Path | None = None, probes: int | None = None):
    probe_args = ["--health-probe-bind-address", f"127.0.0.1:{probes}"] if probes else []
    return audited_operator(env, ["--leader-elect", "--leader-elect-namespace", env.ns, *probe_args], kubeconfig)


def log_time(op, text: str, timeout: float = 40) -> float:
    """Wall-clock time of the operator's first log line containing `text` (waits for it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in op.log_path.read_text(errors="replace").splitlines():
            if text in line:
                return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
        if op.process.poll() is not None and text not in op.log_path.read_text(errors="replace"):
            raise AssertionError(f"operator exited ({op.process.returncode}) before logging {text!r}:\n"
                                 f"{op.log_tail()}")
        time.sleep(0.1)
    raise AssertionError(f"no {text!r} in the operator's log within {timeout}s:\n{op.log_tail()}")


def probe(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return answer.status, answer.read().decode().strip()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode().strip()


# -- the workload ----------------------------------------------------------------------------
def burst(env: Env, count: int, prefix: str) -> list[str]:
    names = [f"{prefix}-{i}" for i in range(count)]
    jobs = [tfjob(n, {"Worker": replica(2)}) for n in names]
    env.kubectl("apply", "-f", "-", input=yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": jobs}))
    return names


def staggered_burst(env: Env, count: int, prefix: str, interval: float = 0.2):
    """Submit jobs one by one from a thread; returns (names, submitted counter list, thread)."""
    names = [f"{prefix}-{i}" for i in range(count)]
    submitted: list[str] = []

    def submit() -> None:
        for name in names:
            env.apply(tfjob(name, {"Worker": replica(2)}))
            submitted.append(name)
            time.sleep(interval)
    thread = threading.Thread(target=submit, daemon=True)
    thread.start()
    return names, submitted, thread


def all_running(env: Env, names: list[str], timeout: float = 90) -> None:
    def running() -> bool:
        pods = [p for p in active(env.pods()) if p["metadata"]["labels"].get("training.kubeflow.org/job-name")
                in names]
        return len(pods) == 2 * len(names) and all(phase(p) == "Running" for p in pods)
    env.wait(f"every pod of {len(names)} jobs Running", running, timeout=timeout)


def pod_count(env: Env) -> int:
    return len(env.pods())


# -- the audit log -----------------------------------------------------------------------
def entries_of(env: Env, since: int, credential: str) -> list[dict]:
    return [e for e in env.cluster.audit_entries(since)
            if ((e.get("user") or {}).get("extra") or {}).get(CREDENTIAL_ID) == [credential]]


def is_write(entry: dict) -> bool:
    ref = entry.get("objectRef") or {}
    return (entry["verb"] in WRITE_VERBS and (ref.get("apiGroup", ""), ref.get("resource")) != LEASE
            and "dryRun" not in entry.get("requestURI", ""))


def created_names(entries: list[dict], code: int = 201) -> dict[tuple[str, str], int]:
    """(resource, name) -> creates of children answered `code` in these entries (dry runs left out)."""
    counts: dict[tuple[str, str], int] = {}
    for e in entries:
        ref = e.get("objectRef") or {}
        if e["verb"] == "create" and int((e.get("responseStatus") or {}).get("code") or 0) == code \
                and "dryRun" not in e.get("requestURI", "") and ref.get("resource") in ("pods", "services",
                                                                                       "podgroups"):
            key = (ref["resource"], ref.get("name", "?"))
            counts[key] = counts.get(key, 0) + 1
    return counts


def assert_each_created_once(entries: list[dict], expected: set[tuple[str, str]]) -> None:
    """No child answered 201 twice, and each was created: answered 201, or 504 (the apiserver's own
    timeout on a loaded machine: the write may be stored, and then a retry meets 409, never 201)."""
    counts = created_names(entries)
    twice = {k: n for k, n in counts.items() if n > 1}
    assert not twice, f"created more than once: {twice}"
    uncertain = set(created_names(entries, 504)) - set(counts)
    missing = expected - set(counts) - uncertain
    assert not missing and set(counts) <= expected, \
        f"missing {sorted(missing)}, extra {sorted(set(counts) - expected)} (504s: {sorted(uncertain)})"


def stamp(entry: dict) -> float:
    return datetime.fromisoformat(entry["stageTimestamp"].replace("Z", "+00:00")).timestamp()


def assert_created_once(env: Env, since: int, ops, names: list[str]) -> None:
    entries = [e for op in ops for e in entries_of(env, since, op.credential)]
    expected = {("pods", f"{n}-worker-{i}") for n in names for i in range(2)} | \
        {("services", f"{n}-worker-{i}") for n in names for i in range(2)} | {("podgroups", n) for n in names}
    assert_each_created_once(entries, expected)


def assert_never_two_writers(env: Env, since: int, first, second) -> None:
    """Every write of the first leader was answered before the second leader's first write."""
    a = [stamp(e) for e in entries_of(env, since, first.credential) if is_write(e)]
    b = [stamp(e) for e in entries_of(env, since, second.credential) if is_write(e)]
    assert a and b, f"both replicas should have written: {len(a)} and {len(b)} writes"
    assert max(a) < min(b), f"the old leader wrote {max(a) - min(b):.3f}s after the new one began"


# -- the tests --------------------------------------------------------------------------------
@pytest.fixture
def env(cluster, namespace):
    e = Env(cluster, namespace)
    grant_lease_rights(e)
    return e


def test_sigkill_of_the_leader_mid_burst_the_standby_finishes_every_job(env, request):
    since = env.cluster.audit_offset()
    leader = leader_operator(env)
    request.addfinalizer(leader.stop)
    log_time(leader, "leading: acquired")
    standby = leader_operator(env)
    request.addfinalizer(standby.stop)
    log_time(standby, "standby: caches warm")
    names, submitted, submitting = staggered_burst(env, 20, "kill")
    env.wait("8 jobs submitted and the leader's first pods", lambda: len(submitted) >= 8 and pod_count(env) >= 2,
             timeout=30)
    killed_at = time.time()
    leader.kill()
    submitting.join(timeout=60)
    took_over = log_time(standby, "tfop.controller: reconciling", timeout=40)
    gap = took_over - killed_at
    print(f"SIGKILL takeover: {gap:.1f}s from the kill to the standby reconciling")
    assert gap < 20, f"no reconciling for {gap:.1f}s after the leader was killed"
    all_running(env, names)
    assert_created_once(env, since, [leader, standby], names)
    assert_never_two_writers(env, since, leader, standby)


def test_sigterm_hands_the_lease_over_at_once(env, request):
    since = env.cluster.audit_offset()
    leader = leader_operator(env)
    request.addfinalizer(leader.stop)
    log_time(leader, "leading: acquired")
    port = free_port()
    standby = leader_operator(env, probes=port)
    request.addfinalizer(standby.stop)
    log_time(standby, "standby: caches warm")
    # The standby is alive and ready (its caches are warm: it can lead at once).
    assert probe(port, "/readyz") == (200, "ok") and probe(port, "/healthz") == (200, "ok")
    first = burst(env, 4, "before")
    all_running(env, first)
    stopped_at = time.time()
    leader.process.send_signal(signal.SIGTERM)
    took_over = log_time(standby, "tfop.controller: reconciling", timeout=20)
    assert leader.process.wait(timeout=10) == 0, leader.log_tail()
    assert probe(port, "/healthz") == (200, "ok")
    handover = took_over - stopped_at
    print(f"SIGTERM handover: {handover:.2f}s from the signal to the standby reconciling")
    assert handover < 3, f"handover took {handover:.2f}s"
    assert "released Lease" in leader.log_tail()
    second = burst(env, 4, "after")
    all_running(env, second)
    assert_created_once(env, since, [leader, standby], first + second)
    assert_never_two_writers(env, since, leader, standby)


def test_a_leader_that_cannot_renew_stops_writing_before_another_may_lead(env, request):
    """Split brain: the leader's Lease requests are refused (its own RoleBinding removed); it stops
    writing within the renew deadline and exits, and only then does the standby take over."""
    separate = separate_account(env)
    since = env.cluster.audit_offset()
    leader = leader_operator(env, kubeconfig=separate)
    request.addfinalizer(leader.stop)
    log_time(leader, "leading: acquired")
    standby = leader_operator(env)
    request.addfinalizer(standby.stop)
    log_time(standby, "standby: caches warm")
    names = burst(env, 6, "split")
    env.wait("the leader creating pods", lambda: pod_count(env) >= 2, timeout=30)
    env.kubectl("delete", "rolebinding", "tfop-split-leases")  # its renewals are refused from now on
    revoked_at = time.time()
    assert leader.process.wait(timeout=30) == 1, leader.log_tail()
    assert "could not renew Lease" in leader.log_tail()
    exited_at = time.time()
    names += burst(env, 6, "split-late")  # submitted while no replica may lead yet
    log_time(standby, "tfop.controller: reconciling", timeout=30)
    print(f"split brain: the refused leader exited {exited_at - revoked_at:.1f}s after its renewals were refused")
    all_running(env, names)
    assert_never_two_writers(env, since, leader, standby)
    assert_created_once(env, since, [leader, standby], names)


def separate_account(env: Env) -> Path:
    """A second ServiceAccount bound to the operator's ClusterRole and to the Lease Role by a
    RoleBinding of its own, which the test deletes to refuse only this replica's renewals."""
    ns = env.ns
    env.kubectl("create", "serviceaccount", "tfop-split")
    env.cluster.kubectl("create", "clusterrolebinding", f"tfop-split-{ns}", "--clusterrole=tfop",
                        f"--serviceaccount={ns}:tfop-split")
    env.kubectl("create", "rolebinding", "tfop-split-leases", "--role=tfop-leader-election",
                f"--serviceaccount={ns}:tfop-split")
    return env.cluster.service_account_kubeconfig(ns, "tfop-split")


def test_a_dead_controller_task_ends_the_process_within_seconds(env, request):
    """Silent death: a fault injected into the controller's work queue (as a bug there would be)."""
    op = make_operator(env.cluster, [env.ns])
    inject = ("import sys; import tfop.kube.workqueue as q\n"
              "async def broken(self):\n    raise RuntimeError('injected fault in the work queue')\n"
              "q.WorkQueue.run = broken\n"
              "from tfop.tools.cli import cli; sys.exit(cli(sys.argv[1:]))")
    base = op.args
    op.args = lambda: [sys.executable, "-c", inject, *base()[3:]]
    started = time.time()
    request.addfinalizer(op.stop)
    try:
        op.start()  # returns once its caches are synced, unless it has exited by then
    except RuntimeError as err:
        assert "exited with 1" in str(err)
    assert op.process.wait(timeout=15) == 1, op.log_tail()
    took = time.time() - started
    log = op.log_tail()
    assert "controller stopped (RuntimeError: injected fault in the work queue)" in log, log
    assert "Traceback" not in log
    assert took < 15, f"exited only after {took:.1f}s"


def test_sigkill_at_20_random_moments_every_job_converges_and_nothing_is_created_twice(env, request):
    """One operator (no leader election: a restarted one need not wait out its own Lease), SIGKILLed
    at 20 random moments while 40 gang jobs arrive; half of them finish, half keep running."""
    rng = random.Random(20261123)
    since = env.cluster.audit_offset()
    names = [f"crash-{i}" for i in range(40)]
    finishing = set(names[::2])
    submitted: list[str] = []

    def submit() -> None:
        for name in names:
            worker = replica(2, exit_code=0, exit_delay="4s") if name in finishing else replica(2)
            env.apply(tfjob(name, {"Worker": worker}))
            submitted.append(name)
            time.sleep(0.3)
    credentials: list[str] = []
    op = crash_operator(env, credentials)  # installs the CRD and RBAC first
    submitting = threading.Thread(target=submit, daemon=True)
    submitting.start()
    for kill in range(20):
        if kill:
            op = crash_operator(env, credentials)
        time.sleep(rng.uniform(0.0, 1.5))  # after the caches synced: mid-pass, mid-batch, mid-status
        op.kill()
    submitting.join(timeout=60)
    assert submitted == names, f"only {len(submitted)} of {len(names)} jobs were submitted"
    final = crash_operator(env, credentials)
    request.addfinalizer(final.stop)
    running = [n for n in names if n not in finishing]
    all_running(env, running, timeout=120)
    for name in sorted(finishing):
        env.wait_condition(name, "Succeeded", timeout=90)
    entries = [e for c in credentials for e in entries_of(env, since, c)]
    expected = {(kind, f"{n}-worker-{i}") for n in names for i in range(2) for kind in ("pods", "services")} | \
        {("podgroups", n) for n in names}
    assert_each_created_once(entries, expected)


def crash_operator(env: Env, credentials: list[str]):
    op = audited_operator(env, [])
    credentials.append(op.credential)
    return op


async def stop_during_a_renewal(kubeconfig: str, namespace: str) -> tuple[list, dict | None]:
    """Lead, then stop while a renewal reads the Lease; (what that read answered, the Lease after
    the release)."""
    async with KubeClient(load_credentials(kubeconfig)) as client:
        elector = LeaderElector(client, namespace, "stop-mid-renewal", "replica-a",
                                LeaseTiming(lease_duration=6, renew_deadline=4, retry_period=0.2))
        electing = asyncio.create_task(elector.run())
        await asyncio.wait_for(elector.leading.wait(), 10)
        reading, answered, read = asyncio.Event(), [], client.get

        async def get_slowly(*args, **kwargs):
            reading.set()
            await asyncio.sleep(0.5)  # the stop comes in here, while the renewal is under way
            answered.append(await read(*args, **kwargs))
            return answered[-1]
        client.get = get_slowly
        await asyncio.wait_for(reading.wait(), 5)
        elector.stop()
        await asyncio.wait_for(electing, 5)  # returns (no LeadershipLost), once the renewal is done
        client.get = read
        assert await elector.release()
        return answered, await client.get(LEASE_API, LEASE_PLURAL, namespace, "stop-mid-renewal")


def test_a_stop_finishes_the_renewal_under_way_then_releases(cluster, namespace):
    """A Lease request cut off mid-way is a 'context canceled' error in the apiserver's log and leaves
    the replica unsure whether it renewed; a clean stop lets it finish, then hands the Lease over."""
    answered, after = asyncio.run(stop_during_a_renewal(str(cluster.kubeconfig), namespace))
    assert len(answered) == 1 and answered[0]["spec"]["holderIdentity"] == "replica-a", answered
    assert not after["spec"].get("holderIdentity"), after["spec"]
