"""A hostile tenant beside ordinary ones: no TFJob can stop the operator (bounded input).

On the real apiserver with the generated CRD, and tfop running as its own ServiceAccount:
- a job asking for 100,000 replicas and one asking for cpu "1e10000000" are refused by `kubectl
  apply` with a message naming the field (the CRD's maximum, its total rule, its quantity pattern),
  and so is that cpu under a lower-case replica type (the CRD once kept those templates unchecked;
  the operator's bound on parsing it is tests/test_core_bounded.py's);
- a job admission lets through but above the operator's --max-pods-per-job fails before anything is
  built, its condition and one Warning Event naming the limit and the flag;
- meanwhile 20 ordinary jobs are all Running within twice the time they take alone, the operator's
  peak RSS stays under 200 MB, and its longest event-loop stall is printed beside the times.
"""
from __future__ import annotations

import copy
import json
import re
import threading
import time
from datetime import datetime
from pathlib import Path

import pytest
import yaml

from e2e.tests.gang_helpers import Api
from e2e.tests.lifecycle_helpers import Env, condition, is_true, names, operator, pod_names, replica, tfjob
from tfop.api.rules import MAX_JOB_REPLICAS, MSG_TOTAL_REPLICAS
from tfop.core.replicas import MAX_CREATES_PER_PASS
from tfop.kube.loop_monitor import WINDOW

pytestmark = pytest.mark.cluster

ORDINARY = 20
CEILING = 40  # the operator's --max-pods-per-job here
HUGE_CPU = "1e10000000"
MAX_RSS_MB = 200
WORKER_REPLICAS = "spec.tfReplicaSpecs.Worker.replicas"
WORKER_CPU = "spec.tfReplicaSpecs.Worker.template.spec.containers[0].resources.limits.cpu"
HIDDEN_CPU = "spec.tfReplicaSpecs.worker.template.spec.containers[0].resources.limits.cpu"
_STALL = re.compile(r"^(\S+ \S+) \S+ tfop\.loop: event loop(?:: longest stall| stalled) (\d+) ms")


def ordinary(name: str) -> dict:
    return tfjob(name, {"PS": replica(1), "Worker": replica(2)})


def with_cpu(job: dict, key: str, cpu: str) -> dict:
    job = copy.deepcopy(job)
    container = job["spec"]["tfReplicaSpecs"][key]["template"]["spec"]["containers"][0]
    container["resources"] = {"limits": {"cpu": cpu}}
    return job


def too_many_replicas() -> dict:
    return tfjob("hostile-replicas", {"Worker": replica(100_000)})


def huge_cpu() -> dict:
    return with_cpu(tfjob("hostile-cpu", {"Worker": replica(2)}), "Worker", HUGE_CPU)


def over_ceiling() -> dict:
    return tfjob("hostile-over-ceiling", {"PS": replica(1), "Worker": replica(CEILING)})


def hidden_cpu() -> dict:
    """A lower-case key's pod template: checked like any other's."""
    return with_cpu(tfjob("hostile-hidden-cpu", {"worker": replica(2)}), "worker", HUGE_CPU)


def apply(env: Env, *jobs: dict):
    return env.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(jobs), check=False)


def all_running(api: Api, ns: str, names: set[str]) -> bool:
    jobs = api.items(f"/apis/kubeflow.org/v1/namespaces/{ns}/tfjobs")
    return names <= {j["metadata"]["name"] for j in jobs if is_true(j, "Running")}


def time_to_running(env: Env, api: Api, jobs: list[dict], timeout: float = 60) -> float:
    """Seconds from submitting `jobs` (one apply) until every one is Running."""
    names = {j["metadata"]["name"] for j in jobs}
    start = time.monotonic()
    assert apply(env, *jobs).returncode == 0
    env.wait(f"{len(names)} ordinary jobs Running", lambda: all_running(api, env.ns, names), timeout)
    return time.monotonic() - start


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmHWM in /proc/{pid}/status")


def longest_stall_ms(log: Path, since: datetime) -> int:
    """The longest event-loop stall the operator logged at or after `since` (its windows and warnings;
    a window line says the longest of the WINDOW seconds before it)."""
    stalls = [0]
    for line in log.read_text(errors="replace").splitlines():
        m = _STALL.match(line)
        if m and datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f") >= since:
            stalls.append(int(m.group(2)))
    return max(stalls)


def refuse_in_background(env: Env, jobs: list[dict]) -> tuple[threading.Thread, dict]:
    results: dict = {}

    def run():
        for job in jobs:
            results[job["metadata"]["name"]] = apply(env, job)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, results


def test_refused_at_admission_naming_the_field(cluster, namespace, request):
    op = operator(cluster, [namespace])  # applies the generated CRD (once per cluster)
    request.addfinalizer(op.stop)
    op.start()
    env = Env(cluster, namespace, op)
    for job, field in [(too_many_replicas(), WORKER_REPLICAS), (huge_cpu(), WORKER_CPU),
                       (hidden_cpu(), HIDDEN_CPU)]:
        refused = apply(env, job)
        assert refused.returncode != 0, refused.stdout
        assert field in refused.stderr, refused.stderr
        assert env.job(job["metadata"]["name"]) is None
        print(f"\nkubectl apply {job['metadata']['name']}: {refused.stderr.strip()}")
    half = MAX_JOB_REPLICAS // 2 + 1  # each type within its maximum, the job above the total
    refused = apply(env, tfjob("hostile-total", {"PS": replica(half), "Worker": replica(half)}))
    assert refused.returncode != 0 and MSG_TOTAL_REPLICAS in refused.stderr, refused.stderr


def test_hostile_tenant_beside_ordinary_jobs(cluster, namespace, request):
    op = operator(cluster, [namespace], extra_args=["--max-pods-per-job", str(CEILING)])
    request.addfinalizer(op.stop)
    op.start()
    env, api = Env(cluster, namespace, op), Api(cluster)

    alone = time_to_running(env, api, [ordinary(f"alone-{i}") for i in range(ORDINARY)])

    time.sleep(WINDOW + 0.5)  # every window of the loop monitor logged from `since` on starts after `alone`
    since = datetime.now()
    assert apply(env, over_ceiling()).returncode == 0  # admission lets this one through
    refusing, refused = refuse_in_background(env, [too_many_replicas(), huge_cpu(), hidden_cpu()])
    beside = time_to_running(env, api, [ordinary(f"beside-{i}") for i in range(ORDINARY)])
    refusing.join(60)

    for name, field in [("hostile-replicas", WORKER_REPLICAS), ("hostile-cpu", WORKER_CPU),
                        ("hostile-hidden-cpu", HIDDEN_CPU)]:
        assert refused[name].returncode != 0 and field in refused[name].stderr, refused[name].stderr
    failed = env.wait_condition("hostile-over-ceiling", "Failed", timeout=30)
    message = condition(failed, "Failed")["message"]
    assert f"asks for {CEILING + 1} pods" in message and f"--max-pods-per-job={CEILING}" in message, message
    warnings = [e for e in env.events("hostile-over-ceiling") if e["type"] == "Warning"]
    assert [(e["reason"], e["message"], e.get("count", 1)) for e in warnings] == [("TooManyPods", message, 1)]
    assert env.pods("hostile-over-ceiling") == [] and env.services("hostile-over-ceiling") == []

    rss = peak_rss_mb(op.process.pid)
    time.sleep(WINDOW + 0.5)  # the loop monitor's window covering the end of the run is logged
    stall = longest_stall_ms(op.log_path, since)
    print(f"\nhostile tenant: {ORDINARY} ordinary jobs Running in {alone:.1f} s alone, {beside:.1f} s beside the "
          f"hostile ones; operator peak RSS {rss:.0f} MB; longest event-loop stall {stall} ms")
    print(json.dumps({"alone_s": round(alone, 2), "beside_s": round(beside, 2), "peak_rss_mb": round(rss),
                      "longest_stall_ms": stall}))
    assert beside <= 2 * alone, (alone, beside)
    assert rss < MAX_RSS_MB, rss
    assert stall < 1000, stall  # a pass parsing "1e10000000" exactly held the loop ~9 s


def test_a_job_bigger_than_one_pass_is_created_over_several(cluster, namespace, request):
    """Each pass creates at most MAX_CREATES_PER_PASS pods (and services); the next pass comes at once
    and creates what it then sees missing, until the job has all of them."""
    op = operator(cluster, [namespace])
    request.addfinalizer(op.stop)
    op.start()
    env = Env(cluster, namespace, op)
    workers = 2 * MAX_CREATES_PER_PASS + 9
    assert apply(env, tfjob("big", {"PS": replica(1), "Worker": replica(workers)})).returncode == 0
    env.wait_children("big", pod_names("big", ps=1, worker=workers), timeout=90)
    job = env.wait_condition("big", "Running", timeout=60)
    assert not condition(job, "Failed"), env.msg("big")
    created = [e for e in env.events("big") if e["reason"] == "SuccessfulCreate"]
    assert len(created) >= 3, [e["message"] for e in created]  # one per pass at least: batches, not one plan
    assert len(names(env.pods("big"))) == workers + 1
