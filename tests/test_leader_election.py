"""Leader election's rules (tfop/kube/lease.py) as tables, and the supervisor and probes on a real loop."""
import asyncio


import pytest

from tfop.kube import lease
from tfop.kube.health import parse_bind_address, verdict
from tfop.kube.lease import LeaseRecord, LeaseTiming
from tfop.kube.supervisor import VitalTaskDied, first_of

T = LeaseTiming()  # 15 s lease, 10 s renew deadline, 2 s retry
NOW = "2026-11-23T00:00:10.000000Z"
THEIRS = LeaseRecord("b_2", 15, "t0", "t0", 3)
MINE = LeaseRecord("a_1", 15, "t0", "t0", 4)

# (case, current record, observed at, now, expected record or None)
CLAIMS = [
    ("no Lease yet: create it, first transition 0", None, 0.0, 100.0, LeaseRecord("a_1", 15, NOW, NOW, 0)),
    ("held by another, renewed 14.9 s ago by our clock: wait", THEIRS, 85.1, 100.0, None),
    ("held by another, unchanged for 15 s: take over, one more transition", THEIRS, 85.0, 100.0,
     LeaseRecord("a_1", 15, NOW, NOW, 4)),
    ("released (no holder): take it at once", LeaseRecord("", 1, "t0", "t0", 3), 99.9, 100.0,
     LeaseRecord("a_1", 15, NOW, NOW, 4)),
    ("ours: renew, keeping acquireTime and transitions", MINE, 99.0, 100.0, LeaseRecord("a_1", 15, "t0", NOW, 4)),
    ("another holder's own duration counts, not ours", LeaseRecord("b_2", 60, "t0", "t0", 0), 50.0, 100.0, None),
]


@pytest.mark.parametrize("case,current,observed_at,now,expected", CLAIMS, ids=[c[0] for c in CLAIMS])
def test_claim(case, current, observed_at, now, expected):
    assert lease.claim(current, "a_1", observed_at, now, T, NOW) == expected


# (renewed at, now, may write?)
WRITES = [(None, 0.0, False), (100.0, 100.0, True), (100.0, 109.99, True), (100.0, 110.0, False)]


@pytest.mark.parametrize("renewed_at,now,expected", WRITES)
def test_a_leader_writes_only_within_the_renew_deadline(renewed_at, now, expected):
    assert lease.may_write(renewed_at, now, T) is expected


def test_the_deadline_ends_writing_before_a_standby_may_take_over():
    """Renewal sent at 100 (so observed by a standby at >= 100): the leader stops before it may take over."""
    renewed_at = 100.0
    last_write = max(t / 100 for t in range(10000, 12000) if lease.may_write(renewed_at, t / 100, T))
    first_takeover = min(t / 100 for t in range(10000, 12000)
                         if lease.claim(MINE, "b_2", renewed_at, t / 100, T, NOW) is not None)
    assert last_write < first_takeover - 4.9


def test_released_record_has_no_holder_and_keeps_the_count():
    assert lease.released(MINE, NOW) == LeaseRecord("", 1, NOW, NOW, 4)


def test_record_round_trips_through_a_lease_object():
    obj = {"spec": MINE.spec()}
    assert LeaseRecord.of(obj) == MINE
    assert LeaseRecord.of({}) == LeaseRecord("", 0, None, None, 0)


TIMINGS = [
    (LeaseTiming(15, 10, 2), None),
    (LeaseTiming(10, 10, 2), "--leader-elect-lease-duration must be longer than --leader-elect-renew-deadline"),
    (LeaseTiming(15, 2.2, 2), "--leader-elect-renew-deadline must be longer than 1.2 x --leader-elect-retry-period"),
    (LeaseTiming(15, 10, 0), "--leader-elect-retry-period must be positive"),
]


@pytest.mark.parametrize("timing,problem", TIMINGS)
def test_timing_problems(timing, problem):
    assert timing.problem() == problem


ADDRESSES = [(":8081", ("0.0.0.0", 8081)), ("127.0.0.1:9000", ("127.0.0.1", 9000)), ("[::1]:80", ("::1", 80)),
             ("0", None), ("", None)]


@pytest.mark.parametrize("address,expected", ADDRESSES)
def test_bind_address(address, expected):
    assert parse_bind_address(address) == expected


@pytest.mark.parametrize("address", ["8081", ":http", "host:0", ":70000"])
def test_bad_bind_address(address):
    with pytest.raises(ValueError, match="is not"):
        parse_bind_address(address)


def test_verdict_lists_every_failing_check():
    def broken():
        raise RuntimeError("boom")
    assert verdict({"a": lambda: None}) == (200, "ok\n")
    assert verdict({"a": lambda: "caches not synced yet", "b": lambda: None, "c": broken}) == (
        500, "a: caches not synced yet\nc: check failed: RuntimeError: boom\n")


def test_a_vital_task_that_dies_ends_the_wait_and_is_named():
    async def main():
        async def dies():
            await asyncio.sleep(0.01)
            raise KeyError("informer bug")
        vital = {"informer pods": asyncio.create_task(dies())}
        await first_of(asyncio.sleep(5), vital)

    with pytest.raises(VitalTaskDied, match=r"informer pods stopped \(KeyError: 'informer bug'\)"):
        asyncio.run(asyncio.wait_for(main(), 2))


def test_a_vital_task_that_returns_is_a_death_too():
    async def main():
        async def returns():
            return None
        await first_of(asyncio.sleep(5), {"controller": asyncio.create_task(returns())})

    with pytest.raises(VitalTaskDied, match=r"controller stopped \(it returned\)"):
        asyncio.run(asyncio.wait_for(main(), 2))


def test_vital_tasks_may_end_once_stopping():
    async def main():
        stopping = asyncio.Event()

        async def stop_soon():
            await asyncio.sleep(0.02)
            stopping.set()
            worker.cancel()
            await asyncio.sleep(0.02)
            return "stopped cleanly"
        worker = asyncio.create_task(asyncio.sleep(5))
        return await first_of(stop_soon(), {"controller": worker}, stopping)

    assert asyncio.run(asyncio.wait_for(main(), 2)) == "stopped cleanly"
