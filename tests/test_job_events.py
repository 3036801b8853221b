"""Which TFJob watch events start a pass: every change, but not our own status write coming back; nor
the answers of the pass's own creates.

The status PATCH goes to a local socket server (tests/scripted_server.py) that answers with the job
at a new resourceVersion, as the apiserver does; the work queue is replaced by a list of the keys added.
"""
from __future__ import annotations

import asyncio
import json

from scripted_server import ScriptedServer
from tfop.api.constants import LABEL_JOB
from tfop.core.plan import Plan
from tfop.core.settings import Settings
from tfop.kube.client import KubeClient
from tfop.kube.credentials import Credentials
from tfop.runtime.controller import Controller

KEY = ("ml", "tf-job")


def job(version: int, **status) -> dict:
    return {"apiVersion": "kubeflow.org/v1", "kind": "TFJob",
            "metadata": {"name": "tf-job", "namespace": "ml", "uid": "u1", "resourceVersion": str(version)},
            "spec": {"tfReplicaSpecs": {}}, "status": status}


def answer(body: dict) -> bytes:
    data = json.dumps(body).encode()
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(data), data)


class Added(list):
    def add(self, key) -> None:
        self.append(key)

    def forget(self, key) -> None:
        pass


def replay(steps: list[tuple[str, int]]) -> list[bool]:
    """steps: ("event", version) a watch event of the job; ("write", version) our status write, which
    the server answers at that version. Whether each event queued a pass."""
    written = [version for kind, version in steps if kind == "write"]

    async def main():
        async with ScriptedServer([answer(job(v, phase="written")) for v in written]) as url:
            async with KubeClient(Credentials(server=url, ssl_context=False, token="t")) as client:
                controller = Controller(Settings(namespaces=("ml",)), client, None)
                controller.queue = queued = Added()
                seen = []
                for kind, version in steps:
                    if kind == "write":
                        await controller.statuses.patch(controller.jobs[KEY], {"phase": "written"})
                        continue
                    before = len(queued)
                    controller.job_event("MODIFIED", job(version, phase="written"))
                    seen.append(len(queued) > before)
                    assert int(controller.jobs[KEY].body["metadata"]["resourceVersion"]) >= version
                return seen
    return asyncio.run(main())


def test_our_own_status_write_coming_back_starts_no_pass():
    assert replay([("event", 10), ("write", 12), ("event", 12)]) == [True, False]


def test_every_other_event_starts_one():
    # an older change the write's answer already holds, the echo, the same version again (a relist),
    # and someone else's change after ours
    assert replay([("event", 10), ("write", 12), ("event", 11), ("event", 12), ("event", 12), ("event", 13)]) == [
        True, True, False, True, True]


def test_an_echo_that_beats_the_writes_answer_starts_a_pass_and_the_answer_changes_nothing():
    assert replay([("event", 10), ("event", 12), ("write", 12), ("event", 12)]) == [True, True, True]


def test_the_record_shares_the_informers_copy_after_the_echo():
    async def main():
        async with ScriptedServer([answer(job(12))]) as url:
            async with KubeClient(Credentials(server=url, ssl_context=False, token="t")) as client:
                controller = Controller(Settings(namespaces=("ml",)), client, None)
                controller.queue = Added()
                controller.job_event("ADDED", job(10))
                await controller.statuses.patch(controller.jobs[KEY], {"phase": "written"})
                echo = job(12)
                controller.job_event("MODIFIED", echo)
                return controller.jobs[KEY].body["metadata"] is echo["metadata"]
    assert asyncio.run(main())


def child(kind: str, name: str, version: int = 0) -> dict:
    meta = {"name": name, "namespace": "ml", "labels": {LABEL_JOB: "tf-job"}}
    if version:
        meta.update(uid=f"uid-{name}", resourceVersion=str(version))
    return {"apiVersion": "v1", "kind": kind, "metadata": meta}


def test_the_answers_of_our_own_creates_fill_the_caches_and_start_no_pass():
    """The pass that created them settles on them (tests/core_fixtures.assert_settles); their watch
    events at the same version say nothing new, and a later change of theirs starts a pass as ever."""
    created = [child("Pod", "tf-job-worker-0", 5), child("Service", "tf-job-worker-0", 6)]

    async def main():
        async with ScriptedServer([answer(c) for c in created]) as url:
            async with KubeClient(Credentials(server=url, ssl_context=False, token="t")) as client:
                controller = Controller(Settings(namespaces=("ml",)), client, None)
                controller.job_event("ADDED", job(10))
                woken = []
                controller.pods.on_change = controller.services.on_change = woken.append
                plan = Plan(create=[child("Pod", "tf-job-worker-0"), child("Service", "tf-job-worker-0")])
                failures = await controller.applier.write_objects(controller.jobs[KEY], plan)
                cached = len(controller.pods.for_key(KEY)), len(controller.services.for_key(KEY))
                controller.pods.handle_event({"type": "ADDED", "object": created[0]}, "5")
                quiet = list(woken)
                bound = {**child("Pod", "tf-job-worker-0", 7), "status": {"phase": "Running"}}
                controller.pods.handle_event({"type": "MODIFIED", "object": bound}, "7")
                return failures, cached, quiet, woken
    assert asyncio.run(main()) == ([], (1, 1), [], [KEY])
