"""What e2e.bench reads from the operator's /metrics (passes, the watches' events and bytes), and
how --pin-operator splits the CPUs."""
import os

import pytest

from e2e.bench.machine import split_cpus, stolen_seconds
from e2e.bench.operator_metrics import operator_passes, own_requests, watch_received
from e2e.bench.watchers import rows_in_the_way

TEXT = """# HELP tfop_watch_events_total Watch events received (bookmarks included)
# TYPE tfop_watch_events_total counter
tfop_watch_events_total{resource="pods"} 1200.0
tfop_watch_events_total{resource="podgroups"} 410.0
tfop_watch_bytes_total{resource="pods"} 3.5e+06
tfop_watch_bytes_total{resource="podgroups"} 287000.0
tfop_watch_reads_total{resource="pods"} 700.0
tfop_watch_reads_total{resource="podgroups"} 400.0
tfop_reconcile_duration_seconds_count{outcome="applied"} 800.0
tfop_reconcile_duration_seconds_count{outcome="unchanged"} 640.0
tfop_reconcile_duration_seconds_sum{outcome="applied"} 12.5
"""


def test_watch_received_gives_events_bytes_and_reads_by_resource():
    assert watch_received(TEXT) == {"pods": (1200, 3_500_000, 700), "podgroups": (410, 287_000, 400)}
    assert watch_received("") == {}


@pytest.mark.parametrize("stat, ticks", [
    ("cpu  5788894 134402 1335201 9285245 31206 0 102425 25964 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n", 25964),
    ("cpu  10 0 5 100 0 0 0 0 0 0\n", 0),
    ("cpu  10 0 5 100 0 0 0\n", 0),  # a kernel older than steal accounting
    ("", 0),
])
def test_stolen_seconds_is_the_machines_steal_in_seconds(stat, ticks):
    assert stolen_seconds(stat) == ticks / os.sysconf("SC_CLK_TCK")


def test_passes_are_every_outcomes_count():
    assert operator_passes(TEXT) == 1440


def test_own_requests_sum_every_answer_by_verb_and_resource():
    text = ('tfop_api_requests_total{code="201",resource="pods",verb="create"} 2000.0\n'
            'tfop_api_requests_total{code="429",resource="pods",verb="create"} 3.0\n'
            'tfop_api_requests_total{code="200",resource="tfjobs",verb="patch"} 5.0\n')
    assert own_requests(text) == {"create pods": 2003, "patch tfjobs": 5}


@pytest.mark.parametrize("cpus, operator_cpu, rest", [
    ({0, 1}, 1, {0}),
    ({0, 2, 5}, 5, {0, 2}),
])
def test_pin_operator_gives_the_operator_the_last_cpu_alone(cpus, operator_cpu, rest):
    assert split_cpus(cpus) == (operator_cpu, rest)


def test_pin_operator_refuses_a_single_cpu():
    with pytest.raises(SystemExit, match="2 CPUs or more"):
        split_cpus({3})


@pytest.mark.parametrize("namespaces, in_the_way", [
    (["default", "kube-system", "kubeflow"], []),
    (["bench-tfop-041437", "bench-none-041437"], []),  # this run's own (kept with --keep)
    (["bench-tfop-041147", "bench-tfop-041437", "default"], ["bench-tfop-041147"]),  # another run's
    (["bench-raw-tfjob-040212", "benchmarks"], ["bench-raw-tfjob-040212"]),
])
def test_a_row_refuses_to_start_beside_another_runs_namespace(namespaces, in_the_way):
    assert rows_in_the_way(namespaces, "041437") == in_the_way
