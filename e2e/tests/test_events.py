"""The event recorder on the real apiserver, as the operator's ServiceAccount (tfop/kube/events.py).

Repeats of an Event are counted on one Event object (a merge patch), another
message is another Event, an Event that expired is posted again, a job's token
bucket drops what goes beyond its burst, and a refused write never raises. No
operator runs in these namespaces: every Event read back was written by the
recorder driven here.
"""
from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta, timezone

import pytest
import yaml

from e2e.tests.lifecycle_helpers import tfjob
from e2e.harness.tfop_operator import OPERATOR_ACCOUNT, OPERATOR_NAMESPACE, deploy_manifests
from tfop.api import conditions
from tfop.core.plan import Event
from tfop.kube.client import KubeClient
from tfop.kube.credentials import load_credentials
from tfop.kube.events import SPAM_BURST, EventRecorder

pytestmark = pytest.mark.cluster

FAILED = Event("Warning", "TFJobRestarting", "worker-0 exited with code 1")
OTHER = Event("Warning", "TFJobRestarting", "worker-1 exited with code 1")
START = datetime.now(timezone.utc).replace(microsecond=0)


def stamp(second: int) -> str:
    return conditions.timestamp(START + timedelta(seconds=second))


async def direct(fn, *args, **kwargs):
    return await fn(*args, **kwargs)


async def post_one_by_one(kubeconfig: str, posts: list[tuple[dict, Event]], between=None) -> int:
    """Each Event in its own post, as successive reconciles do; returns the requests the client sent."""
    async with KubeClient(load_credentials(kubeconfig)) as client:
        recorder = EventRecorder(client, direct)
        for second, (involved, event) in enumerate(posts):
            if between is not None:
                between(second)
            await recorder.post(involved, [event], stamp(second))
        return client.requests


@pytest.fixture
def operator_kubeconfig(cluster) -> str:
    deploy_manifests(cluster, None)  # the CRD and the operator's ClusterRole
    return str(cluster.service_account_kubeconfig(OPERATOR_NAMESPACE, OPERATOR_ACCOUNT))


def create_job(kubectl, namespace: str, name: str) -> dict:
    container = {"name": "tensorflow", "image": "tf"}
    job = tfjob(name, {"Worker": {"replicas": 1, "template": {"spec": {"containers": [container]}}}})
    kubectl("-n", namespace, "apply", "-f", "-", input=yaml.safe_dump(job))
    body = kubectl.json("-n", namespace, "get", "tfjob", name)
    return {"apiVersion": body["apiVersion"], "kind": body["kind"], "metadata": body["metadata"]}


def events_of(kubectl, involved: dict) -> list[dict]:
    meta = involved["metadata"]
    listed = kubectl.json("-n", meta["namespace"], "get", "events",
                          "--field-selector", f"involvedObject.uid={meta['uid']}")
    return sorted(listed["items"], key=lambda e: e["message"])


def test_repeats_count_on_one_event_and_another_message_is_another(operator_kubeconfig, kubectl, namespace):
    job = create_job(kubectl, namespace, "repeats")
    asyncio.run(post_one_by_one(operator_kubeconfig, [(job, FAILED)] * 3 + [(job, OTHER)]))
    events = events_of(kubectl, job)
    assert [(e["message"], e["count"]) for e in events] == [(FAILED.message, 3), (OTHER.message, 1)]
    repeated = events[0]
    assert (repeated["type"], repeated["reason"]) == (FAILED.type, FAILED.reason)
    assert (repeated["firstTimestamp"], repeated["lastTimestamp"]) == (stamp(0), stamp(2))
    assert repeated["involvedObject"]["kind"] == "TFJob" and repeated["source"]["component"] == "tfop"


def test_a_job_beyond_its_burst_is_dropped_and_another_job_is_not(operator_kubeconfig, kubectl, namespace):
    noisy, quiet = create_job(kubectl, namespace, "noisy"), create_job(kubectl, namespace, "quiet")
    posts = [(noisy, FAILED)] * 30 + [(quiet, FAILED)]
    requests = asyncio.run(post_one_by_one(operator_kubeconfig, posts))
    assert [e["count"] for e in events_of(kubectl, noisy)] == [SPAM_BURST]
    assert [e["count"] for e in events_of(kubectl, quiet)] == [1]
    # The noisy job: one POST and 24 PATCHes; a dropped Event costs no request. The quiet one: one POST.
    assert requests == SPAM_BURST + 1


def test_an_expired_event_is_posted_again(operator_kubeconfig, kubectl, namespace):
    job = create_job(kubectl, namespace, "expired")
    first: list[str] = []

    def expire_the_first(second: int) -> None:
        if second == 2:  # after two posts, the apiserver forgets the Event (as its 1 h TTL would)
            first.extend(e["metadata"]["name"] for e in events_of(kubectl, job))
            kubectl("-n", namespace, "delete", "event", *first)

    asyncio.run(post_one_by_one(operator_kubeconfig, [(job, FAILED)] * 3, between=expire_the_first))
    events = events_of(kubectl, job)
    assert len(first) == 1 and [e["count"] for e in events] == [1]
    assert events[0]["metadata"]["name"] != first[0] and events[0]["firstTimestamp"] == stamp(2)


def test_a_refused_event_never_raises(operator_kubeconfig, kubectl, namespace, caplog):
    job = create_job(kubectl, namespace, "refused")
    gone = {**job, "metadata": {**job["metadata"], "namespace": f"{namespace}-missing"}}
    with caplog.at_level(logging.WARNING, logger="tfop.events"):
        asyncio.run(post_one_by_one(operator_kubeconfig, [(gone, FAILED), (job, FAILED)]))
    assert any("could not post event TFJobRestarting" in r.getMessage() and "404" in r.getMessage()
               for r in caplog.records)
    assert [e["count"] for e in events_of(kubectl, job)] == [1]  # the next Event is written as usual
