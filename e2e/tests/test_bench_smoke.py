"""A tiny run of the benchmark (e2e/bench/burst.py): raw client (alone, and creating the TFJobs too) and tfop, 3 jobs."""
from __future__ import annotations

import json
import os

import pytest

from e2e.bench import burst as bench

pytestmark = pytest.mark.cluster


def test_bench_smoke(cluster, tmp_path):
    # A cluster of its own: the apiserver's request counters are cluster-wide, and the session
    # cluster is busy deleting other tests' namespaces. (`cluster` only makes sure binaries exist.)
    cpus = os.sched_getaffinity(0)
    rc = bench.main(["--jobs", "3", "--against", "raw,raw-tfjob", "--nodes", "1", "--pprof", "--pin-operator",
                     "--out", str(tmp_path), "--timeout", "120", "--name", "smoke"])
    assert rc == 0
    # --pin-operator: the operator ran alone on the last CPU, and this process has all of its CPUs back
    assert os.sched_getaffinity(0) == cpus
    data = json.loads((tmp_path / "smoke.json").read_text())
    rows = {r["row"]: r for r in data["rows"]}
    assert set(rows) == {"raw", "raw+tfjob", "tfop"}
    # The benchmark's cluster raises the client QPS of the scheduler and the controller manager
    # (read back from their /configz), and each row's deletion is over before the next row starts.
    clients = data["meta"]["scheduler_clients"]
    assert clients["kube-scheduler"]["qps"] == clients["kube-controller-manager"]["qps"] == 5000
    assert all(r["quiet_after_delete"] for r in rows.values())
    objects = sum(data["meta"]["objects_per_job"].values())  # 5 pods + 5 services
    assert objects == 10
    for r in rows.values():
        assert r["pods_running"] == r["pods"] == 15 and r["jobs_started"] == 3 and not r["timed_out"]
        assert 0 < r["wall_s"] < 120 and r["pods_per_s"] > 0
        assert 0 < r["latency_p50_s"] <= r["latency_p95_s"] <= r["latency_p99_s"] <= r["wall_s"] + 1
    # The raw client writes exactly the objects; counting attributes nothing else to it.
    # (core Events are cluster-wide too: a node controller's RegisteredNode may land in the window)
    assert {k: v for k, v in rows["raw"]["writes_by"].items() if not k.endswith(" events")} == {
        "POST pods": 15, "POST services": 15}
    # raw+tfjob: the TFJobs (the submitter's, as in tfop's row), their objects, two status writes each
    assert {k: v for k, v in rows["raw+tfjob"]["writes_by"].items() if not k.endswith(" events")} == {
        "POST pods": 15, "POST services": 15, "PATCH tfjobs/status": 6}
    tfop = rows["tfop"]
    assert tfop["operator_cpus"] == [max(cpus)]
    assert tfop["writes_by"]["POST pods"] == 15 and tfop["writes_by"]["POST services"] == 15
    assert tfop["writes_per_job"] <= objects + 2
    assert tfop["events_per_job"] <= 2
    assert tfop["restart_writes"] == 0 and tfop["restart_events"] == 0
    assert tfop["passes_per_job"] >= 2  # read from the operator's /metrics: at least a create and a Running
    assert 0 < tfop["peak_rss_mb"] < 500 and tfop["cpu_s"] >= 0
    # --pprof: each row's control-plane profiles, merged and kept; the raw row creates no TFJob
    for r in rows.values():
        profile = r["control_plane_profile"]
        assert set(profile) == {"kube-apiserver", "kube-controller-manager", "kube-scheduler"}
        assert profile["kube-apiserver"]["total"] > 0
        assert all(0 <= part <= profile[c]["total"] for c in profile for part in profile[c].values())
        for component in profile:
            assert (tmp_path / "logs" / f"pprof-{r['namespace']}-{component}.pb.gz").stat().st_size > 0
    assert rows["raw"]["control_plane_profile"]["kube-apiserver"]["custom resource creates"] == 0
    assert not list((tmp_path / "logs").glob("pprof-*.[0-9]*.pb.gz"))  # the slices went into the merge
    md = (tmp_path / "smoke.md").read_text()
    assert "| raw |" in md and "| raw+tfjob |" in md and "| tfop |" in md
