"""Benchmark: how fast a burst of TFJobs starts, what it costs the apiserver, and
the operator's CPU and memory — tfop against the apiserver's own limit (a raw
client creating the same objects) and the upstream Go training-operator.

    python -m e2e.bench [--jobs 400] [--replicas 1ps+4w] [--nodes N]
                        [--gang none|volcano|scheduler-plugins]
                        [--against raw,upstream] [--out DIR] [--dir CLUSTER_DIR] [--pin-operator]
    python -m e2e.bench --training 10 [--out DIR]   # real TensorFlow on the real node (e2e.bench.training)

Rows, one after another in fresh namespaces of one cluster: raw, tfop,
upstream default, upstream tuned. See e2e/BENCHMARK.md for the method.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from e2e import build
from e2e.bench.apiserver_requests import Admin, operator_requests, other_writes, throttled
from e2e.bench.control_plane_figures import compact_etcd, component_cpu, scheduler_clients, scheduler_throttle
from e2e.bench.machine import pin, proc_stats, split_cpus, stolen_seconds
from e2e.bench.operator_metrics import operator_metrics, operator_passes, own_requests, watch_received
from e2e.bench.pprof import ControlPlaneProfile, summarise
from e2e.bench.submitters import PLURALS, strip_owner, submit_raw, submit_raw_threaded, submit_tfjobs
from e2e.bench.watchers import BesideWrites, Census, ObjectClock, PodClock, per_job, rows_in_the_way, stop, until
from e2e.harness.cluster import Cluster
from e2e.harness.kwok import KWOK_NODE_ANNOTATION, NODE_LABEL, NODE_LABEL_VALUE
from e2e.harness.processes import free_port
from e2e.harness.tfop_operator import OPERATOR_ACCOUNT, OPERATOR_NAMESPACE, OperatorProcess, deploy_manifests
from e2e.harness.upstream_operator import UpstreamProcess
from tfop.core.settings import DEFAULT_MAX_PODS_PER_JOB
from tfop.kube.client import KubeClient
from tfop.kube.credentials import load_credentials

GANG_SCHEDULERS = {"none": ["default"], "volcano": ["default", "volcano"],
                   "scheduler-plugins": ["default", "coscheduling"]}
RAW_ROWS = ("raw", "raw+tfjob")  # rows with no operator: a client creates what an operator would


def parse_replicas(text: str) -> dict[str, int]:
    names = {"ps": "PS", "w": "Worker", "worker": "Worker", "chief": "Chief", "c": "Chief",
             "evaluator": "Evaluator", "e": "Evaluator", "master": "Master"}
    out = {}
    for part in text.split("+"):
        m = re.fullmatch(r"(\d+)([a-z]+)", part.strip().lower())
        if not m or m.group(2) not in names:
            raise argparse.ArgumentTypeError(f"bad replica spec {part!r} (e.g. 1ps+4w)")
        out[names[m.group(2)]] = int(m.group(1))
    return out


def tfjob(name: str, namespace: str, replicas: dict[str, int]) -> dict:
    container = {"name": "tensorflow", "image": "tfop-bench:1"}
    return {
        "apiVersion": "kubeflow.org/v1", "kind": "TFJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"tfReplicaSpecs": {
            rtype: {"replicas": n, "restartPolicy": "Never", "template": {"spec": {"containers": [container]}}}
            for rtype, n in replicas.items()}},
    }


def gang_name(gang: str) -> str | None:
    return None if gang == "none" else gang


def render_context(gang: str):
    from tfop.tools.offline.commands import _context

    return _context(gang != "none", gang_name(gang) or "", None)


def add_nodes(cluster: Cluster, n: int, pods_per_node: int) -> None:
    alloc = {"cpu": "1000", "memory": "4Ti", "pods": str(pods_per_node)}
    names = [f"bench-{i}" for i in range(n)]
    cluster.apply([{
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": nm, "annotations": {KWOK_NODE_ANNOTATION: "fake"},
                     "labels": {NODE_LABEL: NODE_LABEL_VALUE, "type": "kwok", "kubernetes.io/hostname": nm,
                                "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}},
        "status": {"capacity": alloc, "allocatable": alloc}} for nm in names])
    for nm in names:
        cluster.kubectl("patch", "node", nm, "--subresource=status", "--type=merge",
                        "-p", json.dumps({"status": {"capacity": alloc, "allocatable": alloc}}))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        out = cluster.kubectl("get", "nodes", "-l", f"{NODE_LABEL}={NODE_LABEL_VALUE}", "-o", READY_JSONPATH).stdout
        ready = {kv.split("=")[0] for kv in out.split() if kv.endswith("=True")}
        if set(names) <= ready:
            return
        time.sleep(0.5)
    raise RuntimeError("bench nodes not Ready")


READY_JSONPATH = "jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=='Ready')].status} {end}"


def percentile(values: list[float], p: float) -> float | None:
    if not values:
        return None
    v = sorted(values)
    k = (len(v) - 1) * p / 100
    lo, hi = math.floor(k), math.ceil(k)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def delete_namespace(cluster: Cluster, ns: str, timeout: float = 600) -> float:
    t = time.monotonic()
    cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
    while time.monotonic() - t < timeout:
        if cluster.kubectl("get", "namespace", ns, check=False).returncode != 0:
            break
        time.sleep(1)
    return time.monotonic() - t


@dataclass
class Window:
    """What one burst measured: monotonic times, and counters from before t0 and after the idle wait."""
    t0: float
    submitted: float
    end: float  # the last pod seen Running
    last: float  # the last change of the operator keys' counters
    idle: bool
    timed_out: bool
    sent: dict  # job -> its first create request
    m0: Counter
    m1: Counter
    cpu0: dict  # component -> CPU s
    cpu1: dict
    throttle0: dict  # scheduler -> seconds waited for its client rate limiter
    throttle1: dict
    op0: dict | None = None  # proc_stats of the operator
    op1: dict | None = None
    raw_cpu: float | None = None
    measured: float = 0.0  # when the counters after the idle wait were read
    stolen_s: float | None = None  # the machine's steal over the same window (stolen_seconds)


class Bench:
    """The burst rows of one run, one after another, each in a fresh namespace."""

    def __init__(self, cluster: Cluster, args):
        self.cluster, self.args = cluster, args
        self.beside_sent: int | None = None  # the last row's writes beside it (--beside-writes)
        self.replicas = parse_replicas(args.replicas)
        self.pods_per_job = sum(self.replicas.values())
        self.ctx = render_context(args.gang)
        self.run_id = time.strftime("%H%M%S")
        self.row_profiles: dict[str, Path] = {}  # --pprof: the last burst's, by component
        self.metrics_port = 0  # the tfop row's operator's
        self.operator_cpu: int | None = None  # --pin-operator: the CPU each operator started is moved to
        self.log_dir = Path(args.out) / "logs"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        jobs = args.single or args.jobs
        # Bounds for a hang, not for a slow run: they grow with the burst (J=5000 is 25,000 pods and
        # 25,000 services; the namespace controller and kwok delete ~300 objects/s here).
        self.timeout = args.timeout or max(900.0, 0.1 * jobs * self.pods_per_job)
        self.settle_timeout = max(120.0, 0.05 * jobs)
        self.delete_timeout = max(600.0, 0.05 * jobs * sum(self.objects_per_job().values()))

    def sample_objects(self) -> list[dict]:
        from tfop.tools.offline.render import first_start_objects

        return first_start_objects(tfjob("x", "default", self.replicas), self.ctx)

    def objects_per_job(self) -> Counter:
        return Counter(o["kind"] for o in self.sample_objects())

    def clocks(self, client: KubeClient, ns: str, jobs: int) -> tuple[PodClock, Census]:
        """A clock per kind of object the jobs should have (pods, services, the gang's group)."""
        api = {o["kind"]: o["apiVersion"] for o in self.sample_objects()}
        pods = PodClock(client, ns, expected=jobs * self.pods_per_job)
        clocks: dict[str, ObjectClock] = {
            kind: pods if kind == "Pod" else ObjectClock(client, ns, api[kind], PLURALS[kind]) for kind in api}
        expected = Counter({kind: n * jobs for kind, n in self.objects_per_job().items()})
        return pods, Census(clocks, expected)

    def new_namespace(self, label: str) -> str:
        ns = f"bench-{re.sub(r'[^a-z0-9]+', '-', label)}-{self.run_id}"
        listed = self.cluster.kubectl("get", "namespaces", "-o", "jsonpath={.items[*].metadata.name}").stdout
        others = rows_in_the_way(listed.split(), self.run_id)
        if others:
            raise SystemExit(f"[bench] {label}: namespace {', '.join(others)} of another benchmark run is still "
                             "here (running, or being deleted); a row beside it would measure both: wait, or "
                             "delete it")
        self.cluster.kubectl("create", "namespace", ns)
        print(f"[bench] {label}: namespace {ns}", flush=True)
        return ns

    def render(self, jobs: list[dict]) -> dict[str, list[dict]]:
        """The raw row's objects, rendered before t0 (J=5000 takes ~45 s and ~300 MB here)."""
        from tfop.tools.offline.render import first_start_objects

        t = time.monotonic()
        rendered = {j["metadata"]["name"]: [strip_owner(o) for o in first_start_objects(j, self.ctx)] for j in jobs}
        print(f"[bench] raw: {sum(map(len, rendered.values()))} objects rendered in {time.monotonic() - t:.1f}s",
              flush=True)
        return rendered

    async def start_operator(self, admin: Admin, label: str, ns: str):
        """The operator under test, started and idle; None for the raw row."""
        gang = gang_name(self.args.gang)
        if label in RAW_ROWS:
            return None
        if label == "tfop":
            # A job over the operator's default bound (--max-pods-per-job) is refused, as documented.
            big = self.pods_per_job > DEFAULT_MAX_PODS_PER_JOB
            extra = ["--max-pods-per-job", str(self.pods_per_job)] if big else []
            # its passes a job are read from its own /metrics (the last --metrics-bind-address wins)
            self.metrics_port = free_port()
            extra += ["--metrics-bind-address", f"127.0.0.1:{self.metrics_port}", *self.args.tfop_arg]
            operator = TfopProcess(self.cluster, [ns], gang, extra_args=extra, log_dir=self.log_dir).start()
        else:
            a = self.args
            operator = UpstreamProcess(self.cluster, ns, gang, tuned=label.endswith("tuned"), log_dir=self.log_dir,
                                       threads=a.upstream_threads, qps=a.upstream_qps, burst=a.upstream_burst).start()
        self.pin_operator(operator)
        await admin.wait_idle(quiet=1.0, timeout=30)
        return operator

    def pin_operator(self, operator) -> None:
        if self.operator_cpu is not None:
            pin(operator.process.pid, {self.operator_cpu})

    def raw_kubeconfig(self) -> Path:
        # The raw client has the operator's identity (its ServiceAccount): system:masters is never
        # answered 429 by the apiserver's in-flight limit, and an operator never is system:masters.
        return self.cluster.service_account_kubeconfig(OPERATOR_NAMESPACE, OPERATOR_ACCOUNT)

    # -- one row -------------------------------------------------------------------------------
    async def row(self, admin: Admin, label: str) -> dict:
        ns = self.new_namespace(label)
        jobs = [tfjob(f"job-{i:05d}", ns, self.replicas) for i in range(self.args.jobs)]
        rendered = self.render(jobs) if label in RAW_ROWS else None
        operator = await self.start_operator(admin, label, ns)
        try:
            clock, census = self.clocks(admin.client, ns, len(jobs))
            w = await self.burst(admin, label, ns, jobs, rendered, operator, census)
            result = figures(label, ns, len(jobs), self.pods_per_job, clock, census, w)
            if operator:
                result["operator_cpus"] = sorted(os.sched_getaffinity(operator.process.pid))
            if self.beside_sent is not None:
                result["beside_writes"] = self.beside_sent
            if label == "tfop":  # from its start to the idle wait's end: every job's passes, resyncs too
                text = operator_metrics(self.metrics_port)
                result["passes_per_job"] = None if text is None else operator_passes(text) / len(jobs)
                result["watch_per_job"] = None if text is None else {
                    resource: tuple(n / len(jobs) for n in tally) for resource, tally in watch_received(text).items()}
                result["own_requests_per_job"] = None if text is None else {
                    key: n / len(jobs) for key, n in sorted(own_requests(text).items())}
            result.update(await request_figures(admin, label, ns, len(jobs), w))
            if operator:
                result.update(await self.restart(admin, operator, label, ns))
            if self.row_profiles:  # read after the row: `go tool pprof` must not run in a timed window
                result["control_plane_profile"] = {c: summarise(c, p) for c, p in self.row_profiles.items()}
        finally:
            if operator:
                operator.stop()
        print(f"[bench] {label}: {summary(result)}", flush=True)
        await self.finish(admin, ns, result)
        return result

    async def finish(self, admin: Admin, ns: str, result: dict) -> None:
        if not self.args.keep:
            result["namespace_delete_s"] = delete_namespace(self.cluster, ns, self.delete_timeout)
            # The next row starts on a quiet control plane: without this one's history, and with the
            # controllers done with its deletion (their endpoint deletes would run into the next row).
            compact_etcd(self.cluster)
            _, _, result["quiet_after_delete"] = await admin.wait_quiet(quiet=3.0, timeout=self.delete_timeout)

    async def burst(self, admin: Admin, label: str, ns: str, jobs: list[dict], rendered, operator,
                    census: Census) -> Window:
        """Submit every job at once; wait until every pod runs and every object exists, then idle."""
        pid = operator.process.pid if operator else None
        spy = self.profile(pid, label, ns)
        clock = census.clocks["Pod"]
        kubeconfig = self.raw_kubeconfig() if rendered is not None else None  # two kubectl runs: not in the time
        tasks = await census.start()
        pprof = ControlPlaneProfile(self.cluster, self.log_dir, ns).start() if self.args.pprof else None
        m0, op0, throttle0 = await admin.metrics(), proc_stats(pid) if pid else None, scheduler_throttle(self.cluster)
        beside = None
        if self.args.beside_writes:
            beside = BesideWrites(admin.client, f"{ns}-beside", self.args.beside_writes)
            await beside.start()
        cpu0, stolen0 = component_cpu(self.cluster), stolen_seconds()
        t0 = time.monotonic()
        raw_cpu = None
        if rendered is not None:
            with_jobs = {j["metadata"]["name"]: j for j in jobs} if label == "raw+tfjob" else None
            sent, raw_cpu = await submit_raw_threaded(kubeconfig, rendered, self.args.connections, with_jobs,
                                                      self.cluster.kubeconfig)
        else:
            sent = await submit_tfjobs(admin.client, jobs)
        submitted = time.monotonic()
        timed_out = not await until(clock.done, self.timeout - (submitted - t0))
        if not timed_out:  # every pod runs: the services and groups are due by now (objects_s None if not)
            await until(census.complete, 60)
        end = max((t for _, t in clock.running.values()), default=time.monotonic())
        if beside is not None:
            await beside.stop()
        await stop(tasks)
        self.row_profiles = await pprof.stop() if pprof else {}
        last, m1, idle = await admin.wait_idle(quiet=2.0, timeout=self.settle_timeout, since=end)
        self.beside_sent = beside.sent if beside is not None else None
        w = Window(t0, submitted, end, last, idle, timed_out, sent, m0, m1, cpu0, component_cpu(self.cluster),
                   throttle0, scheduler_throttle(self.cluster), op0, proc_stats(pid) if pid else None, raw_cpu,
                   time.monotonic(), stolen_seconds() - stolen0)
        if spy is not None:
            spy.send_signal(2)
            spy.wait(timeout=30)
        return w

    def profile(self, pid: int | None, label: str, ns: str) -> subprocess.Popen | None:
        """TFOP_BENCH_PYSPY=1 (or a sampling rate, per second: 50 unless given): py-spy over the tfop
        row's burst, collapsed stacks next to the results."""
        rate = os.environ.get("TFOP_BENCH_PYSPY", "")
        if not (pid and rate and label == "tfop"):
            return None
        rate = rate if rate.isdigit() and int(rate) > 1 else "50"
        return subprocess.Popen(["py-spy", "record", "--pid", str(pid), "--format", "raw", "--rate", rate,
                                 "--nonblocking", "-o", str(self.log_dir / f"pyspy-{ns}.txt")],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    async def restart(self, admin: Admin, operator, label: str, ns: str) -> dict:
        """Stop the operator, start a new one with the same J jobs running; time to idle, writes."""
        operator.stop()
        await asyncio.sleep(1)
        m2 = await admin.metrics()
        t_spawn = time.monotonic()
        # With J=5000 jobs running, the new one first lists 5000 TFJobs, 25,000 pods and 25,000 services.
        if label == "tfop":
            operator.start(deploy=False, timeout=self.settle_timeout)
        else:
            operator.start(timeout=self.settle_timeout)
        self.pin_operator(operator)
        t_ready = time.monotonic()
        last, m3, idle = await admin.wait_idle(quiet=2.0, timeout=self.settle_timeout, since=t_spawn)
        stats = proc_stats(operator.process.pid)
        ops = operator_requests(m3 - m2)
        return {
            "restart_ready_s": t_ready - t_spawn, "restart_idle_s": max(last, t_ready) - t_spawn,
            "restart_settled": idle,
            "restart_writes": sum(n for (v, r), n in ops.items() if r != "events"),
            "restart_events": sum(n for (v, r), n in ops.items() if r == "events"),
            "restart_writes_by": {f"{v} {r}": n for (v, r), n in sorted(ops.items())},
            "restart_reads_by": reads_by(m3 - m2),
            "restart_rss_mb": stats["rss"] / 2**20,
        }

    async def run(self, rows: list[str]) -> list[dict]:
        results = []
        async with Admin(self.cluster.kubeconfig, connections=self.args.connections) as admin:
            for label in rows:
                results.append(await self.row(admin, label))
        return results


class SingleBench(Bench):
    """--single N: the jobs one at a time on an otherwise idle cluster, the operator up across them.
    Per job, from its create request (raw: its first object's) until every pod of it is seen created,
    and until every pod is seen Running; then 0.5 s and the next job."""

    async def row(self, admin: Admin, label: str) -> dict:
        ns = self.new_namespace(label)
        jobs = [tfjob(f"job-{i:05d}", ns, self.replicas) for i in range(self.args.single)]
        rendered = self.render(jobs) if label == "raw" else None
        operator = await self.start_operator(admin, label, ns)
        clock = PodClock(admin.client, ns, expected=len(jobs) * self.pods_per_job)
        tasks = await Census({"Pod": clock}, Counter()).start()
        try:
            if rendered is None:
                created, running, timed_out = await self.one_by_one(admin.client, clock, jobs, rendered)
            else:
                created, running, timed_out = await self.raw_one_by_one(ns, clock, jobs, rendered)
        finally:
            await stop(tasks)
            if operator:
                operator.stop()
        result = {"row": label, "namespace": ns, "jobs": len(jobs), "jobs_started": len(running),
                  "timed_out": timed_out, "created_s": created, "running_s": running}
        for name, values in (("created", created), ("running", running)):
            result.update({f"single_{name}_p50_s": percentile(values, 50),
                           f"single_{name}_p99_s": percentile(values, 99),
                           f"single_{name}_max_s": max(values, default=None)})
        print(f"[bench] {label}: {single_summary(result)}", flush=True)
        await self.finish(admin, ns, result)
        return result

    async def raw_one_by_one(self, ns: str, clock: PodClock, jobs: list[dict], rendered: dict):
        kubeconfig = self.raw_kubeconfig()
        async with KubeClient(load_credentials(str(kubeconfig)), max_connections=self.args.connections) as raw:
            # Its connections open before the first job, as the operator's and the admin client's have:
            # no TLS handshakes in the first job's time.
            await asyncio.gather(*(raw.list("v1", "pods", ns, limit=1) for _ in rendered[jobs[0]["metadata"]["name"]]))
            return await self.one_by_one(raw, clock, jobs, rendered)

    async def one_by_one(self, client: KubeClient, clock: PodClock, jobs: list[dict], rendered):
        """Returns (seconds to every pod created, to every pod Running, per job; timed out?)."""
        created: list[float] = []
        running: list[float] = []
        for job in jobs:
            name = job["metadata"]["name"]
            if rendered is not None:
                sent = (await submit_raw(client, {name: rendered[name]}))[name]
            else:
                sent = (await submit_tfjobs(client, [job]))[name]
            if not await until(lambda: per_job(clock.running).get(name, (0, 0.0))[0] >= self.pods_per_job,
                               self.timeout):
                return created, running, True
            created.append(per_job(clock.created)[name][1] - sent)
            running.append(per_job(clock.running)[name][1] - sent)
            await asyncio.sleep(0.5)
        return created, running, False


class TfopProcess(OperatorProcess):
    def start(self, deploy: bool = True, timeout: float = 120) -> "TfopProcess":
        if deploy:
            deploy_manifests(self.cluster, self.gang)
        # A fresh log per start: wait_started looks for "caches synced" in it.
        self.log_path = self.log_dir / f"tfop-{'-'.join(self.namespaces)}-{int(time.time() * 1000)}.log"
        log = open(self.log_path, "ab")
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        self.process = subprocess.Popen(self.args(), stdout=log, stderr=subprocess.STDOUT, env=env,
                                        cwd=Path(__file__).resolve().parents[2], start_new_session=True)
        log.close()
        self.wait_started(timeout=timeout)
        return self


# -- figures --------------------------------------------------------------------------------------

def figures(label: str, ns: str, J: int, pods_per_job: int, clock: PodClock, census: Census, w: Window) -> dict:
    """Times and CPU of one burst."""
    started = {job: t for job, (n, t) in per_job(clock.running).items() if n >= pods_per_job}
    latencies = [started[j] - w.sent[j] for j in started if j in w.sent]
    wall = w.end - w.t0
    last_object = census.last_seen()
    result = {
        "row": label, "namespace": ns, "jobs": J, "pods": J * pods_per_job,
        "pods_running": len(clock.running), "jobs_started": len(started), "timed_out": w.timed_out,
        "wall_s": wall, "submit_s": w.submitted - w.t0, "pods_per_s": len(clock.running) / wall if wall > 0 else None,
        "objects_s": last_object - w.t0 if last_object is not None else None,
        "objects_seen": {k: len(c.created) for k, c in census.clocks.items()},
        "latency_p50_s": percentile(latencies, 50), "latency_p95_s": percentile(latencies, 95),
        "latency_p99_s": percentile(latencies, 99), "latency_max_s": max(latencies, default=None),
        "settle_s": w.last - w.t0, "settled": w.idle,
        "timeline_s": sorted(t - w.t0 for t in started.values()),
    }
    if w.op0 and w.op1:
        cpu = w.op1["cpu_s"] - w.op0["cpu_s"]
        result.update(cpu_s=cpu, cpu_ms_per_job=1000 * cpu / J, peak_rss_mb=w.op1["peak_rss"] / 2**20,
                      rss_mb=w.op1["rss"] / 2**20,
                      user_ms_per_job=1000 * (w.op1["user_s"] - w.op0["user_s"]) / J,
                      system_ms_per_job=1000 * (w.op1["system_s"] - w.op0["system_s"]) / J,
                      wakeups_per_job=(w.op1["wakeups"] - w.op0["wakeups"]) / J)
    elif w.raw_cpu is not None:  # the raw client's thread; its memory is the benchmark's, not told apart
        result.update(cpu_s=w.raw_cpu, cpu_ms_per_job=1000 * w.raw_cpu / J)
    # The control plane's CPU over the same window (t0 to the end of the idle wait).
    components = {n: w.cpu1[n] - w.cpu0[n] for n in w.cpu1 if n in w.cpu0}
    result["component_cpu_s"] = components
    # Did a scheduler's client QPS bound the row? (--scheduler-qps)
    result["scheduler_throttle_s"] = {n: w.throttle1[n] - w.throttle0[n] for n in w.throttle1 if n in w.throttle0}
    # Every process's CPU over the window against what the machine had (cores x window): near 1, the row is
    # bound by the machine's CPU, and a second of any process's CPU (the operator's, the apiserver's) is wall.
    result["all_cpu_s"] = sum(components.values()) + result.get("cpu_s", 0.0)
    span = w.measured - w.t0  # the counters' window: the wall and the idle wait after it
    result["machine_busy"] = result["all_cpu_s"] / ((os.cpu_count() or 1) * span) if span > 0 else None
    result["machine_stolen_s"] = w.stolen_s
    for name, key in (("kube-apiserver", "apiserver"), ("etcd", "etcd")):
        if name in components:
            result[f"{key}_cpu_s"] = components[name]
            result[f"{key}_cpu_ms_per_job"] = 1000 * components[name] / J
    return result


def reads_by(delta: Counter) -> dict[str, int]:
    return {f"{v} {r}": n for (v, r), n in sorted(operator_requests(delta, writes_only=False).items())
            if v not in ("POST", "PUT", "PATCH", "DELETE", "APPLY")}


async def request_figures(admin: Admin, label: str, ns: str, J: int, w: Window) -> dict:
    """What the apiserver counted over the burst and the idle wait after it."""
    delta = w.m1 - w.m0
    ops = operator_requests(delta)
    if label != "raw":  # the submitter's own TFJob POSTs are not the operator's
        ops[("POST", "tfjobs")] -= J
        if ops[("POST", "tfjobs")] <= 0:
            del ops[("POST", "tfjobs")]
    events = await admin.job_events(ns)
    writes = sum(n for (v, r), n in ops.items() if r != "events")
    return {
        "writes_per_job": writes / J, "events_per_job": events / J, "throttled_per_job": throttled(delta) / J,
        "writes_by": {f"{v} {r}": n for (v, r), n in sorted(ops.items())},
        "reads_by": reads_by(delta),
        "other_writes_by": {f"{v} {r}": n for (v, r), n in sorted(other_writes(delta).items())},
    }


# -- report ---------------------------------------------------------------------------------------

def fmt(v, spec=".1f", none="-"):
    return none if v is None else format(v, spec)


def summary(r: dict) -> str:
    return (f"wall {fmt(r['wall_s'])}s, objects {fmt(r['objects_s'])}s, {fmt(r['pods_per_s'], '.0f')} pods/s, "
            f"p50/p95/p99 {fmt(r['latency_p50_s'])}/{fmt(r['latency_p95_s'])}/{fmt(r['latency_p99_s'])}s, "
            f"writes/job {fmt(r['writes_per_job'], '.2f')}, events/job {fmt(r['events_per_job'], '.2f')}, "
            f"CPU ms/job {fmt(r.get('cpu_ms_per_job'), '.1f')}"
            + (f" (user {r['user_ms_per_job']:.1f}, system {r['system_ms_per_job']:.1f}, "
               f"{r['wakeups_per_job']:.1f} wake-ups)" if "user_ms_per_job" in r else "")
            + f", apiserver CPU {fmt(r.get('apiserver_cpu_s'))}s, "
            f"etcd CPU {fmt(r.get('etcd_cpu_s'))}s, all CPU {fmt(r.get('all_cpu_s'))}s "
            f"(machine busy {fmt(r.get('machine_busy'), '.2f')}, stolen {fmt(r.get('machine_stolen_s'))}s)"
            + (f", restart writes {r['restart_writes']}" if "restart_writes" in r else "")
            + (f", passes/job {fmt(r['passes_per_job'], '.1f')}" if "passes_per_job" in r else "")
            + (", watch events(bytes, reads)/job " + ", ".join(
                f"{res} {n:.1f}({size / 1024:.1f}K, {reads:.1f})"
                for res, (n, size, reads) in sorted(r["watch_per_job"].items()))
               if r.get("watch_per_job") else "")
            + (", own requests/job " + ", ".join(f"{k} {n:.2f}" for k, n in r["own_requests_per_job"].items())
               if r.get("own_requests_per_job") else "")
            + (" TIMED OUT" if r["timed_out"] else ""))


def single_summary(r: dict) -> str:
    return (f"{r['jobs_started']}/{r['jobs']} jobs one at a time: created p50/p99/max "
            f"{fmt(r['single_created_p50_s'], '.3f')}/{fmt(r['single_created_p99_s'], '.3f')}/"
            f"{fmt(r['single_created_max_s'], '.3f')}s, Running p50/p99/max "
            f"{fmt(r['single_running_p50_s'], '.3f')}/{fmt(r['single_running_p99_s'], '.3f')}/"
            f"{fmt(r['single_running_max_s'], '.3f')}s" + (" TIMED OUT" if r["timed_out"] else ""))


def writes_cell(r: dict, J: int) -> str:
    parts = [f"{k.split(' ', 1)[1]}{'' if k.startswith('POST') else ' ' + k.split(' ')[0]} {n / J:.2f}"
             for k, n in r["writes_by"].items() if not k.endswith(" events")]
    return "; ".join(parts) or "0"


TABLE_HEAD = ["row", "wall s", "objects s", "pods/s", "p50 s", "p95 s", "p99 s", "writes/job", "writes/job by resource",
              "events/job", "429s/job", "CPU s", "CPU ms/job", "peak RSS MB", "apiserver CPU s",
              "apiserver CPU ms/job", "etcd CPU s", "all CPU s", "machine busy", "restart idle s", "restart writes",
              "× raw wall", "upstream default ÷ row"]


def table(results: list[dict], J: int) -> str:
    raw = next((r for r in results if r["row"] == "raw"), None)
    up = next((r for r in results if r["row"] == "upstream default"), None)
    lines = ["| " + " | ".join(TABLE_HEAD) + " |", "|" + "---|" * len(TABLE_HEAD)]
    for r in results:
        ratio = r["wall_s"] / raw["wall_s"] if raw and raw["wall_s"] else None
        vs_up = up["wall_s"] / r["wall_s"] if up and r["wall_s"] else None
        cells = [r["row"] + (" (timed out)" if r["timed_out"] else ""), fmt(r["wall_s"]), fmt(r.get("objects_s")),
                 fmt(r["pods_per_s"], ".0f"), fmt(r["latency_p50_s"]), fmt(r["latency_p95_s"]),
                 fmt(r["latency_p99_s"]), fmt(r["writes_per_job"], ".2f"), writes_cell(r, J),
                 fmt(r["events_per_job"], ".2f"), fmt(r.get("throttled_per_job"), ".2f"), fmt(r.get("cpu_s")),
                 fmt(r.get("cpu_ms_per_job"), ".0f"), fmt(r.get("peak_rss_mb"), ".0f"),
                 fmt(r.get("apiserver_cpu_s")), fmt(r.get("apiserver_cpu_ms_per_job"), ".0f"),
                 fmt(r.get("etcd_cpu_s")), fmt(r.get("all_cpu_s")), fmt(r.get("machine_busy"), ".2f"),
                 fmt(r.get("restart_idle_s")),
                 str(r.get("restart_writes", "-")), fmt(ratio, ".2f"), fmt(vs_up, ".2f")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def single_table(results: list[dict]) -> str:
    head = ["row", "jobs", "created p50 s", "created p99 s", "created max s", "Running p50 s", "Running p99 s",
            "Running max s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        cells = [r["row"] + (" (timed out)" if r["timed_out"] else ""), f"{r['jobs_started']}/{r['jobs']}"]
        cells += [fmt(r[f"single_{what}_{p}_s"], ".3f") for what in ("created", "running")
                  for p in ("p50", "p99", "max")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(results: list[dict], path: Path, title: str) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("[bench] matplotlib not installed: no plot (pip install matplotlib)", file=sys.stderr)
        return False
    fig, ax = plt.subplots(figsize=(8, 5))
    for r in results:
        xs = [0.0] + r["timeline_s"]
        ax.step(xs, range(len(xs)), where="post", label=f"{r['row']} ({r['wall_s']:.1f}s)")
    ax.set_xlabel("seconds since the burst was submitted")
    ax.set_ylabel("jobs with every pod Running")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def machine() -> dict:
    cpu = ""
    try:
        cpu = next(l.split(":", 1)[1].strip() for l in Path("/proc/cpuinfo").read_text().splitlines()
                   if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {"cpus": os.cpu_count(), "cpu_model": cpu, "memory_gib": round(mem, 1),
            "kernel": platform.release(), "python": platform.python_version()}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m e2e.bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=400)
    ap.add_argument("--replicas", default="1ps+4w")
    ap.add_argument("--nodes", type=int, default=0, help="kwok nodes (default: enough for one row at 500 pods/node)")
    ap.add_argument("--gang", choices=list(GANG_SCHEDULERS), default="none")
    ap.add_argument("--against", default="raw,upstream",
                    help="references besides tfop: raw, raw-tfjob (the raw client also creating the TFJob and "
                         "writing its status twice), upstream (both rows), upstream-default, upstream-tuned")
    ap.add_argument("--single", type=int, default=0, metavar="N",
                    help="instead of the burst: N jobs one at a time, the latency of each (0: off)")
    ap.add_argument("--training", type=int, default=0, metavar="N",
                    help="instead: N TFJobs that really train on a real node, per row (tfop and upstream, gang off "
                         "and Volcano): apply -> all pods Running -> first training step (e2e/bench/training.py)")
    ap.add_argument("--scheduler-qps", type=int, default=5000,
                    help="client QPS (burst twice that) of kube-scheduler, the scheduler-plugins scheduler and "
                         "kube-controller-manager of a new cluster; 0: their defaults (50/100, 20/30)")
    ap.add_argument("--out", default="e2e/bench-results")
    ap.add_argument("--dir", help="reuse the cluster running in this directory")
    ap.add_argument("--timeout", type=float, default=0,
                    help="per row, until every pod is Running (--single: per job); default max(900, 0.1 s a pod)")
    ap.add_argument("--connections", type=int, default=128, help="the submitter's connections")
    ap.add_argument("--tfop-arg", action="append", default=[], metavar="FLAG",
                    help="one more flag of the tfop row's operator, e.g. --tfop-arg=--max-concurrent-requests=32")
    ap.add_argument("--upstream-threads", type=int, default=32)
    ap.add_argument("--upstream-qps", type=int, default=1000)
    ap.add_argument("--upstream-burst", type=int, default=2000)
    ap.add_argument("--keep", action="store_true", help="keep each row's namespace")
    ap.add_argument("--pprof", action="store_true",
                    help="CPU profiles of the apiserver, controller manager and scheduler over each row's burst "
                         "(logs/pprof-*.pb.gz) and the seconds of named parts in the results (e2e/bench/pprof.py)")
    ap.add_argument("--beside-writes", type=float, default=0, metavar="N",
                    help="N ConfigMap writes a second in a namespace of their own from each row's start until every "
                         "pod runs: control-plane work tfop never sees, to compare rows at equal machine load")
    ap.add_argument("--pin-operator", action="store_true",
                    help="each operator alone on the machine's last CPU, the benchmark and the control plane on the "
                         "others: its CPU a job without waiting for a core beside the control plane (rows run longer)")
    ap.add_argument("--name", help="result file stem (default bench-J<jobs>-<gang>, bench-single<N>-<gang>)")
    return ap.parse_args(argv)


def row_labels(against: str) -> list[str]:
    against_set = {a.strip() for a in against.split(",") if a.strip()}
    rows = (["raw"] if "raw" in against_set else []) + (["raw+tfjob"] if "raw-tfjob" in against_set else [])
    rows.append("tfop")
    if "upstream" in against_set or "upstream-default" in against_set:
        rows.append("upstream default")
    if "upstream" in against_set or "upstream-tuned" in against_set:
        rows.append("upstream tuned")
    return rows


def open_cluster(args, nodes: int, pods: int) -> tuple[Cluster, bool]:
    """(the cluster, started here?) with the bench nodes and tfop's CRDs and RBAC."""
    created = False
    if args.dir and (Path(args.dir) / "state.json").exists():
        cluster = Cluster.attach(args.dir)
    else:
        created = True
        d = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="tfop-bench-"))
        print(f"[bench] starting cluster in {d}", flush=True)
        # A cluster in --dir outlives this run, to be reused by the next (`python -m e2e.harness down`).
        cluster = Cluster.up(d, gpu_nodes=0, schedulers=GANG_SCHEDULERS[args.gang],
                             scheduler_qps=args.scheduler_qps or None, stop_on_exit=not args.dir)
    try:
        if cluster.kubectl("get", "node", f"bench-{nodes - 1}", check=False).returncode != 0:
            add_nodes(cluster, nodes, pods_per_node=max(110, math.ceil(pods / nodes) + 50))
        deploy_manifests(cluster, gang_name(args.gang))
    except BaseException:
        if created:
            cluster.down()
        raise
    return cluster, created


def meta_of(args, argv, t: float, nodes: int, bench: Bench, cluster: Cluster) -> dict:
    return {
        "command": "python -m e2e.bench " + " ".join(argv if argv is not None else sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(t)), "machine": machine(),
        "jobs": args.single or args.jobs, "single": args.single, "replicas": args.replicas, "gang": args.gang,
        "nodes": nodes, "objects_per_job": dict(bench.objects_per_job()), "pods_per_job": bench.pods_per_job,
        # The cluster's own setting: a reused one (--dir) keeps the QPS it was started with.
        "scheduler_qps": cluster.state.get("scheduler_qps"), "scheduler_clients": scheduler_clients(cluster),
        # "-dirty" when tracked files differ from the commit: then the commit is not quite what ran
        "tfop_commit": subprocess.run(["git", "describe", "--always", "--abbrev=7", "--dirty",
                                       "--exclude=*"], capture_output=True, text=True,
                                      cwd=Path(__file__).parent).stdout.strip(),
        "upstream": "github.com/kubeflow/training-operator v1.9.3",
        "upstream_tuned_flags": f"--controller-threads={args.upstream_threads} --kube-api-qps={args.upstream_qps} "
                                f"--kube-api-burst={args.upstream_burst}",
    }


def write_results(out: Path, stem: str, meta: dict, results: list[dict]) -> None:
    (out / f"{stem}.json").write_text(json.dumps({"meta": meta, "rows": results}, indent=1))
    single = meta["single"]
    md = single_table(results) if single else table(results, meta["jobs"])
    objs = ", ".join(f"{n} {k}" for k, n in meta["objects_per_job"].items())
    what = (f"{single} jobs of {meta['replicas']} one at a time" if single
            else f"J={meta['jobs']} jobs of {meta['replicas']}")
    text = (f"## {what} (gang {meta['gang']})\n\n"
            f"`{meta['command']}` — {meta['date']}, {meta['machine']['cpus']} CPUs "
            f"({meta['machine']['cpu_model']}), {meta['machine']['memory_gib']} GiB, {meta['nodes']} kwok nodes, "
            f"scheduler client QPS {meta['scheduler_qps'] or 'default'}, tfop {meta['tfop_commit']}, "
            f"upstream {meta['upstream']}. Objects per job: {objs}.\n\n{md}\n")
    if not single and plot(results, out / f"{stem}.png", f"{meta['jobs']} TFJobs ({meta['replicas']}), "
                                                          f"gang {meta['gang']}"):
        text += f"\n![jobs started over time]({stem}.png)\n"
    (out / f"{stem}.md").write_text(text)
    print(md)
    print(f"[bench] wrote {out / stem}.{{json,md{'' if single else ',png'}}}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.training:
        from e2e.bench import training as bench_training

        command = "python -m e2e.bench " + " ".join(argv if argv is not None else sys.argv[1:])
        return bench_training.run(args.training, Path(args.out), args.name, command)
    rows = row_labels(args.against)
    if args.single and "raw+tfjob" in rows:
        raise SystemExit("--against raw-tfjob is a burst row: it cannot go with --single")
    comps = ["kubernetes", "etcd", "kwok"] + (["volcano"] if args.gang == "volcano" else []) + \
        (["scheduler-plugins"] if args.gang == "scheduler-plugins" else [])
    if any(r.startswith("upstream") for r in rows):
        comps.append("training-operator")
    build.ensure(comps)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    pods = (args.single or args.jobs) * sum(parse_replicas(args.replicas).values())
    nodes = args.nodes or max(2, math.ceil(pods / 500))
    cluster, created = open_cluster(args, nodes, pods)
    t = time.time()
    cpus = os.sched_getaffinity(0)
    pinned = [os.getpid(), *(cluster.state.get("pids") or {}).values()] if args.pin_operator else []
    try:
        bench = (SingleBench if args.single else Bench)(cluster, args)
        if args.pin_operator:
            bench.operator_cpu, rest = split_cpus(cpus)
            for pid in pinned:
                pin(pid, rest)
        meta = meta_of(args, argv, t, nodes, bench, cluster)
        results = asyncio.run(bench.run(rows))
    finally:
        for pid in pinned:  # this process, and a cluster that outlives the run, as they were
            pin(pid, cpus)
        if created and not args.dir:
            cluster.down()  # a throw-away cluster goes with us; one in --dir stays for the next run
    stem = args.name or (f"bench-single{args.single}-{args.gang}" if args.single else f"bench-J{args.jobs}-{args.gang}")
    write_results(out, stem, meta, results)
    return 0 if not any(r["timed_out"] for r in results) else 2


if __name__ == "__main__":
    sys.exit(main())
