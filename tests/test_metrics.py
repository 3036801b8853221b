"""Metrics as tables: status transitions (tfop/core/transitions.py), request labels, job states, and the
exposition parsed back with prometheus_client's own parser; JSON log lines."""
import json
import logging
from datetime import datetime, timezone

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tfop.core.transitions import Transitions, transitions
from tfop.runtime.jobs import JobRecord
from tfop.runtime.metrics import Metrics, api_call, job_state
from tfop.runtime.logs import JsonLines

NOW = datetime(2026, 11, 23, 12, 0, 30, tzinfo=timezone.utc)
CREATED = "2026-11-23T12:00:00Z"


def cond(ctype, status="True"):
    return {"type": ctype, "status": status}


def st(*types, **extra):
    return {"conditions": [cond(t) for t in types], **extra}


WAITING = {"backend": "volcano", "reason": "PodGroupPending", "since": "2026-11-23T12:00:10Z"}
STARTED = {"backend": "volcano"}
# (case, old status, new status, expected)
TRANSITIONS = [
    ("a new job", {}, st("Created"), Transitions(created=True)),
    ("nothing new", st("Created", "Running"), st("Created", "Running"), Transitions()),
    ("succeeded", st("Created", "Running"), st("Created", "Running", "Succeeded"), Transitions(succeeded=True)),
    ("failed", st("Created"), st("Created", "Failed"), Transitions(failed=True)),
    ("a Running that turned False is no creation", st("Created"), {"conditions": [cond("Created", "False")]},
     Transitions()),
    ("two members restarted", st("Running", restartCount=1), st("Running", restartCount=3),
     Transitions(restarts=2, restarts_by_reason={"failure": 2})),
    ("a gang disrupted, a container restarted in place", st("Running", disruptionCount=1),
     st("Running", disruptionCount=2, containerRestarts=1),
     Transitions(restarts=1, restarts_by_reason={"disruption": 1, "in_place": 1})),
    ("a gang restarted for a lost node", st("Created"),
     {"disruptionCount": 1, "conditions": [cond("Created"), dict(cond("Restarting"), reason="NodeLost")]},
     Transitions(restarts=1, restarts_by_reason={"node_lost": 1})),
    ("gang waited since status.gang.since", st("Created", gang=WAITING), st("Running", gang=STARTED),
     Transitions(gang_waited=20.0)),
    ("gang started in the first pass it was seen: since creation", st("Created"), st("Running", gang=STARTED),
     Transitions(gang_waited=30.0)),
    ("gang already running: no new wait", st("Running", gang=STARTED), st("Running", gang=STARTED), Transitions()),
    ("gang still waiting", st("Created", gang=WAITING), st("Created", gang=WAITING), Transitions()),
]


@pytest.mark.parametrize("case,old,new,expected", TRANSITIONS, ids=[t[0] for t in TRANSITIONS])
def test_transitions(case, old, new, expected):
    assert transitions(old, new, CREATED, NOW) == expected


CALLS = [
    ("GET", "/api/v1/namespaces/ml/pods", ("list", "pods")),
    ("GET", "/api/v1/namespaces/ml/pods/a-worker-0", ("get", "pods")),
    ("POST", "/api/v1/namespaces/ml/services", ("create", "services")),
    ("PATCH", "/apis/kubeflow.org/v1/namespaces/ml/tfjobs/a/status", ("patch", "tfjobs/status")),
    ("PUT", "/apis/coordination.k8s.io/v1/namespaces/kubeflow/leases/tfop", ("update", "leases")),
    ("DELETE", "/apis/scheduling.volcano.sh/v1beta1/namespaces/ml/podgroups/a", ("delete", "podgroups")),
    ("WATCH", "/api/v1/pods", ("watch", "pods")),
    ("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/x.y", ("get", "customresourcedefinitions")),
]


@pytest.mark.parametrize("method,path,expected", CALLS)
def test_api_call_labels(method, path, expected):
    assert api_call(method, path) == expected


STATES = [({}, "Pending"), (st("Created"), "Created"), (st("Created", "Running"), "Running"),
          (st("Created", "Running", "Restarting"), "Restarting"), (st("Created", "Succeeded"), "Succeeded"),
          (st("Created", "Suspended"), "Suspended"), (st("Created", "Failed"), "Failed")]


@pytest.mark.parametrize("status,state", STATES)
def test_job_state(status, state):
    assert job_state(status) == state


def scrape(metrics: Metrics) -> dict[tuple[str, tuple], float]:
    text = generate_latest(metrics.registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_upstream_counters_keep_their_names_and_labels():
    m = Metrics()
    m.job_changed("ml", Transitions(created=True), None)
    m.job_changed("ml", Transitions(succeeded=True), None)
    m.job_changed("ml", Transitions(failed=True, restarts=2), "volcano")
    m.job_deleted("ml")
    got = scrape(m)
    labels = (("framework", "tensorflow"), ("job_namespace", "ml"))
    for name, value in [("created", 1), ("successful", 1), ("failed", 1), ("restarted", 2), ("deleted", 1)]:
        assert got[(f"training_operator_jobs_{name}_total", labels)] == value
    assert got[("tfop_gang_restarts_total", (("backend", "volcano"),))] == 2


def test_gang_wait_and_state_gauges():
    m = Metrics()
    jobs = [JobRecord({"metadata": {}, "status": st("Created", "Running")}), JobRecord({"metadata": {}})]
    m.watch_state(lambda: jobs, lambda: 3)
    m.job_changed("ml", Transitions(gang_waited=4.0), "volcano")
    m.api_response("POST", "/api/v1/namespaces/ml/pods", 429)
    got = scrape(m)
    assert got[("tfop_gang_wait_seconds_count", (("backend", "volcano"),))] == 1
    assert got[("tfop_gang_wait_seconds_bucket", (("backend", "volcano"), ("le", "5.0")))] == 1
    assert got[("tfop_gang_wait_seconds_bucket", (("backend", "volcano"), ("le", "2.0")))] == 0
    assert got[("tfop_jobs", (("state", "Running"),))] == 1 and got[("tfop_jobs", (("state", "Pending"),))] == 1
    assert got[("tfop_workqueue_depth", ())] == 3
    assert got[("tfop_api_requests_total", (("code", "429"), ("resource", "pods"), ("verb", "create")))] == 1


def test_watch_traffic_is_read_from_the_clients_tallies_at_scrape_time():
    m, received = Metrics(), {}
    m.watch_traffic(received)
    assert not any(name.startswith("tfop_watch") for name, _ in scrape(m))
    received["pods"] = [3, 4096, 2]
    received["podgroups"] = [1, 700, 1]
    got = scrape(m)
    assert got[("tfop_watch_events_total", (("resource", "pods"),))] == 3
    assert got[("tfop_watch_bytes_total", (("resource", "pods"),))] == 4096
    assert got[("tfop_watch_events_total", (("resource", "podgroups"),))] == 1
    assert got[("tfop_watch_reads_total", (("resource", "pods"),))] == 2


def test_json_log_lines_carry_the_job():
    record = logging.LogRecord("tfop.controller", logging.INFO, __file__, 1, "reconciled %s/%s", ("ml", "a"), None)
    record.job_namespace, record.job_name, record.outcome, record.duration_ms = "ml", "a", "applied", 12.5
    line = json.loads(JsonLines().format(record))
    assert {k: line[k] for k in ("level", "logger", "message", "job_namespace", "job_name", "outcome",
                                 "duration_ms")} == {
        "level": "INFO", "logger": "tfop.controller", "message": "reconciled ml/a", "job_namespace": "ml",
        "job_name": "a", "outcome": "applied", "duration_ms": 12.5}


def test_the_dashboard_asks_only_for_metrics_tfop_exposes():
    """monitoring/grafana-dashboard.json: every metric its queries name exists (a renamed metric
    would leave an empty panel nobody notices)."""
    import re
    from pathlib import Path

    dashboard = json.loads((Path(__file__).resolve().parents[1] / "monitoring" / "grafana-dashboard.json").read_text())
    m = Metrics()
    m.watch_state(lambda: [], lambda: 0)
    exposed = {s.name for family in text_string_to_metric_families(generate_latest(m.registry).decode())
               for s in family.samples}
    exposed |= {f"{family.name}_bucket" for family in m.registry.collect() if family.type == "histogram"}
    exposed |= {f"{family.name}_total" for family in m.registry.collect() if family.type == "counter"}
    asked = {name for panel in dashboard["panels"] for target in panel["targets"]
             for name in re.findall(r"\b(?:training_operator|tfop)_[a-z_]+", target["expr"])}
    asked |= {name for var in dashboard["templating"]["list"]
              for name in re.findall(r"\b(?:training_operator|tfop)_[a-z_]+", var.get("query", ""))}
    assert len(asked) >= 10 and asked <= exposed, sorted(asked - exposed)
