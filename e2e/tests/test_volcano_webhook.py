"""--pods-before-admission against Volcano's real admission webhook (vc-webhook-manager from the
pinned volcano.sh/volcano v1.14.1, pods and PodGroup validation), and without it.

The webhook's configurations are cluster-wide, so those tests run on a cluster of this module
only (`webhook_cluster`); the test without the webhook uses the session cluster.

What v1.14.1's pod validation does (pkg/webhooks/admission/pods/validate/admit_pod.go): it checks
only the `volcano.sh/jdb-*` annotations of pods whose schedulerName is Volcano's. It no longer
reads the pod's PodGroup (volcano-sh/volcano#4132, 2025): pods of a Pending group, and tfop's
dry-run probe naming a missing group, are admitted. Older releases refused pods of a Pending group
(until #2078, 2022) and then pods whose group does not exist (until #4132).
"""
from __future__ import annotations

import threading
import time

import pytest

from e2e.harness.volcano import VOLCANO_SCHEDULER_NAME
from e2e.pytest_plugin import own_cluster
from e2e.tests.gang_helpers import (
    POLL,
    Api,
    condition,
    expected_pods,
    gpu_pool,
    new_namespace,
    operator,
    phases,
    pool,
    prepare_job,
    seed,
    submit,
    wait_all_running,
    wait_until,
)

pytestmark = pytest.mark.cluster
ACCEPTED = "dry-run pod accepted"  # tfop's log when its probe passed admission
REFUSED = "dry-run pod of a"  # tfop's log when its probe did not pass
SWITCHED = "refuses pods of unadmitted groups"  # tfop's runtime fallback to waiting
ADMITTED_POD = "admitting pods -- CREATE"  # vc-webhook-manager -v=3, once per pod it admits


@pytest.fixture(scope="module")
def webhook_cluster(tmp_path_factory):
    # No GPU nodes: each test adds its own, so a gang waits (PodGroup Pending) until it does.
    with own_cluster(tmp_path_factory.mktemp("e2e-volcano-webhook"),
                     ("volcano", "volcano-webhook"), gpu_nodes=0) as c:
        yield c


def big_gang(ns: str, p) -> dict:
    """Seed 003 (PS + 4 workers) at 8 GPUs a worker: 32 GPUs, more than any test cluster has idle,
    so Volcano keeps its PodGroup Pending until the test adds the pool's nodes."""
    job = prepare_job(seed("003-0"), ns, p)
    worker = job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    worker["resources"]["limits"]["nvidia.com/gpu"] = 8
    return job


class Sampler:
    """Every POLL s, on a thread: the job's pod names, then its PodGroup's phase, then whether the
    job is Failed. Pods are read first: a Pending phase read after them was Pending when they were
    read too (Volcano does not send a waiting group back to Pending)."""

    def __init__(self, api: Api, job: dict):
        self.api, self.ns, self.name = api, job["metadata"]["namespace"], job["metadata"]["name"]
        self.samples: list[tuple[frozenset, str | None, bool]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "Sampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                pods = frozenset(phases(self.api, self.ns, self.name))
                group = self.api.group("volcano", self.ns, self.name)
                phase = None if group is None else (group.get("status") or {}).get("phase", "")
                failed = condition(self.api.tfjob(self.ns, self.name), "Failed") is not None
                self.samples.append((pods, phase, failed))
            except AssertionError:  # an API error (Api.request): sample again
                pass
            time.sleep(POLL)

    def pods_while_waiting(self) -> list[tuple[frozenset, str | None, bool]]:
        """Samples with pods while the group was absent or not yet admitted."""
        return [s for s in self.samples if s[0] and s[1] in (None, "", "Pending")]


def webhook_admissions(cluster) -> int:
    return (cluster.logs / "volcano-webhook.log").read_text(errors="replace").count(ADMITTED_POD)


def gang_starts(cluster, api: Api, ns: str, mode: str) -> tuple[str, Sampler]:
    """Run a gang that waits for GPUs under tfop --pods-before-admission `mode`; it must start once
    they come, never be Failed, never see InvalidPodTemplate. Returns tfop's log and the samples."""
    args = [] if mode == "auto" else ["--pods-before-admission", mode]
    with gpu_pool(cluster, api, ns) as p, operator(cluster, ns, "volcano", args) as op:
        job = big_gang(ns, p)
        name = job["metadata"]["name"]
        with Sampler(api, job) as sampler:
            submit(cluster, job)
            wait_until(lambda: (api.group("volcano", ns, name) or {}).get("status", {}).get("phase") == "Pending",
                       20, "Volcano to see the PodGroup and keep it Pending")
            if mode == "never":
                time.sleep(3)  # long enough for a pod to appear if tfop created them early
            else:
                wait_until(lambda: any(s[0] == set(expected_pods(job)) for s in sampler.pods_while_waiting()),
                           20, "every pod to exist while the PodGroup is Pending", lambda: sampler.samples[-1:])
            p.add(4, gpus=8)
            wait_all_running(api, job, timeout=60)
        assert not any(s[2] for s in sampler.samples), "the job was Failed on the way"
        assert not api.events(ns, "InvalidPodTemplate")
        for pod in api.pods(ns, name):
            assert pod["spec"]["schedulerName"] == VOLCANO_SCHEDULER_NAME
        log = op.log_path.read_text(errors="replace")
    assert SWITCHED not in log, log[-3000:]
    return log, sampler


@pytest.mark.parametrize("mode", ["auto", "always"])
def test_real_webhook_admits_pods_of_a_pending_group(webhook_cluster, mode):
    """The real webhook in the path (the harness checked it denies a bad pod): tfop's probe passes
    it, so `auto` creates the pods with the group, like `always`; the webhook admits every one of
    them while the group is Pending, and the gang starts when GPUs come."""
    api = Api(webhook_cluster)
    ns = new_namespace(webhook_cluster, f"webhook-{mode}")
    before = webhook_admissions(webhook_cluster)
    log, sampler = gang_starts(webhook_cluster, api, ns, mode)
    assert (ACCEPTED in log) == (mode == "auto") and REFUSED not in log, log[-3000:]
    assert sampler.pods_while_waiting()
    # The webhook saw the 5 pods (and the probe, in auto): they did not bypass it.
    assert webhook_admissions(webhook_cluster) - before >= 5 + (mode == "auto")


def test_real_webhook_pods_wait_for_admission_with_never(webhook_cluster):
    """--pods-before-admission never: no pod exists while the PodGroup is Pending."""
    api = Api(webhook_cluster)
    ns = new_namespace(webhook_cluster, "webhook-never")
    log, sampler = gang_starts(webhook_cluster, api, ns, "never")
    assert ACCEPTED not in log and REFUSED not in log
    assert not sampler.pods_while_waiting(), sampler.pods_while_waiting()[:3]


def test_real_webhook_denial_of_the_template_fails_the_job(webhook_cluster):
    """A denial that is not about the PodGroup (here the real webhook's check of the JDB
    annotation) is the template's fault: the job fails with InvalidPodTemplate, and tfop does not
    mistake it for the admission fallback."""
    api = Api(webhook_cluster)
    ns = new_namespace(webhook_cluster, "webhook-bad-template")
    with gpu_pool(webhook_cluster, api, ns) as p, operator(webhook_cluster, ns, "volcano") as op:
        p.add(4, gpus=8)
        job = big_gang(ns, p)
        job["spec"]["tfReplicaSpecs"]["Worker"]["template"].setdefault("metadata", {}).setdefault(
            "annotations", {})["volcano.sh/jdb-min-available"] = "0"
        submit(webhook_cluster, job)
        name = job["metadata"]["name"]
        failed = wait_until(lambda: condition(api.tfjob(ns, name), "Failed"), 30, "the job to fail")
        assert "validatepod.volcano.sh" in failed["message"] and "jdb-min-available" in failed["message"]
        assert api.events(ns, "InvalidPodTemplate")
        assert SWITCHED not in op.log_path.read_text(errors="replace")


def test_without_webhook_pods_go_with_the_group(cluster, namespace):
    """The session cluster runs no admission webhook: tfop's probe is accepted and the gang's
    pods exist (Pending) while its PodGroup is still Pending."""
    log, sampler = gang_starts(cluster, Api(cluster), namespace, "auto")
    assert ACCEPTED in log
    assert sampler.pods_while_waiting()
