"""/metrics on the real control plane: upstream's job counters and tfop's own move as jobs are
created, succeed, fail, restart and are deleted, and the gang-wait histogram as gangs start.
Scraped over HTTP and parsed with prometheus_client's parser."""
from __future__ import annotations

import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from e2e.harness.processes import free_port
from e2e.tests.lifecycle_helpers import Env, operator, replica, tfjob

pytestmark = pytest.mark.cluster

GANG = "volcano"


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_counters_and_gang_wait_move_with_the_jobs(cluster, namespace, request):
    port = free_port()
    op = operator(cluster, [namespace], gang_scheduler_name=GANG,
                  extra_args=["--metrics-bind-address", f"127.0.0.1:{port}"])
    request.addfinalizer(op.stop)
    op.start()
    env = Env(cluster, namespace, op)
    job = {"job_namespace": namespace, "framework": "tensorflow"}
    # Started means caches synced; it leads (and says so) a moment later, once it holds the Lease.
    def leading():
        now = scrape(port)
        return now if value(now, "tfop_leader") == 1 else None
    before = env.wait("tfop_leader to read 1", leading, timeout=30)
    assert value(before, "training_operator_jobs_created_total", **job) == 0

    env.apply(tfjob("ok", {"Worker": replica(1, exit_code=0, exit_delay="2s")}),
              tfjob("bad", {"Worker": replica(1, restart_policy="Never", exit_code=1, exit_delay="2s")}),
              tfjob("again", {"Worker": replica(2, restart_policy="ExitCode")}))
    env.wait_pods_running("again", {"again-worker-0", "again-worker-1"}, timeout=60)
    env.mark_exit("again-worker-1", 137)  # a signal: ExitCode restarts it
    env.wait_condition("ok", "Succeeded", timeout=60)
    env.wait_condition("bad", "Failed", timeout=60)
    env.wait_job("again", lambda j: (j.get("status") or {}).get("restartCount", 0) >= 1, "a member restarted")
    env.kubectl("delete", "tfjob", "ok", "--wait=true")

    def moved():
        now = scrape(port)
        return now if (value(now, "training_operator_jobs_created_total", **job) == 3
                       and value(now, "training_operator_jobs_successful_total", **job) == 1
                       and value(now, "training_operator_jobs_failed_total", **job) == 1
                       and value(now, "training_operator_jobs_restarted_total", **job) >= 1
                       and value(now, "training_operator_jobs_deleted_total", **job) == 1) else None
    after = env.wait("the job counters to count 3 created, 1 succeeded, 1 failed, a restart, 1 deleted", moved)
    # Every gang started: one wait observed per gang start (the restarted one starts twice).
    assert value(after, "tfop_gang_wait_seconds_count", backend=GANG) >= 3
    assert value(after, "tfop_gang_restarts_total", backend=GANG) >= 1
    assert value(after, "tfop_jobs", state="Running") == 1 and value(after, "tfop_jobs", state="Failed") == 1
    assert value(after, "tfop_api_requests_total", verb="create", resource="pods", code="201") >= 4
    assert value(after, "tfop_reconcile_duration_seconds_count", outcome="applied") > 0
    assert value(after, "tfop_workqueue_wait_seconds_count") > 0
    # The watches' input: each job's ADDED and DELETED and the pods' changes, each event a whole object.
    for resource, at_least in (("tfjobs", 4), ("pods", 4)):
        events = value(after, "tfop_watch_events_total", resource=resource)
        assert events >= at_least and value(after, "tfop_watch_bytes_total", resource=resource) > 300 * events
