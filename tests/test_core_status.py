"""Conditions: replacement rules, timestamps, order; pod readers."""
from datetime import timedelta

import pytest

from core_fixtures import NOW, NOW_S, cond, model, pod, tfjob
from tfop.api import pods as P
from tfop.api import conditions as S

T0 = "2024-05-01T11:00:00Z"


def _set(conditions, ctype, value=True, reason=None, message="m"):
    return S.set_condition(conditions, ctype, value, reason or S.REASON[ctype], message, NOW)


def _short(conditions):
    return [(c["type"], c["status"], c["lastTransitionTime"]) for c in conditions]


# (description, before, (type, status, message), after as (type, status, lastTransitionTime))
TABLE = [
    ("first condition", [], (S.CREATED, True, "m"), [("Created", "True", NOW_S)]),
    ("Running replaces Restarting", [cond(S.CREATED), cond(S.RESTARTING)], (S.RUNNING, True, "m"),
     [("Created", "True", T0), ("Running", "True", NOW_S)]),
    ("Restarting replaces Running", [cond(S.CREATED), cond(S.RUNNING)], (S.RESTARTING, True, "m"),
     [("Created", "True", T0), ("Restarting", "True", NOW_S)]),
    ("Succeeded flips Running to False", [cond(S.CREATED), cond(S.RUNNING)], (S.SUCCEEDED, True, "m"),
     [("Created", "True", T0), ("Running", "False", NOW_S), ("Succeeded", "True", NOW_S)]),
    ("Failed flips Running to False", [cond(S.CREATED), cond(S.RUNNING)], (S.FAILED, True, "m"),
     [("Created", "True", T0), ("Running", "False", NOW_S), ("Failed", "True", NOW_S)]),
    ("Failed flips Restarting to False", [cond(S.CREATED), cond(S.RESTARTING)], (S.FAILED, True, "m"),
     [("Created", "True", T0), ("Restarting", "False", NOW_S), ("Failed", "True", NOW_S)]),
    ("Succeeded flips Restarting to False", [cond(S.CREATED), cond(S.RESTARTING)], (S.SUCCEEDED, True, "m"),
     [("Created", "True", T0), ("Restarting", "False", NOW_S), ("Succeeded", "True", NOW_S)]),
    ("Failed keeps a False Running as it was", [cond(S.CREATED), cond(S.RUNNING, "False")], (S.FAILED, True, "m"),
     [("Created", "True", T0), ("Running", "False", T0), ("Failed", "True", NOW_S)]),
    ("same status, new message: transition time kept, moved last",
     [cond(S.RUNNING, message="old"), cond(S.CREATED)], (S.RUNNING, True, "new"),
     [("Created", "True", T0), ("Running", "True", T0)]),
    ("status flips: new transition time", [cond(S.CREATED), cond(S.SUSPENDED)], (S.SUSPENDED, False, "m"),
     [("Created", "True", T0), ("Suspended", "False", NOW_S)]),
]


@pytest.mark.parametrize("desc,before,change,after", TABLE, ids=[r[0] for r in TABLE])
def test_set_condition(desc, before, change, after):
    ctype, value, message = change
    result = _set(before, ctype, value, message=message)
    assert _short(result) == after
    assert result[-1]["type"] == ctype  # the newest condition is last
    assert result[-1]["lastUpdateTime"] == NOW_S
    assert result[-1]["reason"] == S.REASON[ctype]


def test_unchanged_condition_returns_same_list():
    before = [cond(S.CREATED), cond(S.RUNNING, message="m")]
    assert _set(before, S.RUNNING, True, message="m") is before


def test_input_not_mutated():
    before = [cond(S.CREATED), cond(S.RUNNING)]
    snapshot = [dict(c) for c in before]
    _set(before, S.FAILED)
    assert before == snapshot


def test_timestamps():
    assert S.timestamp(NOW) == NOW_S
    assert S.parse_time(NOW_S) == NOW
    assert S.parse_time(None) is None
    assert S.timestamp(NOW + timedelta(microseconds=999)) == NOW_S


@pytest.mark.parametrize("bad", ["2026-13-01T00:00:00Z", "2026-1-01T00:00:00Z", "2026-01-01T00:00:00.5Z",
                                 "2026-01-01 00:00:00Z", "2026-01-01T00:00:00", "2026-02-30T00:00:00Z", "x"])
def test_parse_time_refuses_what_the_apiserver_never_writes(bad):
    with pytest.raises(ValueError):
        S.parse_time(bad)


def test_finished():
    assert S.is_finished([cond(S.SUCCEEDED)])
    assert S.is_finished([cond(S.FAILED)])
    assert not S.is_finished([cond(S.FAILED, "False"), cond(S.RUNNING)])


JOB = model(tfjob({"Worker": 1}))

# (description, pod kwargs, phase, active, exit code, restarts, ready)
POD_TABLE = [
    ("running", dict(phase="Running"), "Running", True, None, 0, True),
    ("pending", dict(phase="Pending"), "Pending", True, None, 0, False),
    ("terminating", dict(phase="Running", deleting=True), "Running", False, None, 0, True),
    ("succeeded", dict(phase="Succeeded", exit_code=0), "Succeeded", False, 0, 0, False),
    ("failed 137 with restarts", dict(phase="Failed", exit_code=137, restarts=3), "Failed", False, 137, 3, False),
    ("evicted: no exit code", dict(phase="Failed", reason="Evicted"), "Failed", False, None, 0, False),
    ("running, not ready", dict(phase="Running", ready=False), "Running", True, None, 0, False),
]


@pytest.mark.parametrize("desc,kwargs,phase,active,code,restarts,ready", POD_TABLE, ids=[r[0] for r in POD_TABLE])
def test_pod_readers(desc, kwargs, phase, active, code, restarts, ready):
    p = pod(JOB, "Worker", 0, **kwargs)
    assert (P.phase(p), P.is_active(p), P.exit_code(p), P.restarts(p), P.is_ready(p)) == (
        phase, active, code, restarts, ready)


def test_pod_without_status_is_pending():
    p = pod(JOB, "Worker", 0)
    del p["status"]
    assert P.phase(p) == "Pending" and P.is_active(p) and P.exit_code(p) is None and P.restarts(p) == 0


def test_exit_code_from_last_state():
    p = pod(JOB, "Worker", 0)
    p["status"]["containerStatuses"][0] = {"name": "tensorflow", "restartCount": 1,
                                           "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                                           "lastState": {"terminated": {"exitCode": 2}}}
    assert P.exit_code(p) == 2


def test_failure_summary():
    assert P.failure_summary(pod(JOB, "Worker", 0, phase="Failed", exit_code=1)) == "tf-job-worker-0 exited with code 1"
    assert P.failure_summary(pod(JOB, "Worker", 0, phase="Failed", reason="Evicted")) == "tf-job-worker-0 failed (Evicted)"


def test_timestamp_ceil_never_earlier_than_now():
    from datetime import datetime, timezone
    from tfop.api import conditions as S
    exact = datetime(2026, 1, 1, 0, 0, 5, tzinfo=timezone.utc)
    assert S.timestamp_ceil(exact) == "2026-01-01T00:00:05Z"
    assert S.timestamp_ceil(exact.replace(microsecond=1)) == "2026-01-01T00:00:06Z"


# -- status.succeededIndexes: the compact text of a set of indices ------------------------------------
from tfop.core.indexes import format_indexes, parse_indexes  # noqa: E402

# (indices, text)
INDEX_TEXT = [
    (set(), ""),
    ({0}, "0"),
    ({0, 1}, "0-1"),
    ({0, 1, 2, 3, 7}, "0-3,7"),
    ({1, 3, 5}, "1,3,5"),
    ({4, 5, 6, 9, 10, 12}, "4-6,9-10,12"),
    (set(range(5000)), "0-4999"),
]


@pytest.mark.parametrize("indices,text", INDEX_TEXT, ids=[t or "empty" for _, t in INDEX_TEXT])
def test_indexes_round_trip(indices, text):
    assert format_indexes(indices) == text
    assert parse_indexes(text, 5000) == frozenset(indices)


# (text, replicas now, indices read)
PARSE_TABLE = [
    ("0-3,7", 5, {0, 1, 2, 3}),            # past the replicas: dropped (scaled down)
    ("0-999999999999", 3, {0, 1, 2}),      # bounded by the replicas, whatever the text says
    (" 2 , 0", 4, {0, 2}),
    ("x,-1,3-,1-a,,5", 10, {5}),           # malformed parts skipped
    ("3-1", 10, set()),
    ("0-3", 0, set()),
    (None, 3, set()),
    (7, 3, set()),
]


@pytest.mark.parametrize("text,below,expected", PARSE_TABLE, ids=[repr(r[0]) for r in PARSE_TABLE])
def test_parse_indexes(text, below, expected):
    assert parse_indexes(text, below) == frozenset(expected)
