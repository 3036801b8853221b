"""What e2e.bench reads from the operator's /metrics: passes, and the watches' events and bytes."""
from e2e.bench_lib import operator_passes, watch_received

TEXT = """# HELP tfop_watch_events_total Watch events received (bookmarks included)
# TYPE tfop_watch_events_total counter
tfop_watch_events_total{resource="pods"} 1200.0
tfop_watch_events_total{resource="podgroups"} 410.0
tfop_watch_bytes_total{resource="pods"} 3.5e+06
tfop_watch_bytes_total{resource="podgroups"} 287000.0
tfop_reconcile_duration_seconds_count{outcome="applied"} 800.0
tfop_reconcile_duration_seconds_count{outcome="unchanged"} 640.0
tfop_reconcile_duration_seconds_sum{outcome="applied"} 12.5
"""


def test_watch_received_pairs_events_and_bytes_by_resource():
    assert watch_received(TEXT) == {"pods": (1200, 3_500_000), "podgroups": (410, 287_000)}
    assert watch_received("") == {}


def test_passes_are_every_outcomes_count():
    assert operator_passes(TEXT) == 1440
