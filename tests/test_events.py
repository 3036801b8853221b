"""What the event recorder remembers: the per-job token bucket, the LRU of posted Events, and which
Events of a batch are written (tfop/kube/events.py; the writes are tested in e2e/tests/test_events.py)."""
import pytest

from tfop.core.plan import Event
from tfop.kube.events import (CACHE_ENTRIES, SPAM_BURST, SPAM_REFILL_SECONDS, EventBook, EventKey, Lru,
                                 Posted, TokenBucket)


def test_client_go_sizes():
    assert (CACHE_ENTRIES, SPAM_BURST, SPAM_REFILL_SECONDS) == (4096, 25, 300.0)


# (why, times of the takes, burst, refill seconds, expected answers)
BUCKET_CASES = [
    ("a full bucket gives its burst at once, then nothing", [0.0] * 4, 3, 300.0, [True, True, True, False]),
    ("one token back after a refill period", [0.0, 0.0, 299.0, 300.0, 300.0], 2, 300.0,
     [True, True, False, True, False]),
    ("tokens come back in fractions that add up", [0.0, 150.0, 300.0], 1, 300.0, [True, False, True]),
    ("a long quiet time refills only up to the burst", [0.0, 0.0, 1e6, 1e6, 1e6], 2, 300.0,
     [True, True, True, True, False]),
    ("a clock going back refills nothing", [100.0, 50.0, 399.0, 400.0], 1, 300.0, [True, False, False, True]),
]


@pytest.mark.parametrize("why, times, burst, refill, expected", BUCKET_CASES, ids=[c[0] for c in BUCKET_CASES])
def test_token_bucket(why, times, burst, refill, expected):
    bucket = TokenBucket(float(burst), times[0])
    assert [bucket.take(t, burst, refill) for t in times] == expected


def test_lru_forgets_the_least_recently_used():
    cache: Lru[str, int] = Lru(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1  # now b is the oldest
    cache.put("c", 3)
    assert ("a" in cache, "b" in cache, "c" in cache, len(cache)) == (True, False, True, 2)
    cache.put("a", 4)  # a replaced value is not a new entry
    assert (cache.get("a"), len(cache)) == (4, 2)


FAILED = Event("Warning", "BackoffLimitExceeded", "job has failed")
RESTART = Event("Normal", "Restarting", "restarting worker-0")
OTHER = Event("Normal", "Restarting", "restarting worker-1")


def key(uid, event):
    return EventKey(uid, event.type, event.reason, event.message)


# (why, burst, batches of (time, uid, events), expected answers: (admitted per key, dropped) per batch)
ADMIT_CASES = [
    ("identical Events of a batch are one write", 25, [(0.0, "u", [RESTART, RESTART, RESTART])],
     [({key("u", RESTART): 3}, 0)]),
    ("another message is another Event, in the order seen", 25, [(0.0, "u", [OTHER, RESTART, OTHER])],
     [({key("u", OTHER): 2, key("u", RESTART): 1}, 0)]),
    ("30 at once: the burst is written, the rest dropped", 25, [(0.0, "u", [RESTART] * 30)],
     [({key("u", RESTART): 25}, 5)]),
    ("the bucket is per job", 2, [(0.0, "u", [FAILED] * 3), (0.0, "v", [FAILED] * 2)],
     [({key("u", FAILED): 2}, 1), ({key("v", FAILED): 2}, 0)]),
    ("a spent job gets one Event back every 5 minutes", 1,
     [(0.0, "u", [FAILED]), (60.0, "u", [FAILED]), (300.0, "u", [FAILED, FAILED])],
     [({key("u", FAILED): 1}, 0), ({}, 1), ({key("u", FAILED): 1}, 1)]),
    ("no Events, nothing taken", 1, [(0.0, "u", []), (0.0, "u", [FAILED])], [({}, 0), ({key("u", FAILED): 1}, 0)]),
]


@pytest.mark.parametrize("why, burst, batches, expected", ADMIT_CASES, ids=[c[0] for c in ADMIT_CASES])
def test_admit(why, burst, batches, expected):
    now = [0.0]
    book = EventBook(clock=lambda: now[0], burst=burst)
    answers = []
    for at, uid, events in batches:
        now[0] = at
        admitted, dropped = book.admit(uid, events)
        answers.append((admitted, dropped))
        assert list(admitted) == list(expected[len(answers) - 1][0])  # the order of the writes
    assert answers == expected


def test_thirty_posts_in_a_minute_count_at_most_the_burst():
    now = [0.0]
    book = EventBook(clock=lambda: now[0])
    written = 0
    for second in range(30):
        now[0] = second * 2.0
        written += sum(book.admit("u", [FAILED])[0].values())
    assert written == SPAM_BURST


def test_book_remembers_posted_events_within_its_bound():
    book = EventBook(entries=2)
    first, second, third = key("u", FAILED), key("u", RESTART), key("u", OTHER)
    book.remember(first, Posted("j.1", 1))
    book.remember(second, Posted("j.2", 1))
    book.remember(first, Posted("j.1", 2))
    book.remember(third, Posted("j.3", 1))
    assert [book.last_posted(k) for k in (first, second, third)] == [Posted("j.1", 2), None, Posted("j.3", 1)]


def test_forgotten_job_starts_with_a_full_bucket():
    book = EventBook(clock=lambda: 0.0, entries=1, burst=1)
    assert book.admit("u", [FAILED, FAILED])[1] == 1
    book.admit("v", [FAILED])  # u's bucket is evicted, as client-go's LRU would
    assert book.admit("u", [FAILED])[1] == 0
