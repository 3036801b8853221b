"""What a user feels on a real node: `kubectl apply` -> every pod Running -> the first training step.

    python -m e2e.bench --training 10 [--out e2e/bench-results]

One cluster with a real node (e2e.harness.realnode) and Volcano; four operators side by side, each in its
namespace: tfop and upstream training-operator v1.9.3, each with gang scheduling off and with
Volcano. The same TFJob (Chief + 2 workers, MultiWorkerMirroredStrategy, e2e/workloads/train.py)
goes to each row in turn, one job at a time on the whole machine, N rounds. Rows are interleaved,
and each round starts one row further on, so that the machine's drift and the node's clean-up after
the previous job (a job follows the end of another row's) fall on every row alike. Times:
- Running: from just before `kubectl apply` starts to the watch event that shows the last of the
  job's pods Running;
- first step: to the chief's `first-step` line (train.py stamps it with the host's clock);
- the job's end (Succeeded) is recorded too.
"""
from __future__ import annotations

import json
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import yaml

from e2e import build
from e2e.harness.upstream_operator import UpstreamProcess
from e2e.harness.cluster import Cluster
from e2e.harness.tfop_operator import OperatorProcess
from e2e.harness.training import parse_progress, replica, tfjob, workload_configmap

ROWS = (("tfop", "none"), ("upstream", "none"), ("tfop", "volcano"), ("upstream", "volcano"))
JOB_ARGS = ["--steps", "30", "--target-loss", "0.05"]
POD_COUNT = 3
JOB_TIMEOUT = 300
# After a job's pods are gone from the API, the kubelet still tears down their sandboxes for a while.
SETTLE_SECONDS = 3


def namespace_of(operator: str, gang: str) -> str:
    return f"bench-{operator}-{gang}"


def training_job(name: str, image: str) -> dict:
    return tfjob(name, {"Chief": replica(image, 1, JOB_ARGS), "Worker": replica(image, 2, JOB_ARGS)})


class PodsRunning:
    """Watches one job's pods (`kubectl get -w`) and notes when all of them were first seen Running."""

    def __init__(self, cluster: Cluster, namespace: str, job: str):
        self.at: float | None = None
        self._running: set[str] = set()
        self._proc = subprocess.Popen(
            [str(build.binary("kubectl")), "--kubeconfig", str(cluster.kubeconfig), "get", "pods", "-n", namespace,
             "-l", f"training.kubeflow.org/job-name={job}", "-w", "--output-watch-events", "-o", "json"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        decoder, buffer = json.JSONDecoder(), ""
        for chunk in iter(self._proc.stdout.readline, ""):
            buffer += chunk
            while buffer.strip():
                try:
                    event, end = decoder.raw_decode(buffer.lstrip())
                except ValueError:
                    break
                buffer = buffer.lstrip()[end:]
                pod = event.get("object") or {}
                if (pod.get("status") or {}).get("phase") == "Running":
                    self._running.add(pod["metadata"]["name"])
                if self.at is None and len(self._running) >= POD_COUNT:
                    self.at = time.time()

    def stop(self) -> None:
        self._proc.kill()
        self._proc.wait()


def run_job(cluster: Cluster, namespace: str, name: str, image: str, workdir: Path) -> dict:
    path = workdir / f"{namespace}-{name}.yaml"
    path.write_text(yaml.safe_dump(training_job(name, image)))
    watch = PodsRunning(cluster, namespace, name)
    time.sleep(0.5)  # the watch is open before the job exists
    applied = time.time()
    cluster.kubectl("apply", "-n", namespace, "-f", str(path))
    deadline = time.monotonic() + JOB_TIMEOUT
    outcome = None
    while outcome is None and time.monotonic() < deadline:
        got = cluster.kubectl("get", "tfjob", name, "-n", namespace, "-o",
                              "jsonpath={.status.conditions[?(@.status=='True')].type}", check=False).stdout.split()
        outcome = next((c for c in ("Succeeded", "Failed") if c in got), None)
        time.sleep(1)
    finished = time.time()
    watch.stop()
    chief = parse_progress(cluster.kubectl("logs", "-n", namespace, f"{name}-chief-0", check=False).stdout)
    cluster.kubectl("delete", "tfjob", name, "-n", namespace, "--wait=true", timeout=120)
    wait_no_pods(cluster, namespace)
    time.sleep(SETTLE_SECONDS)
    return {"outcome": outcome or "timed out",
            "running_s": round(watch.at - applied, 3) if watch.at else None,
            "first_step_s": round(chief.first_step_time - applied, 3) if chief.first_step_time else None,
            "finished_s": round(finished - applied, 3)}


def wait_no_pods(cluster: Cluster, namespace: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while cluster.kubectl("get", "pods", "-n", namespace, "-o", "name").stdout.strip():
        if time.monotonic() > deadline:
            raise RuntimeError(f"pods of {namespace} still there after {timeout}s")
        time.sleep(0.5)


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered) + 0.5) - 1))]


def summarize(samples: list[dict]) -> dict:
    out = {"jobs": len(samples), "succeeded": sum(s["outcome"] == "Succeeded" for s in samples)}
    for key in ("running_s", "first_step_s", "finished_s"):
        values = [s[key] for s in samples if s[key] is not None]
        if values:
            out[key] = {"p50": round(statistics.median(values), 2), "p95": round(percentile(values, 95), 2),
                        "min": min(values), "max": max(values)}
    return out


def table(rows: dict[str, dict]) -> str:
    lines = ["| operator | gang | jobs succeeded | apply → all pods Running p50 / p95 s "
             "| apply → first training step p50 / p95 s | apply → Succeeded p50 s |",
             "|---|---|---|---|---|---|"]
    for label, summary in rows.items():
        operator, gang = label.split("/")
        cell = lambda k: (f"{summary[k]['p50']:.2f} / {summary[k]['p95']:.2f}" if k in summary else "-")  # noqa: E731
        lines.append(f"| {operator} | {gang} | {summary['succeeded']}/{summary['jobs']} | {cell('running_s')} "
                     f"| {cell('first_step_s')} | {summary.get('finished_s', {}).get('p50', '-')} |")
    return "\n".join(lines)


def start_operators(cluster: Cluster, log_dir: Path) -> list:
    operators = []
    for operator, gang in ROWS:
        ns = namespace_of(operator, gang)
        cluster.kubectl("create", "namespace", ns)
        cluster.apply(workload_configmap(ns))
        backend = None if gang == "none" else gang
        if operator == "tfop":
            operators.append(OperatorProcess(cluster, [ns], gang_scheduler_name=backend, log_dir=log_dir).start())
        else:
            operators.append(UpstreamProcess(cluster, ns, backend, tuned=False, log_dir=log_dir).start())
    return operators


def run(rounds: int, out: Path, name: str | None, command: str) -> int:
    build.ensure(["kubernetes", "etcd", "kwok", "coredns", "volcano", "training-operator"])
    directory = Path(tempfile.mkdtemp(prefix="tfop-bench-training-"))
    cluster = Cluster.up(directory, gpu_nodes=0, schedulers=["default", "volcano"], real_nodes=1)
    samples: dict[str, list[dict]] = {f"{o}/{g}": [] for o, g in ROWS}
    operators = []
    try:
        operators = start_operators(cluster, directory)
        image = cluster.node_image("tf")
        # One job per row first, not counted: the first pods of a row wait on cold caches
        # (the image's files, the operator's first requests) that later jobs find warm.
        for operator, gang in ROWS:
            run_job(cluster, namespace_of(operator, gang), "warm-up", image, directory)
        for i in range(rounds):
            for operator, gang in ROWS[i % len(ROWS):] + ROWS[:i % len(ROWS)]:
                sample = run_job(cluster, namespace_of(operator, gang), f"train-{i}", image, directory)
                samples[f"{operator}/{gang}"].append(sample)
                print(f"[bench] round {i + 1}/{rounds} {operator:8s} gang {gang:8s} {sample}", flush=True)
    finally:
        for op in operators:
            op.stop()
        cluster.down()
    rows = {label: summarize(s) for label, s in samples.items()}
    meta = {"command": command, "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "rounds": rounds,
            "job": "Chief + 2 workers, MultiWorkerMirroredStrategy, " + " ".join(JOB_ARGS),
            "tfop_commit": subprocess.run(["git", "describe", "--always", "--abbrev=7", "--dirty", "--exclude=*"],
                                          capture_output=True, text=True, cwd=Path(__file__).parent).stdout.strip(),
            "upstream": "github.com/kubeflow/training-operator v1.9.3 (default flags)"}
    out.mkdir(parents=True, exist_ok=True)
    stem = name or f"bench-training-{rounds}"
    (out / f"{stem}.json").write_text(json.dumps({"meta": meta, "rows": rows, "samples": samples}, indent=1))
    md = table(rows)
    (out / f"{stem}.md").write_text(f"## Real training: apply → Running → first step ({rounds} jobs a row)\n\n"
                                    f"`{command}` — {meta['date']}, tfop {meta['tfop_commit']}, "
                                    f"upstream {meta['upstream']}. Job: {meta['job']}.\n\n{md}\n")
    print(md)
    print(f"[bench] wrote {out / stem}.{{json,md}}")
    return 0 if all(r["succeeded"] == r["jobs"] for r in rows.values()) else 2
