"""Benchmark: how fast a burst of TFJobs starts, what it costs the apiserver, and
the operator's CPU and memory — tfop against the apiserver's own limit (a raw
client creating the same objects) and the upstream Go training-operator.

    python -m e2e.bench [--jobs 400] [--replicas 1ps+4w] [--nodes N]
                        [--gang none|volcano|scheduler-plugins]
                        [--against raw,upstream] [--out DIR] [--dir CLUSTER_DIR]

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
from pathlib import Path

from e2e import build
from e2e.bench_lib import (Admin, PodClock, UpstreamProcess, operator_requests, other_writes, proc_stats, throttled,
                           strip_owner, submit_raw, submit_tfjobs)
from tfop.kube.client import Credentials, KubeClient
from e2e.cluster import KWOK_NODE_ANNOTATION, NODE_LABEL, NODE_LABEL_VALUE, Cluster

GANG_SCHEDULERS = {"none": ["default"], "volcano": ["default", "volcano"],
                   "scheduler-plugins": ["default", "coscheduling"]}
ROWS = ("raw", "tfop", "upstream default", "upstream tuned")


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
    from tfop.tools.cli import _context

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
        out = cluster.kubectl("get", "nodes", "-l", f"{NODE_LABEL}={NODE_LABEL_VALUE}", "-o",
                              "jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=='Ready')].status} {end}").stdout
        ready = {kv.split("=")[0] for kv in out.split() if kv.endswith("=True")}
        if set(names) <= ready:
            return
        time.sleep(0.5)
    raise RuntimeError("bench nodes not Ready")


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


class Bench:
    def __init__(self, cluster: Cluster, args):
        self.cluster, self.args = cluster, args
        self.replicas = parse_replicas(args.replicas)
        self.pods_per_job = sum(self.replicas.values())
        self.ctx = render_context(args.gang)
        self.run_id = time.strftime("%H%M%S")
        self.log_dir = Path(args.out) / "logs"
        self.log_dir.mkdir(parents=True, exist_ok=True)

    def objects_per_job(self) -> Counter:
        from tfop.tools.offline import first_start_objects

        return Counter(o["kind"] for o in first_start_objects(tfjob("x", "default", self.replicas), self.ctx))

    # -- one row -------------------------------------------------------------------------------
    async def row(self, admin: Admin, label: str) -> dict:
        J, cluster = self.args.jobs, self.cluster
        slug = label.replace(" ", "-")
        ns = f"bench-{slug}-{self.run_id}"
        cluster.kubectl("create", "namespace", ns)
        print(f"[bench] {label}: namespace {ns}", flush=True)
        jobs = [tfjob(f"job-{i:05d}", ns, self.replicas) for i in range(J)]
        rendered = None
        operator = None
        gang = gang_name(self.args.gang)
        if label == "raw":
            from tfop.tools.offline import first_start_objects

            rendered = {j["metadata"]["name"]: [strip_owner(o) for o in first_start_objects(j, self.ctx)] for j in jobs}
        elif label == "tfop":
            operator = TfopProcess(cluster, [ns], gang, log_dir=self.log_dir).start()
        else:
            operator = UpstreamProcess(cluster, ns, gang, tuned=label.endswith("tuned"), log_dir=self.log_dir,
                                       threads=self.args.upstream_threads, qps=self.args.upstream_qps,
                                       burst=self.args.upstream_burst).start()
        pid = operator.process.pid if operator else None
        if operator:
            await admin.wait_idle(quiet=1.0, timeout=30)

        spy = None
        if pid and os.environ.get("TFOP_BENCH_PYSPY") and label == "tfop":
            # Profile the burst: collapsed stacks (py-spy --format raw) next to the results.
            spy = subprocess.Popen(["py-spy", "record", "--pid", str(pid), "--format", "raw", "--rate", "50",
                                    "--nonblocking", "-o", str(self.log_dir / f"pyspy-{ns}.txt")],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        clock = PodClock(admin.client, ns, J * self.pods_per_job)
        watch = asyncio.create_task(clock.run())
        await clock.ready.wait()
        m0 = await admin.metrics()
        s0 = proc_stats(pid) if pid else None
        t0 = time.monotonic()
        if rendered is not None:
            # The raw client has the operator's identity (its ServiceAccount): system:masters is never
            # answered 429 by the apiserver's in-flight limit, and an operator never is system:masters.
            account = cluster.service_account_kubeconfig(OPERATOR_NAMESPACE, OPERATOR_ACCOUNT)
            async with KubeClient(Credentials.load(str(account)), max_connections=self.args.connections) as raw:
                sent = await submit_raw(raw, rendered)
        else:
            sent = await submit_tfjobs(admin.client, jobs)
        t_submitted = time.monotonic()
        timed_out = False
        try:
            await asyncio.wait_for(clock.done.wait(), timeout=self.args.timeout)
        except asyncio.TimeoutError:
            timed_out = True
        t_end = max((t for _, t in clock.running.values()), default=time.monotonic())
        watch.cancel()
        await asyncio.gather(watch, return_exceptions=True)
        last, m1, idle = await admin.wait_idle(quiet=2.0, timeout=120, since=t_end)
        s1 = proc_stats(pid) if pid else None
        if spy is not None:
            spy.send_signal(2)
            spy.wait(timeout=30)

        per_job: dict[str, float] = {}
        count: Counter = Counter()
        for job, t in clock.running.values():
            count[job] += 1
            per_job[job] = max(per_job.get(job, 0.0), t)
        started = {j: per_job[j] for j in per_job if count[j] >= self.pods_per_job}
        latencies = [started[j] - sent[j] for j in started if j in sent]
        timeline = sorted(t - t0 for t in started.values())
        wall = t_end - t0
        delta = m1 - m0
        ops = operator_requests(delta)
        if label != "raw":  # the submitter's own TFJob POSTs are not the operator's
            ops[("POST", "tfjobs")] -= J
            if ops[("POST", "tfjobs")] <= 0:
                del ops[("POST", "tfjobs")]
        reads = {f"{v} {r}": n for (v, r), n in operator_requests(delta, writes_only=False).items()
                 if v not in ("POST", "PUT", "PATCH", "DELETE", "APPLY")}
        events = await admin.job_events(ns)
        writes = sum(n for (v, r), n in ops.items() if r != "events")
        result = {
            "row": label, "namespace": ns, "jobs": J, "pods": J * self.pods_per_job,
            "pods_running": len(clock.running), "jobs_started": len(started), "timed_out": timed_out,
            "wall_s": wall, "submit_s": t_submitted - t0, "pods_per_s": len(clock.running) / wall if wall > 0 else None,
            "latency_p50_s": percentile(latencies, 50), "latency_p95_s": percentile(latencies, 95),
            "latency_p99_s": percentile(latencies, 99), "latency_max_s": max(latencies, default=None),
            "settle_s": last - t0, "settled": idle,
            "writes_per_job": writes / J, "events_per_job": events / J, "throttled_per_job": throttled(delta) / J,
            "writes_by": {f"{v} {r}": n for (v, r), n in sorted(ops.items())},
            "reads_by": dict(sorted(reads.items())),
            "other_writes_by": {f"{v} {r}": n for (v, r), n in sorted(other_writes(delta).items())},
            "timeline_s": timeline,
        }
        if s0 and s1:
            result.update(cpu_s=s1["cpu_s"] - s0["cpu_s"], cpu_ms_per_job=1000 * (s1["cpu_s"] - s0["cpu_s"]) / J,
                          peak_rss_mb=s1["peak_rss"] / 2**20, rss_mb=s1["rss"] / 2**20)
        if operator:
            result.update(await self.restart(admin, operator, label, ns))
            operator.stop()
        print(f"[bench] {label}: {summary(result)}", flush=True)
        if not self.args.keep:
            result["namespace_delete_s"] = delete_namespace(cluster, ns)
        return result

    async def restart(self, admin: Admin, operator, label: str, ns: str) -> dict:
        """Stop the operator, start a new one with the same J jobs running; time to idle, writes."""
        operator.stop()
        await asyncio.sleep(1)
        m2 = await admin.metrics()
        t_spawn = time.monotonic()
        if label == "tfop":
            operator.start(deploy=False)
        else:
            operator.start()
        t_ready = time.monotonic()
        last, m3, idle = await admin.wait_idle(quiet=2.0, timeout=120, since=t_spawn)
        stats = proc_stats(operator.process.pid)
        ops = operator_requests(m3 - m2)
        return {
            "restart_ready_s": t_ready - t_spawn, "restart_idle_s": max(last, t_ready) - t_spawn,
            "restart_settled": idle,
            "restart_writes": sum(n for (v, r), n in ops.items() if r != "events"),
            "restart_events": sum(n for (v, r), n in ops.items() if r == "events"),
            "restart_writes_by": {f"{v} {r}": n for (v, r), n in sorted(ops.items())},
            "restart_reads_by": {f"{v} {r}": n for (v, r), n in
                                 sorted(operator_requests(m3 - m2, writes_only=False).items())
                                 if v not in ("POST", "PUT", "PATCH", "DELETE", "APPLY")},
            "restart_rss_mb": stats["rss"] / 2**20,
        }

    async def run(self, rows: list[str]) -> list[dict]:
        results = []
        async with Admin(self.cluster.kubeconfig, connections=self.args.connections) as admin:
            for label in rows:
                results.append(await self.row(admin, label))
        return results


from e2e.tfop_operator import OPERATOR_ACCOUNT, OPERATOR_NAMESPACE, OperatorProcess, deploy_manifests  # noqa: E402


class TfopProcess(OperatorProcess):
    def start(self, deploy: bool = True) -> "TfopProcess":
        if deploy:
            deploy_manifests(self.cluster, self.gang)
        # A fresh log per start: wait_started looks for "caches synced" in it.
        self.log_path = self.log_dir / f"tfop-{'-'.join(self.namespaces)}-{int(time.time() * 1000)}.log"
        log = open(self.log_path, "ab")
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        self.process = subprocess.Popen(self.args(), stdout=log, stderr=subprocess.STDOUT, env=env,
                                        cwd=Path(__file__).resolve().parent.parent, start_new_session=True)
        log.close()
        self.wait_started(timeout=120)
        return self


# -- report ---------------------------------------------------------------------------------------

def fmt(v, spec=".1f", none="-"):
    return none if v is None else format(v, spec)


def summary(r: dict) -> str:
    return (f"wall {fmt(r['wall_s'])}s, {fmt(r['pods_per_s'], '.0f')} pods/s, p50/p95/p99 "
            f"{fmt(r['latency_p50_s'])}/{fmt(r['latency_p95_s'])}/{fmt(r['latency_p99_s'])}s, "
            f"writes/job {fmt(r['writes_per_job'], '.2f')}, events/job {fmt(r['events_per_job'], '.2f')}"
            + (f", restart writes {r['restart_writes']}" if "restart_writes" in r else "")
            + (" TIMED OUT" if r["timed_out"] else ""))


def writes_cell(r: dict, J: int) -> str:
    parts = [f"{k.split(' ', 1)[1]}{'' if k.startswith('POST') else ' ' + k.split(' ')[0]} {n / J:.2f}"
             for k, n in r["writes_by"].items() if not k.endswith(" events")]
    return "; ".join(parts) or "0"


def table(results: list[dict], J: int) -> str:
    raw = next((r for r in results if r["row"] == "raw"), None)
    up = next((r for r in results if r["row"] == "upstream default"), None)
    head = ["row", "wall s", "pods/s", "p50 s", "p95 s", "p99 s", "writes/job", "writes/job by resource",
            "events/job", "429s/job", "CPU s", "CPU ms/job", "peak RSS MB", "restart idle s", "restart writes",
            "× raw wall", "upstream default ÷ row"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        ratio = r["wall_s"] / raw["wall_s"] if raw and raw["wall_s"] else None
        vs_up = up["wall_s"] / r["wall_s"] if up and r["wall_s"] else None
        cells = [r["row"] + (" (timed out)" if r["timed_out"] else ""), fmt(r["wall_s"]),
                 fmt(r["pods_per_s"], ".0f"), fmt(r["latency_p50_s"]), fmt(r["latency_p95_s"]),
                 fmt(r["latency_p99_s"]), fmt(r["writes_per_job"], ".2f"), writes_cell(r, J),
                 fmt(r["events_per_job"], ".2f"), fmt(r.get("throttled_per_job"), ".2f"), fmt(r.get("cpu_s")), fmt(r.get("cpu_ms_per_job"), ".0f"),
                 fmt(r.get("peak_rss_mb"), ".0f"), fmt(r.get("restart_idle_s")),
                 str(r.get("restart_writes", "-")), fmt(ratio, ".2f"), fmt(vs_up, ".2f")]
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m e2e.bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=400)
    ap.add_argument("--replicas", default="1ps+4w")
    ap.add_argument("--nodes", type=int, default=0, help="kwok nodes (default: enough for one row at 500 pods/node)")
    ap.add_argument("--gang", choices=list(GANG_SCHEDULERS), default="none")
    ap.add_argument("--against", default="raw,upstream",
                    help="references besides tfop: raw, upstream (both rows), upstream-default, upstream-tuned")
    ap.add_argument("--out", default="e2e/bench-results")
    ap.add_argument("--dir", help="reuse the cluster running in this directory")
    ap.add_argument("--timeout", type=float, default=900, help="per row, until every pod is Running")
    ap.add_argument("--connections", type=int, default=128, help="the submitter's connections")
    ap.add_argument("--upstream-threads", type=int, default=32)
    ap.add_argument("--upstream-qps", type=int, default=1000)
    ap.add_argument("--upstream-burst", type=int, default=2000)
    ap.add_argument("--keep", action="store_true", help="keep each row's namespace")
    ap.add_argument("--name", help="result file stem (default bench-J<jobs>-<gang>)")
    args = ap.parse_args(argv)

    against = {a.strip() for a in args.against.split(",") if a.strip()}
    rows = (["raw"] if "raw" in against else []) + ["tfop"]
    if "upstream" in against or "upstream-default" in against:
        rows.append("upstream default")
    if "upstream" in against or "upstream-tuned" in against:
        rows.append("upstream tuned")
    comps = ["kubernetes", "etcd", "kwok"] + (["volcano"] if args.gang == "volcano" else []) + \
        (["scheduler-plugins"] if args.gang == "scheduler-plugins" else [])
    if any(r.startswith("upstream") for r in rows):
        comps.append("training-operator")
    build.ensure(comps)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    pods = args.jobs * sum(parse_replicas(args.replicas).values())
    nodes = args.nodes or max(2, math.ceil(pods / 500))
    created = False
    if args.dir and (Path(args.dir) / "state.json").exists():
        cluster = Cluster.attach(args.dir)
    else:
        created = True
        d = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="tfop-bench-"))
        print(f"[bench] starting cluster in {d}", flush=True)
        cluster = Cluster.up(d, gpu_nodes=0, schedulers=GANG_SCHEDULERS[args.gang])
    if cluster.kubectl("get", "node", f"bench-{nodes - 1}", check=False).returncode != 0:
        add_nodes(cluster, nodes, pods_per_node=max(110, math.ceil(pods / nodes) + 50))
    deploy_manifests(cluster, gang_name(args.gang))

    bench = Bench(cluster, args)
    t = time.time()
    try:
        results = asyncio.run(bench.run(rows))
    finally:
        if created and not args.dir:
            cluster.down()  # a throw-away cluster goes with us; one in --dir stays for the next run
    stem = args.name or f"bench-J{args.jobs}-{args.gang}"
    meta = {
        "command": "python -m e2e.bench " + " ".join(argv if argv is not None else sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(t)), "machine": machine(),
        "jobs": args.jobs, "replicas": args.replicas, "gang": args.gang, "nodes": nodes,
        "objects_per_job": dict(bench.objects_per_job()), "pods_per_job": bench.pods_per_job,
        "tfop_commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                      text=True, cwd=Path(__file__).parent).stdout.strip(),
        "upstream": "github.com/kubeflow/training-operator v1.9.3",
        "upstream_tuned_flags": f"--controller-threads={args.upstream_threads} --kube-api-qps={args.upstream_qps} "
                                f"--kube-api-burst={args.upstream_burst}",
    }
    (out / f"{stem}.json").write_text(json.dumps({"meta": meta, "rows": results}, indent=1))
    md = table(results, args.jobs)
    objs = ", ".join(f"{n} {k}" for k, n in meta["objects_per_job"].items())
    text = (f"## J={args.jobs} jobs of {args.replicas} (gang {args.gang})\n\n"
            f"`{meta['command']}` — {meta['date']}, {meta['machine']['cpus']} CPUs "
            f"({meta['machine']['cpu_model']}), {meta['machine']['memory_gib']} GiB, {nodes} kwok nodes, "
            f"tfop {meta['tfop_commit']}, upstream {meta['upstream']}. Objects per job: {objs}.\n\n"
            f"{md}\n\n![jobs started over time]({stem}.png)\n")
    (out / f"{stem}.md").write_text(text)
    plot(results, out / f"{stem}.png", f"{args.jobs} TFJobs ({args.replicas}), gang {args.gang}")
    print(md)
    print(f"[bench] wrote {out / stem}.{{json,md,png}}")
    return 0 if not any(r["timed_out"] for r in results) else 2


if __name__ == "__main__":
    sys.exit(main())
