"""The contention benchmark: what gang scheduling saves when TFJobs compete for GPUs.

    python -m e2e.bench.contention [--trials N] [--seed S]
                             [--scheduler volcano|scheduler-plugins|koordinator|kubernetes[,...]]
                             [--gang on|off|both] [--jobs J] [--out DIR] [--dir CLUSTER_DIR]
                             [--scenario stream|preemption|node-loss] [--volcano-conf preempt|no-enqueue|no-gang-veto]
                             [--tfop worktree|COMMIT] [--baseline COMMIT|worktree] [--admin-after S]

Each trial draws, from the seed, a cluster (3-6 kwok nodes of 1, 2 or 4 GPUs) and a stream of
TFJobs (e2e.bench.contention_lib.draw_trial), and runs the same stream with tfop's gang scheduling on
and off, one after the other on the same nodes. A job's pods run for its run time from the
moment all of them run (the harness then sets kwok's exit markers), as distributed training
makes no progress before every worker is up. A watch on pods and TFJobs feeds the ledger
(contention_lib.Ledger); see e2e/CONTENTION.md for the method and the metrics' definitions.

--scenario preemption: low-priority gangs fill the cluster, then a high-priority gang arrives
(contention_lib.draw_preemption_trial, PreemptionRun); it measures gangs broken by preemption.

--scenario node-loss: the stream with gangs on, and a node holding a running gang's members stops
heartbeating (contention_lib.draw_node_loss_trial, NodeLossRun); two operators, --tfop and
--baseline, each on a cluster of its own at the same time; it measures the GPUs held by gangs that
cannot progress and how soon the gang runs whole again elsewhere.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import aiohttp

from e2e import build
from e2e.bench.burst import machine
from e2e.bench.apiserver_requests import Admin
from e2e.harness.cluster import Cluster, components_for
from e2e.harness.koordinator import KOORDINATOR_SCHEDULER_NAME
from e2e.harness.kwok import GPU_RESOURCE
from e2e.harness.nodes import OUT_OF_SERVICE_TAINT, UNREACHABLE_TAINT
from e2e.harness.scheduler_plugins import COSCHEDULING_SCHEDULER_NAME
from e2e.harness.volcano import volcano_conf
from e2e.bench.contention_lib import (HIGH_PRIORITY, NODE_LOSS_RUN_HEAD, NODE_LOSS_SUMMARY_HEAD, PREEMPT_RUN_HEAD,
                                PREEMPT_SUMMARY_HEAD, PRIORITY_VALUES, RUN_HEAD, SUMMARY_HEAD, Ledger, Trial,
                                draw_node_loss_trial, draw_preemption_trial, draw_trial, fmt, md_table,
                                node_loss_run_row, node_loss_summary_row, plot, plot_node_loss, preempt_run_row,
                                preempt_summary_row, run_row, summary_row)
from e2e.harness.kwok_stages import EXIT_CODE_ANNOTATION, EXIT_DELAY_ANNOTATION, EXIT_LABEL
from e2e.tests.gang_helpers import ScopedOperator, wait_until
from tfop.api.constants import LABEL_JOB
from tfop.kube.client import ApiError

TICK_S = 0.25  # how often the run checks its own ledger (no API call)


@dataclass(frozen=True)
class Wiring:
    """How tfop meets one scheduler, gang on and off."""
    cluster: str  # e2e.harness.cluster scheduler set member
    gang: str  # --gang-scheduler-name
    off_args: tuple[str, ...]  # tfop's flags without gang scheduling
    off_placement: str  # who places pods without gangs, and why
    kubernetes: str | None = None  # the control plane: None, the harness's own; "1.37", e2e.harness.cluster's optional one


SCHEDULERS = {
    # vc-scheduler skips pods without a PodGroup (its cache makes no job for them); in a real
    # install vc-controller-manager gives each bare pod a group of one. It does not run here, so
    # without gangs the pods go to kube-scheduler, which is what a cluster without gangs uses.
    "volcano": Wiring("volcano", "volcano", (), "kube-scheduler (vc-scheduler schedules no pod without a PodGroup)"),
    "scheduler-plugins": Wiring("coscheduling", "scheduler-plugins", ("--scheduler-name", COSCHEDULING_SCHEDULER_NAME),
                                "scheduler-plugins-scheduler, no PodGroup (Coscheduling lets group-less pods through)"),
    "koordinator": Wiring("koordinator", "koordinator", ("--scheduler-name", KOORDINATOR_SCHEDULER_NAME),
                          "koord-scheduler, no gang annotations (its Coscheduling ignores such pods)"),
    # Kubernetes' own gang scheduling needs the 1.37 control plane (GenericWorkload on, v1beta1
    # served); without gangs its pods carry no schedulingGroup: plain kube-scheduler 1.37.
    "kubernetes": Wiring("default", "kubernetes", (), "kube-scheduler 1.37 (no PodGroup, no schedulingGroup)",
                         kubernetes="1.37"),
}
GROUP_KIND = {"volcano": "podgroups.scheduling.volcano.sh", "scheduler-plugins": "podgroups.scheduling.x-k8s.io",
              "kubernetes": "podgroups.scheduling.k8s.io"}


def tfjob(spec, namespace: str) -> dict:
    gpus = {GPU_RESOURCE: str(spec.gpus)}
    container = {"name": "tensorflow", "image": "tfop-contention:1", "resources": {"requests": gpus, "limits": gpus}}
    pod_spec = {"containers": [container]} | ({"priorityClassName": spec.priority} if spec.priority else {})
    return {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": spec.name, "namespace": namespace},
            "spec": {"tfReplicaSpecs": {"Worker": {
                "replicas": spec.pods, "restartPolicy": "ExitCode",  # exit 137 is retried, a gang restart with gangs
                "template": {"spec": pod_spec}}}}}


def utc_after(seconds: float) -> str:
    return (datetime.now(timezone.utc) + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


async def follow(client, api_version: str, plural: str, namespace: str, handle, ready: asyncio.Event) -> None:
    """List, then watch from that version; on an expired version (410) or a dropped connection,
    list again, and hand objects that vanished meanwhile over as DELETED."""
    live: dict[str, dict] = {}  # uid -> last seen

    def see(etype: str, obj: dict) -> None:
        if etype == "DELETED":
            live.pop(obj["metadata"]["uid"], None)
        else:
            live[obj["metadata"]["uid"]] = obj
        handle(etype, obj)

    while True:
        listing = await client.list(api_version, plural, namespace)
        present = {item["metadata"]["uid"] for item in listing.get("items") or []}
        for uid in set(live) - present:
            see("DELETED", live[uid])
        for item in listing.get("items") or []:
            see("MODIFIED" if item["metadata"]["uid"] in live else "ADDED", item)
        version = listing["metadata"]["resourceVersion"]
        ready.set()
        try:
            while True:
                async for ev in client.watch(api_version, plural, namespace, version, timeout_seconds=120):
                    obj = ev.get("object") or {}
                    if ev.get("type") == "ERROR":
                        raise ApiError(410, obj, "WATCH", plural)
                    version = (obj.get("metadata") or {}).get("resourceVersion", version)
                    if ev.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                        see(ev["type"], obj)
        except (ApiError, aiohttp.ClientError, asyncio.TimeoutError):
            continue


class StreamRun:
    """One stream of TFJobs in one namespace, watched into a Ledger; kwok exit markers set
    once a job's pods all run."""

    def __init__(self, client, namespace: str, trial: Trial, nodes: dict[str, int]):
        self.client, self.ns, self.trial = client, namespace, trial
        self.specs = {j.name: j for j in trial.jobs}
        self.ledger = Ledger(nodes, self.specs, time.monotonic())
        self.running: dict[str, dict[str, str]] = {}  # job -> uid -> pod name (Running, not deleted)
        self.marked: set[str] = set()
        self.failed_once: set[str] = set()
        self.patches: list[asyncio.Task] = []
        self.scheduler_names: set[str] = set()
        self.restart_counts: dict[str, int] = {}
        self.disrupted: set[str] = set()
        self.stalled: set[str] = set()  # marked once, exit put off since
        # The preemption scenario: a member lost mid-run stalls the others (training needs them
        # all) until the gang is whole again, when every member runs its full run time anew.
        self.stall_broken = False
        self.disruptions: dict[str, int] = {}  # DisruptionTarget reason -> pods

    def on_pod(self, etype: str, pod: dict) -> None:
        meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
        job, uid, now = (meta.get("labels") or {}).get(LABEL_JOB), meta["uid"], time.monotonic()
        if job not in self.specs:
            return
        self.scheduler_names.add(spec.get("schedulerName", ""))
        if spec.get("nodeName"):
            self.ledger.bind(now, uid, job, spec["nodeName"])
        gone = etype == "DELETED" or status.get("phase") in ("Succeeded", "Failed")
        for c in status.get("conditions") or []:
            if c.get("type") == "DisruptionTarget" and c.get("status") == "True" and uid not in self.disrupted:
                self.disrupted.add(uid)
                self.disruptions[c.get("reason", "")] = self.disruptions.get(c.get("reason", ""), 0) + 1
        lost = gone and status.get("phase") != "Succeeded"
        if gone:  # a terminating pod holds its GPUs until it is gone, for the schedulers too
            self.ledger.free(now, uid, lost=lost)
        if gone or meta.get("deletionTimestamp"):
            self.running.get(job, {}).pop(uid, None)
            if self.stall_broken and uid in self.marked and status.get("phase") != "Succeeded":
                self.stall(job)
        elif status.get("phase") == "Running":
            if (meta.get("labels") or {}).get(EXIT_LABEL) == "true" and uid not in self.stalled:
                self.marked.add(uid)
            self.running.setdefault(job, {})[uid] = meta["name"]
            self.mark_when_all_run(job)

    def stall(self, job: str) -> None:
        """A member of a running gang is going: the others' exit is put off (kwok replaces a pod's
        pending stage on every change), to be set anew when all run again."""
        if job in self.ledger.ended:
            return
        for uid, name in self.running.get(job, {}).items():
            if uid in self.marked:
                self.marked.discard(uid)
                self.stalled.add(uid)
                patch = {"metadata": {"annotations": {EXIT_DELAY_ANNOTATION: utc_after(3600)}}}
                self.patches.append(asyncio.create_task(self.patch_pod(name, patch)))

    async def patch_pod(self, name: str, patch: dict) -> None:
        try:
            await self.client.merge_patch("v1", "pods", self.ns, name, patch)
        except ApiError as e:
            if not (self.stall_broken and e.status == 404):  # evicted or deleted meanwhile
                raise

    def mark_when_all_run(self, job: str) -> None:
        spec, pods = self.specs[job], self.running[job]
        todo = [(uid, name) for uid, name in pods.items() if uid not in self.marked]
        if len(pods) < spec.pods or not todo:
            return
        victim = None
        if spec.fail_member is not None and job not in self.failed_once:
            self.failed_once.add(job)
            victim = f"{job}-worker-{spec.fail_member}"
        for uid, name in todo:
            self.marked.add(uid)
            self.stalled.discard(uid)
            fails = name == victim
            patch = {"metadata": {"labels": {EXIT_LABEL: "true"}, "annotations": {
                EXIT_CODE_ANNOTATION: "137" if fails else "0",
                EXIT_DELAY_ANNOTATION: utc_after(spec.run_s / 2 if fails else spec.run_s)}}}
            self.patches.append(asyncio.create_task(self.patch_pod(name, patch)))

    def on_job(self, etype: str, obj: dict) -> None:
        name, status = obj["metadata"]["name"], obj.get("status") or {}
        if name not in self.specs:
            return
        self.restart_counts[name] = int(status.get("restartCount") or 0)
        for c in status.get("conditions") or []:
            if c.get("type") in ("Succeeded", "Failed") and c.get("status") == "True":
                self.ledger.end(time.monotonic(), name, c["type"])

    async def submit(self) -> None:
        t0 = self.ledger.t0
        for spec in sorted(self.trial.jobs, key=lambda j: j.arrival_s):
            await asyncio.sleep(max(0.0, t0 + spec.arrival_s - time.monotonic()))
            self.ledger.submit(time.monotonic(), spec.name)
            await self.client.create(tfjob(spec, self.ns), "tfjobs")

    def side_tasks(self) -> list:
        """Coroutines a scenario runs beside the stream, from the run's start (t0) to its end."""
        return []

    def check_stuck(self, now: float) -> str | None:
        return self.ledger.stuck(now)

    async def run(self, timeout: float) -> dict:
        ready = [asyncio.Event(), asyncio.Event()]
        watches = [asyncio.create_task(follow(self.client, "v1", "pods", self.ns, self.on_pod, ready[0])),
                   asyncio.create_task(follow(self.client, "kubeflow.org/v1", "tfjobs", self.ns, self.on_job,
                                              ready[1]))]
        await asyncio.wait_for(asyncio.gather(*(r.wait() for r in ready)), 60)
        self.ledger = Ledger(self.ledger.nodes, self.specs, time.monotonic())  # t0: the watches are up
        submitter = asyncio.create_task(self.submit())
        watches += [asyncio.create_task(c) for c in self.side_tasks()]
        outcome = "timeout"
        while time.monotonic() - self.ledger.t0 < timeout:
            await asyncio.sleep(TICK_S)
            now = time.monotonic()
            for task in [submitter, *watches, *self.patches]:
                if task.done() and not task.cancelled() and task.exception():
                    raise task.exception()
            if submitter.done() and len(self.ledger.ended) == len(self.specs):
                outcome = "finished"
                break
            stuck = self.check_stuck(now)
            if stuck:
                outcome = stuck
                break
        t_end = time.monotonic()
        for task in [submitter, *watches]:
            task.cancel()
        await asyncio.gather(submitter, *watches, *self.patches, return_exceptions=True)
        result = self.ledger.metrics(t_end, outcome)
        victim = next((j for j in self.trial.jobs if j.fail_member is not None), None)
        result.update(scheduler_names=sorted(self.scheduler_names), restart_counts=self.restart_counts)
        if victim:
            result["member_failure"] = {
                "job": victim.name, "worker": victim.fail_member, "injected": victim.name in self.failed_once,
                "restart_count": self.restart_counts.get(victim.name, 0),
                "outcome": (self.ledger.ended.get(victim.name) or (None, None))[1],
                "rebind_s": result["restart_to_bind_s"]}
        return result


class PreemptionRun(StreamRun):
    """The preemption scenario (contention_lib.draw_preemption_trial): the low-priority gangs fill
    the cluster; once every one of them runs, after HIGH_DELAY_S, the high-priority gang arrives."""
    HIGH_DELAY_S = 1.0

    def __init__(self, client, namespace: str, trial: Trial, nodes: dict[str, int]):
        super().__init__(client, namespace, trial, nodes)
        self.stall_broken = True
        self.high = next(j for j in trial.jobs if j.priority == HIGH_PRIORITY)
        self.lows = [j for j in trial.jobs if j is not self.high]
        self.disrupted_by_job: dict[str, int] = {}

    def on_pod(self, etype: str, pod: dict) -> None:
        meta, before = pod["metadata"], len(self.disrupted)
        super().on_pod(etype, pod)
        if len(self.disrupted) > before:
            job = (meta.get("labels") or {}).get(LABEL_JOB)
            self.disrupted_by_job[job] = self.disrupted_by_job.get(job, 0) + 1

    async def submit(self) -> None:
        t0 = self.ledger.t0
        for spec in sorted(self.lows, key=lambda j: j.arrival_s):
            await asyncio.sleep(max(0.0, t0 + spec.arrival_s - time.monotonic()))
            self.ledger.submit(time.monotonic(), spec.name)
            await self.client.create(tfjob(spec, self.ns), "tfjobs")
        deadline = time.monotonic() + 60
        while not all(j.name in self.ledger.starts for j in self.lows):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the low gangs did not all run within 60 s: {sorted(self.ledger.starts)} ran")
            await asyncio.sleep(0.05)
        await asyncio.sleep(self.HIGH_DELAY_S)
        self.ledger.submit(time.monotonic(), self.high.name)
        await self.client.create(tfjob(self.high, self.ns), "tfjobs")

    async def run(self, timeout: float) -> dict:
        result = await super().run(timeout)
        led, high = self.ledger, self.high.name
        starts, submitted = led.starts.get(high, []), led.submitted.get(high)
        preempted = sorted(j.name for j in self.lows if led.lost.get(j.name) or self.disrupted_by_job.get(j.name))
        result["preemption"] = {
            "high": high, "high_arrival_to_bound_s": starts[0] - submitted if starts and submitted else None,
            "high_outcome": (led.ended.get(high) or (None, None))[1],
            "lows_ended_before_high_bound": sum(1 for j in self.lows if starts and j.name in led.ended
                                                and led.ended[j.name][0] <= starts[0]),
            "lost_pods": {j.name: led.lost.get(j.name, 0) for j in self.lows if led.lost.get(j.name)},
            "disrupted_pods": dict(self.disrupted_by_job), "disruption_reasons": dict(self.disruptions),
            "preempted_jobs": preempted,
            "back_whole_and_succeeded": [j for j in preempted if len(led.starts.get(j, [])) >= 2
                                         and (led.ended.get(j) or (None, None))[1] == "Succeeded"],
            "lows_succeeded": sum(1 for j in self.lows if (led.ended.get(j.name) or (None, None))[1] == "Succeeded"),
            "lows": len(self.lows)}
        return result


SURVIVOR_EXIT_GRACE_S = 2.0  # Cluster.lose_node restarts kwok in about 1.5 s


class NodeLossRun(StreamRun):
    """The node-loss scenario (contention_lib.draw_node_loss_trial): the stream, and once the lost
    gang (NodeLoss.job) runs whole, after a seeded part of its run time, one of the nodes holding its
    members stops heartbeating (Cluster.lose_node). Training on every gang with a member there
    hangs from then on (their exits are put off, as the preemption scenario's broken gangs'), until
    the gang runs whole again on live nodes, when it runs its full run time anew. The harness plays
    the admin: `admin_after_s` after the node is seen NotReady or Unknown, it taints the node
    out-of-service (non-graceful node shutdown), and PodGC force-deletes its pods."""

    def __init__(self, client, namespace: str, trial: Trial, nodes: dict[str, int], cluster: Cluster,
                 admin_after_s: float):
        super().__init__(client, namespace, trial, nodes)
        self.cluster, self.admin_after_s, self.loss = cluster, admin_after_s, trial.node_loss
        self.stall_broken = True
        self.victim = self.specs[self.loss.job]
        self.pod_node: dict[str, str] = {}  # uid -> node
        self.lost_node: str | None = None
        self.t_loss: float | None = None
        self.times: dict[str, float] = {}  # what happened to the lost node -> when (monotonic)
        self.hit: dict[str, dict[str, float]] = {}  # job with a member on the lost node -> its milestones
        self.stalled_at_loss: set[str] = set()  # uids whose exit the loss put off
        self.victim_whole = asyncio.Event()
        self.node_down = asyncio.Event()
        self.job_status: dict[str, dict] = {}

    # -- events ---------------------------------------------------------------------------------
    def on_pod(self, etype: str, pod: dict) -> None:
        meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
        job, uid = (meta.get("labels") or {}).get(LABEL_JOB), meta["uid"]
        if job not in self.specs:
            return
        if spec.get("nodeName"):
            self.pod_node[uid] = spec["nodeName"]
        node, now = self.pod_node.get(uid), time.monotonic()
        if self.lost_node and node == self.lost_node and job not in self.ledger.ended:
            self.hit.setdefault(job, {})  # also a gang placed there after the loss, before NotReady
        super().on_pod(etype, pod)
        if job not in self.hit or job in self.ledger.ended:
            return
        marks = self.hit[job]
        deleting = etype == "DELETED" or meta.get("deletionTimestamp")
        if deleting and node and node != self.lost_node and status.get("phase") != "Succeeded":
            marks.setdefault("survivors_deleted", now)  # by the operator: its reaction to the loss
        if deleting and node == self.lost_node:
            marks.setdefault("lost_pods_deleting", now)
        # A harness fault: a member whose exit was put off ran to its end anyway (a member that was
        # exiting at the loss may finish within kwok's restart: not one).
        if status.get("phase") == "Succeeded" and uid in self.stalled_at_loss and "whole_again" not in marks \
                and self.t_loss is not None and now - self.t_loss > SURVIVOR_EXIT_GRACE_S:
            marks.setdefault("survivor_exited", now)
        if not any(p.job == job and p.node == self.lost_node and not p.gone for p in self.ledger.pods.values()):
            marks.setdefault("lost_pods_gone", now)

    def mark_when_all_run(self, job: str) -> None:
        pods = self.running[job]
        for uid in [u for u in pods if self.lost_node and self.pod_node.get(u) == self.lost_node]:
            pods.pop(uid)  # nothing runs on a lost node (its phase stays Running: no kubelet reports)
        if len(pods) >= self.specs[job].pods:
            if job == self.victim.name:
                self.victim_whole.set()
            if job in self.hit:
                self.hit[job].setdefault("whole_again", time.monotonic())
        super().mark_when_all_run(job)

    def on_node(self, etype: str, node: dict) -> None:
        if node["metadata"]["name"] != self.lost_node:
            return
        now = time.monotonic()
        ready = next((c.get("status") for c in (node.get("status") or {}).get("conditions") or []
                      if c.get("type") == "Ready"), None)
        if ready != "True" and "not_ready" not in self.times:
            self.times["not_ready"] = now
            self.node_down.set()
        taints = {t.get("key") for t in (node.get("spec") or {}).get("taints") or []}
        if UNREACHABLE_TAINT in taints:
            self.times.setdefault("unreachable_taint", now)

    def on_job(self, etype: str, obj: dict) -> None:
        super().on_job(etype, obj)
        name, status = obj["metadata"]["name"], obj.get("status") or {}
        if name not in self.specs:
            return
        seen = self.job_status.setdefault(name, {"restart_count": 0, "disruption_count": 0, "node_loss_seen": False,
                                                 "restarting_reasons": []})
        seen["restart_count"] = max(seen["restart_count"], int(status.get("restartCount") or 0))
        seen["disruption_count"] = max(seen["disruption_count"], int(status.get("disruptionCount") or 0))
        seen["node_loss_seen"] |= bool(status.get("nodeLoss"))
        for c in status.get("conditions") or []:
            if c.get("type") == "Restarting" and c.get("status") == "True" and \
                    c.get("reason") not in seen["restarting_reasons"]:
                seen["restarting_reasons"].append(c.get("reason"))

    # -- the fault and the admin ------------------------------------------------------------------
    def side_tasks(self) -> list:
        ready = asyncio.Event()
        return [follow(self.client, "v1", "nodes", None, self.on_node, ready), self.lose(), self.play_admin()]

    async def lose(self) -> None:
        await self.victim_whole.wait()
        self.times["victim_whole"] = time.monotonic()
        await asyncio.sleep(self.loss.after_frac * self.victim.run_s)
        nodes = sorted({self.pod_node[u] for u in self.running.get(self.victim.name, {})})
        if not nodes:  # ended or restarted meanwhile: no loss this run (reported as such)
            return
        node = nodes[min(int(self.loss.pick * len(nodes)), len(nodes) - 1)]
        hit = sorted({p.job for p in self.ledger.pods.values() if p.node == node and not p.gone
                      and p.job not in self.ledger.ended})
        # The node counts as gone for the gangs from here (mark_when_all_run: the stall patches' own
        # events must not mark its gangs again), and a gang's exits are put off only after its
        # pending marks landed.
        self.lost_node = node
        for job in hit:
            self.hit.setdefault(job, {})
        await asyncio.gather(*[t for t in self.patches if not t.done()], return_exceptions=True)
        before, stalled = len(self.patches), set(self.stalled)
        for job in hit:  # their training hangs from the loss on
            self.stall(job)
        self.stalled_at_loss = self.stalled - stalled
        await asyncio.gather(*self.patches[before:])
        self.t_loss = time.monotonic()
        self.ledger.lose_node(self.t_loss, node)
        await asyncio.to_thread(self.cluster.lose_node, node)  # kwok restarted without the node
        self.times["lose_node_returned"] = time.monotonic()

    async def play_admin(self) -> None:
        """The admin who knows the machine is down: the out-of-service taint, admin_after_s after
        the node went NotReady/Unknown."""
        await self.node_down.wait()
        await asyncio.sleep(max(0.0, self.times["not_ready"] + self.admin_after_s - time.monotonic()))
        self.times["admin_taint"] = time.monotonic()
        await asyncio.to_thread(self.cluster.kubectl, "taint", "nodes", self.lost_node,
                                f"{OUT_OF_SERVICE_TAINT}=nodeshutdown:NoExecute", "--overwrite")

    def released_at(self) -> float | None:
        """When every member the lost node held was gone (the wait the loss imposes is over)."""
        if self.t_loss is None or "admin_taint" not in self.times:
            return None
        gone = [m.get("lost_pods_gone") for j, m in self.hit.items() if j not in self.ledger.ended]
        return max([g for g in gone if g] + [self.times["admin_taint"]]) if all(gone) else None

    def check_stuck(self, now: float) -> str | None:
        if self.t_loss is None and not self.victim_whole.is_set():
            return self.ledger.stuck(now)  # before the loss: as the stream
        released = self.released_at()
        return None if released is None else self.ledger.stuck(now, since=released)

    async def run(self, timeout: float) -> dict:
        result = await super().run(timeout)
        events = await self.client.list("v1", "events", self.ns)
        reasons: dict[str, int] = {}
        for e in events.get("items") or []:  # this run's jobs only: the namespace keeps earlier trials' events
            involved = e.get("involvedObject") or {}
            if involved.get("kind") == "TFJob" and involved.get("name") in self.specs and e.get("type") == "Warning":
                reasons[e.get("reason", "")] = reasons.get(e.get("reason", ""), 0) + int(e.get("count") or 1)
        since = lambda t: None if t is None or self.t_loss is None else t - self.t_loss  # noqa: E731
        result["node_loss"] = {
            "job": self.victim.name, "node": self.lost_node, "lost": self.t_loss is not None,
            "at_s": self.t_loss - self.ledger.t0 if self.t_loss else None,  # since the run's start
            "victim_whole_to_loss_s": (self.t_loss - self.times["victim_whole"]) if self.t_loss else None,
            "victim_pods_on_node": sum(1 for p in self.ledger.pods.values()
                                       if p.job == self.victim.name and p.node == self.lost_node),
            "lose_node_call_s": since(self.times.get("lose_node_returned")),
            "admin_after_s": self.admin_after_s,
            "loss_to": {k: since(v) for k, v in self.times.items() if k not in ("victim_whole", "lose_node_returned")},
            "hit": {job: {k: since(v) for k, v in marks.items()} | {"gpus": self.specs[job].total_gpus}
                    for job, marks in self.hit.items()},
            "job_status": self.job_status, "tfjob_warnings": reasons}
        return result


# Volcano with its preempt action, for the preemption scenario only (written over the cluster's
# volcano.conf, vc-scheduler restarted; the other tests' Volcano is unchanged). "preempt":
# e2e.harness.volcano's VOLCANO_CONF with "preempt" after "allocate", as Volcano's documentation configures
# it. The two others each take one more obstacle away, to find which one holds preemption back:
# "no-enqueue" drops the enqueue action (allocate then moves Pending groups to Inqueue itself, and
# preempt skips Pending jobs only); "no-gang-veto" also turns off the gang plugin's preemptable
# check (which offers as victims only members beyond a job's minAvailable), leaving the priority
# plugin to pick victims.
VOLCANO_PREEMPT_CONFS = {
    "preempt": volcano_conf("enqueue, allocate, preempt, backfill"),
    "no-enqueue": volcano_conf("allocate, preempt, backfill"),
    "no-gang-veto": volcano_conf("allocate, preempt, backfill", "\n    enablePreemptable: false"),
}


def priority_classes() -> list[dict]:
    return [{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
             "value": value, "description": "tfop contention benchmark, preemption scenario"}
            for name, value in PRIORITY_VALUES.items()]


# -- one scheduler: a cluster, an operator per mode, the trials ---------------------------------

class SchedulerBench:
    def __init__(self, cluster: Cluster, scheduler: str, modes: list[str], args):
        self.cluster, self.scheduler, self.modes, self.args = cluster, scheduler, modes, args
        self.scenario = getattr(args, "scenario", "stream")
        self.wiring = SCHEDULERS[scheduler]
        self.nodes: dict[str, int] = {}
        self.namespaces = {m: f"contention-{m}" for m in modes}
        self.operators: dict = {}

    def start(self) -> None:
        # One operator per mode, each with its own ServiceAccount and exactly the ClusterRole
        # `tfop manifests` renders for its flags (gang_helpers.ScopedOperator), watching its namespace.
        if self.scenario == "preemption":
            self.cluster.apply(priority_classes())
            if self.scheduler == "volcano":
                (self.cluster.dir / "volcano.conf").write_text(self.args.volcano_conf_text)
                self.cluster.restart("volcano-scheduler")
        for mode, ns in self.namespaces.items():
            if self.cluster.kubectl("get", "namespace", ns, check=False).returncode != 0:
                self.cluster.kubectl("create", "namespace", ns)
            wait_until(lambda: self.cluster.kubectl("get", "sa", "default", "-n", ns, check=False).returncode == 0,
                       30, f"default ServiceAccount in {ns}")  # pods are refused before it exists
            gang, extra = (self.wiring.gang, []) if mode == "on" else (None, list(self.wiring.off_args))
            self.operators[mode] = ScopedOperator(self.cluster, [ns], gang, extra).start()

    def stop(self) -> None:
        for op in self.operators.values():
            op.stop()

    def shape(self, trial: Trial) -> None:
        """The trial's nodes: the cluster's fake GPU nodes replaced when the shape changes."""
        if sorted(self.nodes.values()) == [trial.gpus_per_node] * trial.nodes:
            return
        for name in self.nodes:
            self.cluster.remove_node(name)
        names = self.cluster.add_gpu_nodes(trial.nodes, gpus=trial.gpus_per_node)
        self.nodes = {n: trial.gpus_per_node for n in names}

    def clean(self, ns: str) -> None:
        """Jobs, pods and groups gone before the next run: a pod still bound, or a Volcano group
        still Inqueue, would hold capacity the next run counts on."""
        kinds = ["tfjobs.kubeflow.org", "pods"] + ([GROUP_KIND[self.scheduler]] if self.scheduler in GROUP_KIND else [])
        for kind in kinds:
            self.cluster.kubectl("delete", kind, "--all", "-n", ns, "--wait=true", "--timeout=90s", timeout=100)
        deadline = time.monotonic() + 60
        while self.cluster.kubectl("get", ",".join(kinds), "-n", ns, "-o", "name").stdout.strip():
            if time.monotonic() > deadline:
                raise RuntimeError(f"{ns} not empty after 60 s")
            time.sleep(0.5)

    async def trial(self, admin: Admin, trial: Trial) -> dict:
        self.shape(trial)
        runs = {}
        for mode in self.modes:
            ns = self.namespaces[mode]
            self.clean(ns)
            print(f"[contention] {self.scheduler} trial {trial.index} gang {mode}: {trial.nodes}x"
                  f"{trial.gpus_per_node} GPUs, {len(trial.jobs)} jobs", flush=True)
            run_class = PreemptionRun if self.scenario == "preemption" else StreamRun
            runs[mode] = await run_class(admin.client, ns, trial, dict(self.nodes)).run(self.args.run_timeout)
            r = runs[mode]
            if "preemption" in r:
                pre = r["preemption"]
                print(f"[contention]   preemption: high arrival->bound {fmt(pre['high_arrival_to_bound_s'], '.2f')} s, "
                      f"broken {r['broken_gpu_s']:.2f} GPU-s, preempted {pre['preempted_jobs']} (lost pods "
                      f"{pre['lost_pods']}, DisruptionTarget {pre['disruption_reasons']}), back whole and "
                      f"succeeded {pre['back_whole_and_succeeded']}", flush=True)
            print(f"[contention]   {r['outcome']} in {r['duration_s']:.1f}s: partial {r['partial_gpu_s']:.2f} GPU-s, "
                  f"{r['jobs_succeeded']}/{r['jobs']} succeeded, capacity->bound "
                  f"{[round(v, 2) for v in r['capacity_to_bind_s']]}", flush=True)
            self.clean(ns)
        return {"index": trial.index, "nodes": trial.nodes, "gpus_per_node": trial.gpus_per_node,
                "member_failure": any(j.fail_member is not None for j in trial.jobs),
                "jobs": [asdict(j) for j in trial.jobs], "runs": runs}


class SourceOperator(ScopedOperator):
    """A ScopedOperator (the same ServiceAccount and ClusterRole, rendered by the working tree's
    `tfop manifests`) that runs the tfop package of `source`, a tree extracted from a commit, or the
    working tree's when None."""

    def __init__(self, cluster, namespaces: list[str], gang: str | None, extra_args: list[str] | None = None,
                 source: Path | None = None):
        super().__init__(cluster, namespaces, gang, extra_args)
        self.source = source

    def start(self) -> "SourceOperator":
        if self.source is None:
            super().start()
            return self
        self.deploy()
        log = open(self.log_path, "ab")
        # `python -m` puts its working directory first on sys.path, before PYTHONPATH and the
        # editable install: both point at the source tree.
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"} | {"PYTHONPATH": str(self.source)}
        self.process = subprocess.Popen(self.args(), stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.source,
                                        start_new_session=True)
        log.close()
        self.wait_started(timeout=60)
        return self


@dataclass(frozen=True)
class Variant:
    """One operator of the node-loss scenario: the tfop package it runs (None: the working tree's)."""
    name: str
    source: Path | None
    commit: str  # what it is: a commit, or the working tree's HEAD (and "with uncommitted changes")


def extract_tree(ref: str) -> tuple[Path, str]:
    """tfop at commit `ref`, extracted outside the repository (once per commit); returns (dir, sha)."""
    repo = Path(__file__).resolve().parents[2]
    sha = subprocess.run(["git", "rev-parse", f"{ref}^{{commit}}"], cwd=repo, capture_output=True, text=True,
                         check=True).stdout.strip()
    d = Path(tempfile.gettempdir()) / f"tfop-tree-{sha[:12]}"
    if not (d / "tfop" / "__init__.py").exists():
        tmp = Path(tempfile.mkdtemp(prefix=f"tfop-tree-{sha[:12]}-"))
        archive = subprocess.run(["git", "archive", sha, "tfop", "setup.cfg", "pyproject.toml", "templates"],
                                 cwd=repo, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tmp)], input=archive, check=True)
        tmp.rename(d)
    return d, sha


def variants(args) -> list[Variant]:
    """--tfop and --baseline: "worktree" (the working tree's tfop) or a commit."""
    out = []
    for name, ref in (("tfop", args.tfop), ("baseline", args.baseline)):
        if ref == "worktree":
            out.append(Variant(name, None, commit()))
        else:
            d, sha = extract_tree(ref)
            out.append(Variant(name, d, sha[:7]))
    return out


class NodeLossBench(SchedulerBench):
    """The node-loss scenario on one cluster: one gang-on operator per variant, each in its namespace;
    each trial's nodes are the stream's and one spare node, a lost node deleted after its run."""

    def __init__(self, cluster: Cluster, scheduler: str, variants_: list[Variant], args):
        super().__init__(cluster, scheduler, [v.name for v in variants_], args)
        self.variants = {v.name: v for v in variants_}

    def start(self) -> None:
        for name, ns in self.namespaces.items():
            if self.cluster.kubectl("get", "namespace", ns, check=False).returncode != 0:
                self.cluster.kubectl("create", "namespace", ns)
            wait_until(lambda: self.cluster.kubectl("get", "sa", "default", "-n", ns, check=False).returncode == 0,
                       30, f"default ServiceAccount in {ns}")
            self.operators[name] = SourceOperator(self.cluster, [ns], self.wiring.gang,
                                                  source=self.variants[name].source).start()

    def shape(self, trial: Trial) -> None:
        want = trial.nodes + trial.spare_nodes
        if set(self.nodes.values()) <= {trial.gpus_per_node} and len(self.nodes) <= want:
            if len(self.nodes) < want:  # a lost node was deleted: a new one in its place
                names = self.cluster.add_gpu_nodes(want - len(self.nodes), gpus=trial.gpus_per_node)
                self.nodes.update({n: trial.gpus_per_node for n in names})
            return
        for name in self.nodes:
            self.cluster.remove_node(name)
        names = self.cluster.add_gpu_nodes(want, gpus=trial.gpus_per_node)
        self.nodes = {n: trial.gpus_per_node for n in names}

    def drop_lost_node(self, ns: str, node: str | None) -> None:
        """After the run, measured: what the lost node still holds is force-deleted and the node deleted."""
        if not node:
            return
        self.cluster.kubectl("delete", "pods", "-n", ns, "--field-selector", f"spec.nodeName={node}", "--force",
                             "--grace-period=0", "--ignore-not-found", "--wait=false", check=False)
        self.cluster.remove_node(node)
        self.nodes.pop(node, None)

    async def trial(self, admin: Admin, trial: Trial) -> dict:
        self.shape(trial)
        runs = {}
        for name in self.modes:
            ns = self.namespaces[name]
            self.clean(ns)
            print(f"[contention] node-loss {self.scheduler} trial {trial.index} {name}: {trial.nodes}+"
                  f"{trial.spare_nodes}x{trial.gpus_per_node} GPUs, {len(trial.jobs)} jobs, lost gang "
                  f"{trial.node_loss.job}", flush=True)
            run = NodeLossRun(admin.client, ns, trial, dict(self.nodes), self.cluster, self.args.admin_after)
            try:
                runs[name] = r = await run.run(self.args.run_timeout)
            finally:
                await asyncio.to_thread(self.drop_lost_node, ns, run.lost_node)
            loss, victim = r["node_loss"], r["node_loss"]["hit"].get(r["node_loss"]["job"], {})
            print(f"[contention]   {name} trial {trial.index}: {r['outcome']} in {r['duration_s']:.1f}s: lost "
                  f"{loss['node']} (hit {sorted(loss['hit'])}), stuck {r['stuck_gpu_s']:.1f} GPU-s, NotReady "
                  f"+{fmt(loss['loss_to'].get('not_ready'))} s, survivors deleted "
                  f"+{fmt(victim.get('survivors_deleted'))} s, whole again +{fmt(victim.get('whole_again'))} s, "
                  f"{r['jobs_succeeded']}/{r['jobs']} succeeded", flush=True)
            ran_on = sorted(j for j, m in loss["hit"].items() if m.get("survivor_exited") is not None)
            if ran_on:
                print(f"[contention]   HARNESS FAULT: a member of {ran_on} ran to its end while its gang could not "
                      f"progress", flush=True)
            self.clean(ns)
        return {"index": trial.index, "nodes": trial.nodes, "spare_nodes": trial.spare_nodes,
                "gpus_per_node": trial.gpus_per_node, "member_failure": False,
                "node_loss": asdict(trial.node_loss), "jobs": [asdict(j) for j in trial.jobs], "runs": runs}


def run_node_loss(scheduler: str, args, trials: list[Trial], variants_: list[Variant]) -> list[dict]:
    """Without --dir, each variant gets a cluster of its own and the variants run at the same time,
    on the same trials (a trial takes minutes, most of them waiting for the node lifecycle
    controller and the admin); with --dir, one after the other on that cluster."""
    def on(cluster: Cluster, vs: list[Variant]) -> list[dict]:
        return run_trials(NodeLossBench(cluster, scheduler, vs, args), cluster, trials)

    if args.dir:
        return on(Cluster.attach(args.dir), variants_)
    clusters, pool = [], ThreadPoolExecutor(len(variants_))
    try:
        for _ in variants_:  # in this thread: Cluster.up installs a signal handler
            clusters.append(start_cluster(scheduler, SCHEDULERS[scheduler], args.node_monitor_grace_period))
        futures = [pool.submit(on, c, [v]) for c, v in zip(clusters, variants_)]
        parts = [f.result() for f in futures]
    finally:
        for c in clusters:  # first: on an interrupt, the other thread's run then fails and ends
            c.down()
        pool.shutdown(wait=False, cancel_futures=True)
    merged = parts[0]
    for part in parts[1:]:
        for t, other in zip(merged, part):
            t["runs"].update(other["runs"])
    return merged


def draw_trials(args) -> list[Trial]:
    rng = random.Random(args.seed)
    scenario = getattr(args, "scenario", "stream")
    if scenario == "preemption":
        return [draw_preemption_trial(rng, i) for i in range(args.trials)]
    stream = [draw_trial(rng, i, args.jobs, member_failure=args.failure_every > 0 and i % args.failure_every
                         == args.failure_every - 1) for i in range(args.trials)]
    return [draw_node_loss_trial(t, args.seed) for t in stream] if scenario == "node-loss" else stream


def commit() -> str:
    here = Path(__file__).resolve().parent
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], capture_output=True, text=True, cwd=here).stdout.strip()
    head, dirty = git("rev-parse", "--short", "HEAD"), git("status", "--porcelain")
    return head + (" with uncommitted changes" if dirty else "")


def run_scheduler(cluster: Cluster, scheduler: str, args, trials: list[Trial]) -> list[dict]:
    bench = SchedulerBench(cluster, scheduler, ["on", "off"] if args.gang == "both" else [args.gang], args)
    return run_trials(bench, cluster, trials)


def run_trials(bench, cluster: Cluster, trials: list[Trial]) -> list[dict]:
    """Every trial in turn on a bench (its operators started first, stopped whatever happens)."""
    bench.start()

    async def all_trials() -> list[dict]:
        async with Admin(cluster.kubeconfig, connections=16) as admin:
            return [await bench.trial(admin, t) for t in trials]
    try:
        return asyncio.run(all_trials())
    finally:
        bench.stop()


def write_outputs(out: Path, scheduler: str, args, argv: list[str], results: list[dict], took: float) -> str:
    stem = f"contention-{scheduler}"
    meta = {"command": "python -m e2e.bench.contention " + " ".join(argv), "scheduler": scheduler,
            "off_placement": SCHEDULERS[scheduler].off_placement, "seed": args.seed, "trials": args.trials,
            "jobs_per_trial": args.jobs, "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "machine": machine(),
            "tfop_commit": commit(), "took_s": round(took, 1)}
    (out / f"{stem}.json").write_text(json.dumps({"meta": meta, "trials": results}, indent=1))
    modes = [m for m in ("on", "off") if any(m in t["runs"] for t in results)]
    summary = md_table(SUMMARY_HEAD, [summary_row(scheduler, results, m) for m in modes])
    runs = md_table(RUN_HEAD, [run_row(t, m) for t in results for m in modes if m in t["runs"]])
    (out / f"{stem}.md").write_text(
        f"## {scheduler}\n\n`{meta['command']}`: {meta['date']}, {meta['machine']['cpus']} CPUs "
        f"({meta['machine']['cpu_model']}), tfop {meta['tfop_commit']}, {took:.0f} s. Gang off: pods placed by "
        f"{meta['off_placement']}.\n\n{summary}\n\n{runs}\n\n![partial gangs over time]({stem}.png)\n")
    plot(scheduler, results, out / f"{stem}.png")
    return summary


def write_preemption_outputs(out: Path, scheduler: str, args, argv: list[str], results: list[dict],
                             took: float) -> str:
    stem = f"preemption-{scheduler}" + (f"-{args.volcano_conf}" if scheduler == "volcano" else "")
    meta = {"command": "python -m e2e.bench.contention " + " ".join(argv), "scenario": "preemption",
            "scheduler": scheduler, "off_placement": SCHEDULERS[scheduler].off_placement, "seed": args.seed,
            "trials": args.trials, "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "machine": machine(),
            "tfop_commit": commit(), "took_s": round(took, 1),
            "volcano_conf": args.volcano_conf_text if scheduler == "volcano" else None,
            "priority_classes": PRIORITY_VALUES}
    (out / f"{stem}.json").write_text(json.dumps({"meta": meta, "trials": results}, indent=1))
    return render_preemption(out / f"{stem}.json")


def render_preemption(path: Path) -> str:
    """The .md beside a preemption results .json, from it (also: --render PATH)."""
    data = json.loads(path.read_text())
    meta, results, scheduler = data["meta"], data["trials"], data["meta"]["scheduler"]
    modes = [m for m in ("on", "off") if any(m in t["runs"] for t in results)]
    summary = md_table(PREEMPT_SUMMARY_HEAD, [preempt_summary_row(scheduler, results, m) for m in modes])
    runs = md_table(PREEMPT_RUN_HEAD, [preempt_run_row(t, m) for t in results for m in modes if m in t["runs"]])
    conf = f"\n\nvc-scheduler configuration:\n\n```\n{meta['volcano_conf']}```" if meta.get("volcano_conf") else ""
    path.with_suffix(".md").write_text(
        f"## preemption, {scheduler}\n\n`{meta['command']}`: {meta['date']}, {meta['machine']['cpus']} CPUs "
        f"({meta['machine']['cpu_model']}), tfop {meta['tfop_commit']}, {meta['took_s']:.0f} s. Gang off: pods placed "
        f"by {meta['off_placement']}.{conf}\n\n{summary}\n\n{runs}\n")
    return summary


def write_node_loss_outputs(out: Path, scheduler: str, args, argv: list[str], results: list[dict], took: float,
                            variants_: list[Variant]) -> str:
    stem = f"node-loss-{scheduler}"
    meta = {"command": "python -m e2e.bench.contention " + " ".join(argv), "scenario": "node-loss", "scheduler": scheduler,
            "seed": args.seed, "trials": args.trials, "jobs_per_trial": args.jobs, "admin_after_s": args.admin_after,
            "node_monitor_grace_period_s": args.node_monitor_grace_period or 50,
            "variants": {v.name: {"tfop": v.commit, "source": str(v.source) if v.source else "working tree"}
                         for v in variants_},
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "machine": machine(), "harness_commit": commit(),
            "took_s": round(took, 1), "tfjob_warnings": "per run"}
    (out / f"{stem}.json").write_text(json.dumps({"meta": meta, "trials": results}, indent=1))
    return render_node_loss(out / f"{stem}.json")


def per_run_warnings(results: list[dict]) -> list[dict]:
    """Files written before the count was per run hold, in each run, the Warning Events of every trial
    so far in that variant's namespace (its events outlive the jobs): a run's own are the difference."""
    out, seen = json.loads(json.dumps(results)), {}
    for trial in out:
        for variant, run in trial["runs"].items():
            total, before = run["node_loss"]["tfjob_warnings"], seen.get(variant, {})
            run["node_loss"]["tfjob_warnings"] = {k: n - before.get(k, 0) for k, n in total.items()}
            seen[variant] = total
    return out


def render_node_loss(path: Path) -> str:
    """The .md beside a node-loss results .json, from it (also: --render PATH)."""
    data = json.loads(path.read_text())
    meta, results, scheduler = data["meta"], data["trials"], data["meta"]["scheduler"]
    if meta.get("tfjob_warnings") != "per run":
        results = per_run_warnings(results)
    names = [v for v in meta["variants"] if any(v in t["runs"] for t in results)]
    summary = md_table(NODE_LOSS_SUMMARY_HEAD, [node_loss_summary_row(scheduler, results, v,
                                                                      meta["variants"][v]["tfop"]) for v in names])
    runs = md_table(NODE_LOSS_RUN_HEAD, [node_loss_run_row(t, v) for t in results for v in names if v in t["runs"]])
    path.with_suffix(".md").write_text(
        f"## node loss, {scheduler}\n\n`{meta['command']}`: {meta['date']}, {meta['machine']['cpus']} CPUs "
        f"({meta['machine']['cpu_model']}), harness {meta['harness_commit']}, {meta['took_s']:.0f} s. Gang on; "
        f"the admin taints the lost node out-of-service {meta['admin_after_s']:g} s after it is seen NotReady; "
        f"node monitor grace period {meta['node_monitor_grace_period_s']:g} s. Variants: "
        + ", ".join(f"{v} = tfop {i['tfop']} ({i['source']})" for v, i in meta["variants"].items())
        + f".\n\n{summary}\n\n{runs}\n\n![GPUs stuck after the node's loss]({path.stem}.png)\n")
    plot_node_loss(scheduler, results, path.with_suffix(".png"), tuple(names))
    return summary


def write_summary(out: Path, argv: list[str], by_scheduler: dict[str, list[dict]]) -> None:
    """One table over the schedulers of this invocation: a row per scheduler and gang mode."""
    rows = [summary_row(s, trials, m) for s, trials in by_scheduler.items() for m in ("on", "off")]
    (out / "contention-summary.md").write_text(
        f"`python -m e2e.bench.contention {' '.join(argv)}`: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}, "
        f"tfop {commit()}.\n\n{md_table(SUMMARY_HEAD, rows)}\n")


def start_cluster(scheduler: str, wiring: Wiring, node_monitor_grace_period: float | None = None) -> Cluster:
    schedulers = sorted({"default", wiring.cluster})
    build.ensure(components_for(schedulers, wiring.kubernetes))
    d = Path(tempfile.mkdtemp(prefix=f"tfop-contention-{scheduler}-"))
    print(f"[contention] starting a cluster for {scheduler} in {d}", flush=True)
    return Cluster.up(d, gpu_nodes=0, schedulers=schedulers, kubernetes=wiring.kubernetes,
                      node_monitor_grace_period=node_monitor_grace_period)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(prog="python -m e2e.bench.contention", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--scheduler", default="volcano", help="comma-separated: " + ", ".join(SCHEDULERS))
    ap.add_argument("--gang", choices=["on", "off", "both"], default="both")
    ap.add_argument("--jobs", type=int, default=8, help="TFJobs per trial")
    ap.add_argument("--failure-every", type=int, default=3,
                    help="every Nth trial has a member failure mid-run (0: none)")
    ap.add_argument("--run-timeout", type=float, help="seconds; a run still going then ends as timeout (150; "
                                                          "node-loss: 400)")
    ap.add_argument("--out", default="e2e/contention-results")
    ap.add_argument("--dir", help="use the cluster running in this directory (it must run the scheduler)")
    ap.add_argument("--scenario", choices=["stream", "preemption", "node-loss"], default="stream",
                    help="stream: the contention stream; preemption: low-priority gangs fill the cluster, then a "
                         "high-priority gang arrives; node-loss: the stream, gang on, and a node holding a running "
                         "gang's members stops heartbeating (e2e/CONTENTION.md)")
    ap.add_argument("--tfop", default="worktree", help="node-loss: the tfop variant's tfop, the working tree's "
                                                       "(worktree) or a commit")
    ap.add_argument("--baseline", default="cec571e", help="node-loss: the baseline variant's tfop, a commit "
                                                          "(cec571e: before node-loss handling) or worktree")
    ap.add_argument("--admin-after", type=float, default=60.0,
                    help="node-loss: seconds after the lost node is seen NotReady/Unknown when the harness, as the "
                         "admin, taints it node.kubernetes.io/out-of-service")
    ap.add_argument("--node-monitor-grace-period", type=float,
                    help="node-loss: kube-controller-manager's grace period, s (its default, 50, otherwise); "
                         "only for the clusters it starts")
    ap.add_argument("--volcano-conf", choices=list(VOLCANO_PREEMPT_CONFS), default="preempt",
                    help="preemption scenario: vc-scheduler's configuration (VOLCANO_PREEMPT_CONFS)")
    ap.add_argument("--render", metavar="JSON", help="only write the .md of this preemption results .json again")
    args = ap.parse_args(argv)
    if args.render:
        scenario = json.loads(Path(args.render).read_text())["meta"].get("scenario")
        print((render_node_loss if scenario == "node-loss" else render_preemption)(Path(args.render)))
        return 0
    if args.run_timeout is None:
        args.run_timeout = 400.0 if args.scenario == "node-loss" else 150.0
    args.volcano_conf_text = VOLCANO_PREEMPT_CONFS[args.volcano_conf]
    schedulers = [s.strip() for s in args.scheduler.split(",") if s.strip()]
    unknown = set(schedulers) - set(SCHEDULERS)
    if unknown:
        ap.error(f"unknown scheduler(s) {sorted(unknown)}; known: {', '.join(SCHEDULERS)}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    trials = draw_trials(args)
    failed, by_scheduler = False, {}
    if args.scenario == "node-loss":
        vs = variants(args)
        for scheduler in schedulers:
            t = time.monotonic()
            results = run_node_loss(scheduler, args, trials, vs)
            print(write_node_loss_outputs(out, scheduler, args, argv, results, time.monotonic() - t, vs), flush=True)
            failed |= any(r["outcome"] == "timeout" for t_ in results for r in t_["runs"].values())
        print(f"[contention] wrote {out}/node-loss-<scheduler>.{{json,md}}")
        return 2 if failed else 0
    for scheduler in schedulers:
        wiring, t = SCHEDULERS[scheduler], time.monotonic()
        if args.dir:
            cluster = Cluster.attach(args.dir)
            if (wiring.cluster not in cluster.state.get("schedulers", [])
                    or cluster.state.get("kubernetes") != wiring.kubernetes):
                ap.error(f"the cluster in {args.dir} does not run {scheduler}")
        else:
            cluster = start_cluster(scheduler, wiring)
        try:
            results = run_scheduler(cluster, scheduler, args, trials)
        finally:
            if not args.dir:
                cluster.down()
        if args.scenario == "preemption":
            summary = write_preemption_outputs(out, scheduler, args, argv, results, time.monotonic() - t)
        else:
            summary = write_outputs(out, scheduler, args, argv, results, time.monotonic() - t)
            by_scheduler[scheduler] = results
        print(summary, flush=True)
        failed |= any(r["outcome"] == "timeout" for t_ in results for r in t_["runs"].values())
    if len(by_scheduler) > 1:
        write_summary(out, argv, by_scheduler)
    print(f"[contention] wrote {out}/" + ("preemption-<scheduler>.{json,md}" if args.scenario == "preemption"
                                         else "contention-<scheduler>.{json,md,png}"))
    return 2 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
