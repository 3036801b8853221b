"""The contention benchmark: what gang scheduling saves when TFJobs compete for GPUs.

    python -m e2e.contention [--trials N] [--seed S]
                             [--scheduler volcano|scheduler-plugins|koordinator|kubernetes[,...]]
                             [--gang on|off|both] [--jobs J] [--out DIR] [--dir CLUSTER_DIR]
                             [--scenario stream|preemption] [--volcano-conf preempt|no-enqueue|no-gang-veto]

Each trial draws, from the seed, a cluster (3-6 kwok nodes of 1, 2 or 4 GPUs) and a stream of
TFJobs (e2e.contention_lib.draw_trial), and runs the same stream with tfop's gang scheduling on
and off, one after the other on the same nodes. A job's pods run for its run time from the
moment all of them run (the harness then sets kwok's exit markers), as distributed training
makes no progress before every worker is up. A watch on pods and TFJobs feeds the ledger
(contention_lib.Ledger); see e2e/CONTENTION.md for the method and the metrics' definitions.

--scenario preemption: low-priority gangs fill the cluster, then a high-priority gang arrives
(contention_lib.draw_preemption_trial, PreemptionRun); it measures gangs broken by preemption.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import aiohttp

from e2e import build
from e2e.bench import machine
from e2e.bench_lib import Admin
from e2e.cluster import (COSCHEDULING_SCHEDULER_NAME, GPU_RESOURCE, KOORDINATOR_SCHEDULER_NAME, Cluster, components_for,
                         volcano_conf)
from e2e.contention_lib import (HIGH_PRIORITY, PREEMPT_RUN_HEAD, PREEMPT_SUMMARY_HEAD, PRIORITY_VALUES, RUN_HEAD,
                                SUMMARY_HEAD, Ledger, Trial, draw_preemption_trial, draw_trial, fmt, md_table, plot,
                                preempt_run_row, preempt_summary_row, run_row, summary_row)
from e2e.kwok_stages import EXIT_CODE_ANNOTATION, EXIT_DELAY_ANNOTATION, EXIT_LABEL
from tfop.api.constants import LABEL_JOB
from tfop.kube.client import ApiError

TICK_S = 0.25  # how often the run checks its own ledger (no API call)


@dataclass(frozen=True)
class Wiring:
    """How tfop meets one scheduler, gang on and off."""
    cluster: str  # e2e.cluster scheduler set member
    gang: str  # --gang-scheduler-name
    off_args: tuple[str, ...]  # tfop's flags without gang scheduling
    off_placement: str  # who places pods without gangs, and why
    kubernetes: str | None = None  # the control plane: None, the harness's own; "1.37", e2e.cluster's optional one


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

    async def run(self, timeout: float) -> dict:
        ready = [asyncio.Event(), asyncio.Event()]
        watches = [asyncio.create_task(follow(self.client, "v1", "pods", self.ns, self.on_pod, ready[0])),
                   asyncio.create_task(follow(self.client, "kubeflow.org/v1", "tfjobs", self.ns, self.on_job,
                                              ready[1]))]
        await asyncio.wait_for(asyncio.gather(*(r.wait() for r in ready)), 60)
        self.ledger = Ledger(self.ledger.nodes, self.specs, time.monotonic())  # t0: the watches are up
        submitter = asyncio.create_task(self.submit())
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
            stuck = self.ledger.stuck(now)
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


# Volcano with its preempt action, for the preemption scenario only (written over the cluster's
# volcano.conf, vc-scheduler restarted; the other tests' Volcano is unchanged). "preempt":
# e2e.cluster's VOLCANO_CONF with "preempt" after "allocate", as Volcano's documentation configures
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
        from e2e.tests.gang_helpers import ScopedOperator, wait_until

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


def draw_trials(args) -> list[Trial]:
    rng = random.Random(args.seed)
    if getattr(args, "scenario", "stream") == "preemption":
        return [draw_preemption_trial(rng, i) for i in range(args.trials)]
    return [draw_trial(rng, i, args.jobs, member_failure=args.failure_every > 0 and i % args.failure_every
                       == args.failure_every - 1) for i in range(args.trials)]


def commit() -> str:
    here = Path(__file__).resolve().parent
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], capture_output=True, text=True, cwd=here).stdout.strip()
    head, dirty = git("rev-parse", "--short", "HEAD"), git("status", "--porcelain")
    return head + (" with uncommitted changes" if dirty else "")


def run_scheduler(cluster: Cluster, scheduler: str, args, trials: list[Trial]) -> list[dict]:
    bench = SchedulerBench(cluster, scheduler, ["on", "off"] if args.gang == "both" else [args.gang], args)
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
    meta = {"command": "python -m e2e.contention " + " ".join(argv), "scheduler": scheduler,
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
    meta = {"command": "python -m e2e.contention " + " ".join(argv), "scenario": "preemption",
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


def write_summary(out: Path, argv: list[str], by_scheduler: dict[str, list[dict]]) -> None:
    """One table over the schedulers of this invocation: a row per scheduler and gang mode."""
    rows = [summary_row(s, trials, m) for s, trials in by_scheduler.items() for m in ("on", "off")]
    (out / "contention-summary.md").write_text(
        f"`python -m e2e.contention {' '.join(argv)}`: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}, "
        f"tfop {commit()}.\n\n{md_table(SUMMARY_HEAD, rows)}\n")


def start_cluster(scheduler: str, wiring: Wiring) -> Cluster:
    schedulers = sorted({"default", wiring.cluster})
    build.ensure(components_for(schedulers, wiring.kubernetes))
    d = Path(tempfile.mkdtemp(prefix=f"tfop-contention-{scheduler}-"))
    print(f"[contention] starting a cluster for {scheduler} in {d}", flush=True)
    return Cluster.up(d, gpu_nodes=0, schedulers=schedulers, kubernetes=wiring.kubernetes)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(prog="python -m e2e.contention", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--scheduler", default="volcano", help="comma-separated: " + ", ".join(SCHEDULERS))
    ap.add_argument("--gang", choices=["on", "off", "both"], default="both")
    ap.add_argument("--jobs", type=int, default=8, help="TFJobs per trial")
    ap.add_argument("--failure-every", type=int, default=3,
                    help="every Nth trial has a member failure mid-run (0: none)")
    ap.add_argument("--run-timeout", type=float, default=150, help="seconds; a run still going then ends as timeout")
    ap.add_argument("--out", default="e2e/contention-results")
    ap.add_argument("--dir", help="use the cluster running in this directory (it must run the scheduler)")
    ap.add_argument("--scenario", choices=["stream", "preemption"], default="stream",
                    help="stream: the contention stream; preemption: low-priority gangs fill the cluster, then a "
                         "high-priority gang arrives (e2e/CONTENTION.md)")
    ap.add_argument("--volcano-conf", choices=list(VOLCANO_PREEMPT_CONFS), default="preempt",
                    help="preemption scenario: vc-scheduler's configuration (VOLCANO_PREEMPT_CONFS)")
    ap.add_argument("--render", metavar="JSON", help="only write the .md of this preemption results .json again")
    args = ap.parse_args(argv)
    if args.render:
        print(render_preemption(Path(args.render)))
        return 0
    args.volcano_conf_text = VOLCANO_PREEMPT_CONFS[args.volcano_conf]
    schedulers = [s.strip() for s in args.scheduler.split(",") if s.strip()]
    unknown = set(schedulers) - set(SCHEDULERS)
    if unknown:
        ap.error(f"unknown scheduler(s) {sorted(unknown)}; known: {', '.join(SCHEDULERS)}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    trials = draw_trials(args)
    failed, by_scheduler = False, {}
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
