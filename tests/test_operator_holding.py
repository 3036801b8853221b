"""Which status changes the controller may hold back, and for how long."""
import pytest

from tfop.runtime.holding import PARTLY_READY_HOLD, PROGRESS_HOLD, STARTING_HOLD, hold_limits


def cond(ctype, status="True"):
    return {"type": ctype, "status": status, "reason": "r", "message": "m"}


CREATED = [cond("Created")]
RUNNING = [cond("Created"), cond("Running")]


def st(conditions=CREATED, gang=None, **extra):
    status = {"conditions": conditions, "startTime": "2026-01-01T00:00:00Z", **extra}
    if gang:
        status["gang"] = {"backend": "volcano", "group": "j", **gang}
    return status


WAIT = {"reason": "PodGroupPending", "phase": "Pending", "message": "PodGroup is Pending"}
INQUEUE = {"reason": "Pending", "phase": "Inqueue", "message": "PodGroup is Inqueue; 0/5 running"}
STUCK = {"reason": "NotEnoughResources", "phase": "Pending", "message": "5/5 tasks unschedulable"}

# (written, new, limits)
CASES = [
    ("a gang's ordinary steps to start", st(gang=WAIT), st(gang=INQUEUE), STARTING_HOLD),
    ("the same step, a new message", st(gang=WAIT), st(gang={**WAIT, "message": "x"}), STARTING_HOLD),
    ("the scheduler says why it cannot place the gang", st(gang=WAIT), st(gang=STUCK), PROGRESS_HOLD),
    ("the gang runs", st(gang=INQUEUE), st(RUNNING, gang={"group": "j"}), PROGRESS_HOLD),
    ("some members run, the rest start", st(gang=INQUEUE),
     st(RUNNING, gang={**INQUEUE, "message": "3/5 gang members running"}), STARTING_HOLD),
    ("no gang: replica counts", st(), st(replicaStatuses={"Worker": {"active": 2}}), PROGRESS_HOLD),
    ("no gang: Running", st(), st(RUNNING), PROGRESS_HOLD),
    ("no gang: the first pods ready, the rest on their way", st(ready="0/5"),
     st(RUNNING, ready="2/5", replicaStatuses={"PS": {"active": 1}, "Worker": {"active": 1}}), PARTLY_READY_HOLD),
    ("no gang: every pod ready", st(RUNNING, ready="2/5"), st(RUNNING, ready="5/5"), PROGRESS_HOLD),
    ("no gang: none ready yet", st(ready="0/5"), st(ready="0/5", message="x"), PROGRESS_HOLD),
    ("a worker finished, the others still run", st(RUNNING, ready="5/5"),
     st(RUNNING, ready="4/5", replicaStatuses={"Worker": {"active": 3, "succeeded": 1}}), PROGRESS_HOLD),
    ("a worker failed and waits its restart", st(RUNNING, ready="5/5"),
     st(RUNNING, ready="4/5", replicaStatuses={"Worker": {"active": 3, "failed": 1}}), PROGRESS_HOLD),
    ("ready not a count", st(ready="0/5"), st(RUNNING, ready="x/5"), PROGRESS_HOLD),
    ("every pod ready, the gang whole", st(ready="0/5", gang=WAIT), st(RUNNING, ready="5/5", gang={"group": "j"}),
     PROGRESS_HOLD),
    ("the first gang state after one without", st(), st(gang=WAIT), PROGRESS_HOLD),
    ("finished", st(RUNNING), st(RUNNING + [cond("Succeeded")]), None),
    ("restart count", st(RUNNING), st(RUNNING, restartCount=1), None),
    ("startTime", {"conditions": CREATED}, st(), None),
    ("Running taken back (restarting)", st(RUNNING), st([cond("Created"), cond("Running", "False"),
                                                          cond("Restarting")]), None),
]


@pytest.mark.parametrize("why, written, new, limits", CASES, ids=[c[0] for c in CASES])
def test_hold_limits(why, written, new, limits):
    assert hold_limits(written, new) == limits


def test_starting_hold_is_longer():
    assert STARTING_HOLD[0] > PROGRESS_HOLD[1]


def test_a_partly_ready_job_waits_for_the_rest_longer_than_a_progress_change():
    assert PARTLY_READY_HOLD[1] > PROGRESS_HOLD[1] and PARTLY_READY_HOLD[1] < STARTING_HOLD[1]
