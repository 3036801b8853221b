"""The informers' cache: it only moves forward, tells each deletion once, relists and backs off as it should.

Driven directly (upsert, remove, handle_event, absorb/sweep), in the exact orders the watch and our own
requests' answers arrive in on a real cluster; the listing is fed scripted pages.
"""
import asyncio

import pytest

from tfop.api.constants import LABEL_JOB
from tfop.kube.client import ApiError, KubeClient, paginate
from tfop.runtime.trim import keep_whole, trim_child
from tfop.kube.informer import Backoff, Informer, Tombstones
from tfop.kube.versions import later, newer
from functools import partial

from tfop.gang.registry import load_backend
from tfop.runtime.jobs import JobRecord, group_news_unread, label_key, owner_key

NS, JOB = "ns", ("ns", "job")


def pod(name="job-worker-1", rv="10", uid="old", deleting=False, phase="Running", ns=NS, job="job", with_rv=True):
    meta = {"name": name, "namespace": ns, "uid": uid, "labels": {LABEL_JOB: job}}
    if with_rv:
        meta["resourceVersion"] = rv
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": [{"name": "tensorflow"}]}, "status": {"phase": phase}}


class Recorder:
    """What an informer told: woken jobs, gone pods, events."""

    def __init__(self):
        self.woken, self.gone, self.events = [], [], []

    def informer(self, client=None, **options):
        options.setdefault("on_gone", lambda key, name, _last: self.gone.append((key, name)))
        options.setdefault("key_of", label_key)
        options.setdefault("trim", trim_child)
        return Informer(client, "v1", "pods", "Pod", [NS], label_selector="sel", on_change=self.woken.append,
                        **options)

    def event(self, kind, obj):
        self.events.append((kind, obj["metadata"]["name"], obj["metadata"].get("resourceVersion")))


def watch(informer, kind, obj, version="1"):
    return informer.handle_event({"type": kind, "object": obj}, version)


def names(informer):
    return sorted(p["metadata"]["name"] for p in informer.for_key(JOB))


def test_delete_answer_without_version_does_not_bring_a_deleted_pod_back():
    """The lost re-create, as traced on the e2e cluster: the worker exits 137, tfop deletes it; kwok (the
    kubelet's stand-in) finishes the deletion first, so the watch brings DELETED before our DELETE returns,
    and the apiserver answers our DELETE with the pod as it was, deletionTimestamp set and no
    resourceVersion. That answer must not put the deleted pod back: a terminating worker-1 in the cache
    stops every later pass from creating it again."""
    rec = Recorder()
    inf = rec.informer()
    watch(inf, "ADDED", pod("job-worker-0", rv="5", uid="w0"))
    watch(inf, "MODIFIED", pod(rv="793", phase="Failed"))
    watch(inf, "MODIFIED", pod(rv="796", phase="Failed", deleting=True))  # our DELETE, first half
    watch(inf, "DELETED", pod(rv="797", phase="Failed", deleting=True))  # kwok's DELETE finished it
    inf.upsert(pod(phase="Failed", deleting=True, with_rv=False))  # our DELETE's answer (apply.py upserts it)
    assert inf.get(NS, "job-worker-1") is None
    assert names(inf) == ["job-worker-0"]
    assert rec.gone == [(JOB, "job-worker-1")]
    # The next pass creates it again: its answer and then its ADDED keep the new pod.
    inf.upsert(pod(rv="800", uid="new", phase="Pending"))
    watch(inf, "ADDED", pod(rv="800", uid="new", phase="Pending"))
    assert inf.get(NS, "job-worker-1")["metadata"]["uid"] == "new"


def test_delete_answer_without_version_before_the_watch_marks_the_pod_terminating():
    """The same answer coming before the watch's events: the pod is known to be going (no second restart
    of it by a pass in between), its version stays, and the watch's events follow as ever."""
    rec = Recorder()
    inf = rec.informer()
    watch(inf, "MODIFIED", pod(rv="793", phase="Failed"))
    inf.upsert(pod(phase="Failed", deleting=True, with_rv=False))
    kept = inf.get(NS, "job-worker-1")
    assert kept["metadata"]["deletionTimestamp"] and kept["metadata"]["resourceVersion"] == "793"
    inf.upsert(pod(uid="other", deleting=True, with_rv=False))  # another object's copy: tells nothing
    watch(inf, "MODIFIED", pod(rv="796", phase="Failed", deleting=True))
    watch(inf, "DELETED", pod(rv="797", phase="Failed", deleting=True))
    assert inf.get(NS, "job-worker-1") is None and rec.gone == [(JOB, "job-worker-1")]


def test_late_deleted_of_the_old_pod_keeps_the_new_one():
    """Our create's answer for the new pod comes before the watch's DELETED of the old one (same name)."""
    rec = Recorder()
    inf = rec.informer()
    watch(inf, "MODIFIED", pod(rv="10", phase="Failed"))
    inf.upsert(pod(rv="20", uid="new", phase="Pending"))  # new incarnation, seen first through our create
    assert rec.gone == [(JOB, "job-worker-1")]  # the old one is gone, told once
    watch(inf, "MODIFIED", pod(rv="12", phase="Failed", deleting=True))
    watch(inf, "DELETED", pod(rv="13", phase="Failed", deleting=True))
    watch(inf, "ADDED", pod(rv="20", uid="new", phase="Pending"))
    assert inf.get(NS, "job-worker-1")["metadata"]["uid"] == "new"
    assert rec.gone == [(JOB, "job-worker-1")]


def test_late_deleted_without_uids_keeps_the_newer_version():
    rec = Recorder()
    inf = rec.informer()
    inf.upsert(pod(rv="20", uid=""))
    watch(inf, "DELETED", pod(rv="13", uid=""))
    assert inf.get(NS, "job-worker-1")["metadata"]["resourceVersion"] == "20"


@pytest.mark.parametrize("answer_first", [True, False])
def test_a_deletion_is_told_once_whichever_comes_first(answer_first):
    """A service is gone at once: our DELETE's answer removes it, and so does the watch's DELETED."""
    rec = Recorder()
    inf = rec.informer()
    watch(inf, "ADDED", pod(rv="10"))
    steps = [lambda: inf.remove(pod(rv="11")), lambda: watch(inf, "DELETED", pod(rv="11"))]
    for step in steps if answer_first else reversed(steps):
        step()
    assert inf.get(NS, "job-worker-1") is None
    assert rec.gone == [(JOB, "job-worker-1")]


@pytest.mark.parametrize("late", [pod(rv="10"), pod(rv="11", deleting=True), pod(with_rv=False, deleting=True)],
                         ids=["create-answer", "delete-answer", "no-version"])
def test_a_late_answer_does_not_resurrect_a_deleted_object(late):
    rec = Recorder()
    inf = rec.informer()
    watch(inf, "ADDED", pod(rv="10"))
    watch(inf, "DELETED", pod(rv="12"))
    inf.upsert(late)
    assert inf.get(NS, "job-worker-1") is None


def test_object_without_version_is_never_cached():
    rec = Recorder()
    inf = rec.informer()
    inf.upsert(pod(with_rv=False))
    assert inf.objects == {} and rec.woken == []
    assert not newer(pod(with_rv=False), pod(rv="1"))
    assert newer(pod(rv="2"), pod(rv="1")) and not newer(pod(rv="1"), pod(rv="2"))
    assert newer(pod(rv="b"), pod(rv="a"))  # opaque versions cannot be compared: take the new copy


@pytest.mark.parametrize("candidate, current, is_newer, is_later", [
    (pod(rv="2"), None, True, True),
    (pod(rv="2"), pod(rv="1"), True, True),
    (pod(rv="2"), pod(rv="2"), True, False),  # the same version again: not later
    (pod(rv="1"), pod(rv="2"), False, False),
    (pod(with_rv=False), pod(rv="1"), False, False),
    (pod(rv="b"), pod(rv="a"), True, True),  # opaque: the new copy is taken
])
def test_newer_and_later(candidate, current, is_newer, is_later):
    assert (newer(candidate, current), later(candidate, current)) == (is_newer, is_later)


def test_same_version_again_changes_nothing():
    rec = Recorder()
    inf = rec.informer(on_event=rec.event)
    inf.upsert(pod(rv="10"))
    watch(inf, "ADDED", pod(rv="10"))
    assert rec.events == [("ADDED", "job-worker-1", "10")]
    assert rec.woken == [JOB]


def test_watch_events_error_and_bookmark():
    rec = Recorder()
    inf = rec.informer()
    assert inf.handle_event({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "42"}}}, "1") == "42"
    assert inf.handle_event({"type": "ERROR", "object": {"code": 410}}, "42") is None
    assert watch(inf, "ADDED", pod(rv="43"), "42") == "43"
    assert inf.objects and rec.woken == [JOB]


# -- relists ------------------------------------------------------------------------
def test_relist_tells_the_deletions_it_finds_like_a_watch():
    rec = Recorder()
    inf = rec.informer(on_event=rec.event)
    for obj in (pod("job-worker-0", rv="5", uid="w0"), pod(rv="6"), pod("other-ns", rv="7", ns="elsewhere")):
        inf.upsert(obj)
    inf.upsert(pod("job-worker-2", rv="30", uid="w2"))  # our create's answer, newer than the listing
    for told in (rec.gone, rec.woken, rec.events):
        told.clear()
    listed = inf.absorb([pod("job-worker-0", rv="5", uid="w0")])  # worker-1 was deleted while the watch was down
    inf.sweep(NS, listed, "20")
    assert names(inf) == ["job-worker-0", "job-worker-2"]
    assert inf.get("elsewhere", "other-ns") is not None  # another namespace's listing decides about it
    assert rec.gone == [(JOB, "job-worker-1")] and rec.woken == [JOB]
    assert rec.events == [("DELETED", "job-worker-1", "6")]
    watch(inf, "ADDED", pod(rv="6"))  # a late copy of it stays out
    assert inf.get(NS, "job-worker-1") is None


def test_relist_finding_a_new_object_of_a_known_name_tells_both():
    rec = Recorder()
    inf = rec.informer(on_event=rec.event)
    inf.upsert(pod(rv="6"))
    inf.sweep(NS, inf.absorb([pod(rv="15", uid="new")]), "20")
    assert rec.events == [("ADDED", "job-worker-1", "6"), ("DELETED", "job-worker-1", "6"),
                          ("ADDED", "job-worker-1", "15")]
    assert rec.gone == [(JOB, "job-worker-1")]
    watch(inf, "DELETED", pod(rv="9"))  # the old one's DELETED, if it comes after all: told already
    assert rec.gone == [(JOB, "job-worker-1")] and inf.get(NS, "job-worker-1")["metadata"]["uid"] == "new"


class ScriptedPages(KubeClient):
    """The pages a LIST would answer, from a script: a page (dict) or an ApiError per request."""

    def __init__(self, script):
        super().__init__(None)
        self.script, self.tokens = list(script), []

    def list_pages(self, api_version, plural, namespace=None, label_selector=None, limit=500, field_selector=None):
        async def fetch(token):
            self.tokens.append(token)
            step = self.script.pop(0)
            if isinstance(step, Exception):
                raise step
            return step
        return paginate(fetch)


def page(items, version, token=None):
    return {"metadata": {"resourceVersion": version, "continue": token}, "items": items}


GONE = ApiError(410, {"message": "continue token expired"}, "GET", "/api/v1/pods")


def test_relist_started_over_forgets_the_abandoned_listing():
    """worker-1 was on the first page of a listing whose continue token expired; the listing started
    over no longer has it: it is gone, and told."""
    rec = Recorder()
    client = ScriptedPages([page([pod("job-worker-0", rv="5", uid="w0"), pod(rv="6")], "20", "t1"), GONE,
                            page([pod("job-worker-0", rv="5", uid="w0")], "25", "t2"), page([], "25")])
    inf = rec.informer(client=client)
    version = asyncio.run(inf._relist(NS))
    assert version == "25" and client.tokens == [None, "t1", None, "t2"]
    assert names(inf) == ["job-worker-0"] and rec.gone == [(JOB, "job-worker-1")]


def test_paginate_passes_tokens_and_gives_up_on_other_errors():
    async def collect(script, restarts=3):
        tokens = []

        async def fetch(token):
            tokens.append(token)
            step = script.pop(0)
            if isinstance(step, Exception):
                raise step
            return step
        pages = [(p["metadata"]["resourceVersion"], first) async for p, first in paginate(fetch, restarts)]
        return pages, tokens

    assert asyncio.run(collect([page([], "1", "a"), page([], "1", "b"), page([], "1")])) == (
        [("1", True), ("1", False), ("1", False)], [None, "a", "b"])
    assert asyncio.run(collect([page([], "1", "a"), GONE, page([], "2")])) == (
        [("1", True), ("2", True)], [None, "a", None])
    with pytest.raises(ApiError):  # 410 without a continue token: not an expired listing
        asyncio.run(collect([GONE]))
    with pytest.raises(ApiError):  # restarts used up
        asyncio.run(collect([page([], "1", "a"), GONE, page([], "2", "b"), GONE], restarts=1))
    with pytest.raises(ApiError):
        asyncio.run(collect([page([], "1", "a"), ApiError(500, "boom", "GET", "/")]))


def test_list_gathers_the_pages_of_the_last_listing():
    client = ScriptedPages([page([pod(rv="6")], "20", "t1"), GONE, page([pod("a", rv="7")], "25", "t2"),
                            page([pod("b", rv="8")], "25")])
    listing = asyncio.run(client.list("v1", "pods", NS))
    assert [p["metadata"]["name"] for p in listing["items"]] == ["a", "b"]
    assert listing["metadata"] == {"resourceVersion": "25"}


# -- tombstones and backoff ---------------------------------------------------------------
class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


class ScriptedWatches(KubeClient):
    """What each WATCH brings, from a script: (events, seconds it lasts) per request."""

    def __init__(self, script, clock):
        super().__init__(None)
        self.script, self.clock, self.started_from = list(script), clock, []

    async def watch(self, api_version, plural, namespace=None, resource_version="", label_selector=None, **_):
        self.started_from.append(resource_version)
        events, seconds = self.script.pop(0)
        self.clock.now += seconds
        for kind, rv in events:
            yield {"type": kind, "object": pod(rv=rv) if kind != "ERROR" else {"code": 410}}


SLOW_READER_CLOSED = ([("ADDED", "11"), ("MODIFIED", "12")], 0.2)  # the apiserver ended it, events came
NOTHING_AT_ONCE, NOTHING_FOR_MINUTES = ([], 0.1), ([], 290.0)


@pytest.mark.parametrize("script, started_from, why", [
    # a burst: the apiserver ends the watch of a reader that lags, again and again; each resumes
    ([SLOW_READER_CLOSED, ([("MODIFIED", "13")], 0.5), NOTHING_AT_ONCE], ["10", "12", "13"], "ended at once"),
    ([NOTHING_FOR_MINUTES, NOTHING_AT_ONCE], ["10", "10"], "ended at once"),  # timeoutSeconds, then broken
    ([SLOW_READER_CLOSED, ([("ERROR", "")], 0.0)], ["10", "12"], "expired"),  # 410 Gone: relist
])
def test_a_watch_is_resumed_unless_it_expired_or_ended_at_once_with_nothing(script, started_from, why):
    clock = Clock()
    client = ScriptedWatches(script, clock)
    inf = Recorder().informer(client=client, clock=clock)
    assert asyncio.run(inf._follow(NS, "10")) == why
    assert client.started_from == started_from and client.script == []


def test_tombstones_expire():
    clock = Clock()
    rec = Recorder()
    inf = rec.informer(clock=clock)
    watch(inf, "ADDED", pod(rv="10"))
    watch(inf, "DELETED", pod(rv="11"))
    clock.now = 299.0
    inf.upsert(pod(rv="10"))
    assert inf.get(NS, "job-worker-1") is None  # still stopped
    clock.now = 301.0
    assert inf.tombstones.get((NS, "job-worker-1")) is None
    assert len(inf.tombstones) == 0


def test_tombstones_are_bounded_and_pruned_as_they_come():
    clock = Clock()
    tombs = Tombstones(ttl=10.0, limit=100, clock=clock)
    for i in range(1000):
        clock.now = i * 0.001
        tombs.add(("ns", f"p{i}"), str(i), f"u{i}")
    assert len(tombs) == 100 and len(tombs._order) == 100
    assert tombs.get(("ns", "p0")) is None and tombs.get(("ns", "p999")).version == "999"
    for _ in range(500):  # the same name deleted again and again: one tombstone, a bounded queue
        tombs.add(("ns", "again"), "1", "u")
    assert len(tombs._order) <= 100 and tombs.get(("ns", "again")) is not None
    clock.now = 100.0
    tombs.add(("ns", "late"), "5", "u")  # adding prunes what expired, from the oldest
    assert len(tombs) == 1 and len(tombs._order) == 1


def test_backoff_doubles_to_the_longest_and_starts_over_after_a_healthy_watch():
    backoff = Backoff(rand=lambda: 0.5)  # no jitter
    assert [backoff.after(0.1) for _ in range(8)] == [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0]
    assert backoff.after(61.0) == 0.8
    assert backoff.after(5.0) == 1.6


@pytest.mark.parametrize("rand, factor", [(0.0, 0.8), (0.999999, 1.2)])
def test_backoff_jitter_is_twenty_percent(rand, factor):
    assert Backoff(rand=lambda: rand).after(0) == pytest.approx(0.8 * factor, rel=1e-5)


def test_a_new_version_that_changes_nothing_kept_moves_the_cache_and_wakes_no_job():
    """A kubelet's or scheduler's update of what the copy does not keep (here the pod's IP and a condition's
    probe time) cannot change a reconcile's decision: the version moves on, the job is not queued."""
    rec = Recorder()
    inf = rec.informer(on_event=rec.event)
    first = pod(rv="7")
    first["status"]["conditions"] = [{"type": "Ready", "status": "True", "lastProbeTime": "t1"}]
    watch(inf, "ADDED", first)
    heartbeat = pod(rv="8")
    heartbeat["status"].update(podIP="10.0.0.1", conditions=[{"type": "Ready", "status": "True",
                                                              "lastProbeTime": "t2"}])
    watch(inf, "MODIFIED", heartbeat)
    assert rec.woken == [JOB] and inf.get(NS, "job-worker-1")["metadata"]["resourceVersion"] == "8"
    assert rec.events[-1] == ("MODIFIED", "job-worker-1", "8")  # whoever watches every change still hears it
    watch(inf, "MODIFIED", pod(rv="9", phase="Succeeded"))
    assert rec.woken == [JOB, JOB]


# -- whole objects (TFJobs) -----------------------------------------------------------------
def test_whole_objects_and_every_change_told():
    rec = Recorder()
    inf = rec.informer(on_event=rec.event, trim=keep_whole, key_of=lambda o: (o["metadata"]["namespace"],
                                                                              o["metadata"]["name"]))
    job = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "spec": {"tfReplicaSpecs": {}}, "status": {},
           "metadata": {"name": "j", "namespace": NS, "uid": "u", "resourceVersion": "1",
                        "managedFields": [{"manager": "kubectl"}]}}
    watch(inf, "ADDED", job)
    changed = {**job, "status": {"replicaStatuses": {}}, "metadata": {**job["metadata"], "resourceVersion": "2"}}
    watch(inf, "MODIFIED", changed)
    watch(inf, "MODIFIED", job)  # stale: not a change
    watch(inf, "DELETED", {**job, "metadata": {**job["metadata"], "resourceVersion": "3"}})
    assert rec.events == [("ADDED", "j", "1"), ("MODIFIED", "j", "2"), ("DELETED", "j", "3")]
    assert rec.woken == [(NS, "j")] * 3


def test_children_stay_trimmed():
    rec = Recorder()
    inf = rec.informer()
    inf.upsert(pod(rv="1"))
    kept = inf.get(NS, "job-worker-1")
    assert "spec" not in kept and kept["status"] == {"phase": "Running"}


OWNER_KEYS = [
    ("tfop's label", {"metadata": {"namespace": "ml", "name": "a", "labels": {"training.kubeflow.org/job-name": "a"}}},
     ("ml", "a")),
    ("upstream's group: no label, controlled by the TFJob",
     {"metadata": {"namespace": "ml", "name": "b", "ownerReferences": [
         {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "name": "b", "uid": "u", "controller": True}]}},
     ("ml", "b")),
    ("owned, not controlled", {"metadata": {"namespace": "ml", "name": "c", "ownerReferences": [
        {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "name": "c", "uid": "u"}]}}, None),
    ("controlled by something else", {"metadata": {"namespace": "ml", "name": "d", "ownerReferences": [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "d", "uid": "u", "controller": True}]}}, None),
]


@pytest.mark.parametrize("case,obj,key", OWNER_KEYS, ids=[c[0] for c in OWNER_KEYS])
def test_owner_key(case, obj, key):
    from tfop.runtime.jobs import owner_key
    assert owner_key(obj) == key


def test_our_create_answer_is_kept_without_waking_its_job_and_the_watch_wakes_it_for_changes_only():
    """The pass that created a pod settles on it (tests/core_fixtures.assert_settles): its answer fills the
    cache quietly; the watch's ADDED at the same version says nothing new; a later change wakes the job."""
    rec = Recorder()
    inf = rec.informer()
    inf.upsert(pod(rv="7", phase="Pending"), tell=False)
    assert names(inf) == ["job-worker-1"] and rec.woken == []
    watch(inf, "ADDED", pod(rv="7", phase="Pending"))
    assert rec.woken == []
    watch(inf, "MODIFIED", pod(rv="8", phase="Running"))
    assert rec.woken == [JOB] and inf.for_key(JOB)[0]["status"]["phase"] == "Running"


def test_optional_informers_sharing_refusals_say_a_refusal_once_for_all(caplog):
    """Two informers of one purpose (the pods bound to nodes, by two selectors) refused the same list:
    one warning, not one each; a listing that works again lets the next refusal be said."""
    denied = ApiError(403, {"message": "pods is forbidden"}, "GET", "/api/v1/pods")

    class Refusing(KubeClient):
        def __init__(self):
            super().__init__(None)

        def list_pages(self, *_args, **_kwargs):
            async def fetch(_token):
                raise denied
            return paginate(fetch)

    said: set = set()
    informers = [Informer(Refusing(), "v1", "pods", "Pod", optional=True, refusals=said, field_selector=f)
                 for f in ("a!=", "b!=")]

    async def scenario():
        tasks = [asyncio.create_task(i.run()) for i in informers]
        await asyncio.sleep(0.2)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    with caplog.at_level("DEBUG", logger="tfop.informer"):
        asyncio.run(scenario())
    levels = [r.levelname for r in caplog.records if "cannot list pods" in r.getMessage()]
    assert sorted(levels) == ["DEBUG", "WARNING"] and all(i.synced.is_set() for i in informers)
    assert said == {(403, "pods", "all namespaces")}
    listing = Informer(ScriptedPages([page([], "5")]), "v1", "pods", "Pod", optional=True, refusals=said)
    asyncio.run(listing._relist(None))
    assert said == set()


def test_a_whole_gangs_group_counting_its_members_wakes_no_job():
    """The group informer's `quiet` (runtime.jobs.group_news_unread): once the job's last pass said the gang
    is whole (Plan.reads_group_status False), a status-only change of its group queues no pass; a change
    of its spec, metadata or existence still does, and every change does while the gang waits."""
    group = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
             "metadata": {"name": "job", "namespace": NS, "uid": "g", "resourceVersion": "1",
                          "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "name": "job",
                                               "controller": True, "uid": "j"}]},
             "spec": {"minMember": 3}, "status": {"phase": "Scheduled", "scheduled": 3}}
    record = JobRecord(body={"metadata": {"name": "job", "namespace": NS}})
    coscheduling, _ = load_backend("scheduler-plugins")
    woken = []
    inf = Informer(None, "v1alpha1", "podgroups", "PodGroup", [NS], key_of=owner_key, on_change=woken.append,
                   quiet=partial(group_news_unread, {JOB: record}, coscheduling))
    versions = iter(range(2, 100))

    def change(**parts):
        nonlocal group
        group = {**group, **parts, "metadata": {**group["metadata"], **parts.get("metadata", {}),
                                                "resourceVersion": str(next(versions))}}
        watch(inf, "MODIFIED", group)
        return len(woken)

    watch(inf, "ADDED", group)
    assert change(status={"phase": "Scheduled", "scheduled": 3, "running": 1}) == 2  # the gang waits: read
    record.reads_group_status = False
    assert change(status={"phase": "Running", "scheduled": 3, "running": 3}) == 2
    assert change(status={"phase": "Finished", "succeeded": 3}) == 2
    assert change(spec={"minMember": 4}) == 3
    assert change(metadata={"annotations": {"touched": "1"}}) == 4
    watch(inf, "DELETED", {**group, "metadata": {**group["metadata"], "resourceVersion": "100"}})
    assert woken == [JOB] * 5
    record.reads_group_status = True
    group = {**group, "metadata": {**group["metadata"], "uid": "g2", "resourceVersion": "101"}}
    watch(inf, "ADDED", group)  # a fresh group for a restarted gang, which waits again
    versions = iter(range(102, 200))
    assert change(status={"phase": "Pending"}) == 7


def test_a_waiting_gangs_group_moving_on_wakes_no_job():
    """While the job's last pass said its gang waits an ordinary step (Plan.reads_group_progress False), a
    status-only change of its group that says only that the gang moves on queues no pass; one that gives a
    reason, or takes admission back, does, and so does everything once a pass reads progress again."""
    volcano, _ = load_backend("volcano")
    group = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
             "metadata": {"name": "job", "namespace": NS, "uid": "g", "resourceVersion": "1",
                          "labels": {"training.kubeflow.org/job-name": "job"}},
             "spec": {"minMember": 3}, "status": {"phase": "Pending"}}
    record = JobRecord(body={"metadata": {"name": "job", "namespace": NS}}, reads_group_progress=False)
    woken = []
    inf = Informer(None, "v1beta1", "podgroups", "PodGroup", [NS], key_of=owner_key, on_change=woken.append,
                   quiet=partial(group_news_unread, {JOB: record}, volcano))
    versions = iter(range(2, 100))

    def change(status):
        nonlocal group
        group = {**group, "status": status, "metadata": {**group["metadata"], "resourceVersion": str(next(versions))}}
        watch(inf, "MODIFIED", group)
        return len(woken)

    watch(inf, "ADDED", group)
    assert change({"phase": "Inqueue"}) == 1
    assert change({"phase": "Inqueue", "conditions": [{"type": "Scheduled", "status": "True"}]}) == 1
    unschedulable = {"type": "Unschedulable", "status": "True", "reason": "NotEnoughResources", "message": "m"}
    assert change({"phase": "Inqueue", "conditions": [unschedulable]}) == 2
    assert change({"phase": "Pending"}) == 3  # not admitted
    record.reads_group_progress = True
    assert change({"phase": "Inqueue"}) == 4
    assert woken == [JOB] * 4
