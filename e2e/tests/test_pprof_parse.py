"""Reading `go tool pprof -top`'s header (e2e/bench/pprof.py): plain tables, no cluster."""
from __future__ import annotations

import pytest

from e2e.bench.pprof import focused_seconds, seconds


@pytest.mark.parametrize("text, expected", [
    ("0", 0.0), ("650ms", 0.65), ("3s", 3.0), ("3.02s", 3.02), ("1.50mins", 90.0), ("1hrs", 3600.0),
    ("250us", 0.00025), ("10ns", 1e-8),
])
def test_durations_as_pprof_prints_them(text, expected):
    assert seconds(text) == pytest.approx(expected)


@pytest.mark.parametrize("text", ["", "3 s", "s", "3.0days"])
def test_what_is_not_a_duration_is_refused(text):
    with pytest.raises((ValueError, KeyError)):
        seconds(text)


@pytest.mark.parametrize("output, expected", [
    # a focused profile: the focused samples, then the whole profile's
    ("File: kube-apiserver\nActive filters:\n   focus=StatusREST\n"
     "Showing nodes accounting for 3s, 7.48% of 40.12s total\n      flat  flat%", (3.0, 40.12)),
    ("Showing nodes accounting for 650ms, 1.62% of 1.50mins total\n", (0.65, 90.0)),
    ("Showing nodes accounting for 0, 0% of 0 total\n", (0.0, 0.0)),
    # nothing matched the focus: pprof prints no such line
    ("File: kube-scheduler\nType: cpu\n", (0.0, 0.0)),
])
def test_focused_and_whole_seconds_come_from_the_header(output, expected):
    assert focused_seconds(output) == pytest.approx(expected)
