"""Pieces of e2e/contention.py that talk to no cluster: the seeded trials, the ledger that
turns pod bindings into the contention metrics, the tables and the plot.

The ledger is fed events in time order (a TFJob submitted, a pod bound to a node, a pod
gone or terminal, a job ended) and keeps every figure up to date, so the run can stop at a
deadlock while it happens and the same code is tested with plain tables.
"""
from __future__ import annotations

import math
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path

from e2e.bench import percentile

DEADLOCK_S = 30.0  # no job starts or ends this long while partial gangs hold GPUs: a deadlock
# A gang whose members all bound within this of its first is bound by one decision: the GPUs its
# first members held meanwhile are the binding API's fan-out (one Binding POST per pod).
BIND_BURST_S = 1.0
GPU_CHOICES = (1, 2, 4)  # GPUs per node; and per pod, as far as the node has them


@dataclass(frozen=True)
class JobSpec:
    name: str
    pods: int  # Worker replicas, all alike
    gpus: int  # per pod
    arrival_s: float  # after the run's start
    run_s: float  # from the moment every pod runs
    fail_member: int | None = None  # this Worker exits 137 half-way through the first attempt

    @property
    def total_gpus(self) -> int:
        return self.pods * self.gpus


@dataclass(frozen=True)
class Trial:
    index: int
    nodes: int
    gpus_per_node: int
    jobs: tuple[JobSpec, ...]

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node


def draw_trial(rng: random.Random, index: int, jobs: int, member_failure: bool,
               mean_gap_s: float = 0.5, run_s: tuple[float, float] = (2.0, 5.0)) -> Trial:
    """A cluster of 3-6 nodes with 1, 2 or 4 GPUs each, and `jobs` TFJobs of 2 pods up to half the
    cluster's GPUs (more than a third), arriving as a Poisson stream. With `member_failure`, one
    Worker of the job a third into the stream fails mid-run."""
    nodes, per_node = rng.randint(3, 6), rng.choice(GPU_CHOICES)
    total = nodes * per_node
    specs, t = [], 0.0
    victim = jobs // 3 if member_failure else None
    for i in range(jobs):
        gpus = rng.choice([g for g in GPU_CHOICES if g <= per_node and 2 * g <= total])
        most = max(2, math.ceil(total / 2 / gpus))
        pods = rng.randint(2, most)
        specs.append(JobSpec(f"t{index}-j{i:02d}", pods, gpus, round(t, 2), round(rng.uniform(*run_s), 1),
                             rng.randrange(pods) if i == victim else None))
        t += rng.expovariate(1 / mean_gap_s)
    return Trial(index, nodes, per_node, tuple(specs))


@dataclass
class _Pod:
    job: str
    node: str
    gpus: int
    in_full_gang: bool = False  # bound while every member of its job was bound
    gone: bool = False


@dataclass
class Ledger:
    """GPUs held by partial gangs, job starts and ends, and how soon gangs bind, from events.

    A pod holds its GPUs from the moment it is bound to a node until it is terminal or deleted.
    A job *starts* when all its pods hold GPUs at once; from then on those pods count as a full
    gang. GPUs of bound pods not (yet) in a full gang are held by a *partial gang*."""
    nodes: dict[str, int]  # node -> GPUs
    jobs: dict[str, JobSpec]
    t0: float
    now: float = 0.0
    pods: dict[str, _Pod] = field(default_factory=dict)  # uid ->
    held: dict[str, set] = field(default_factory=dict)  # job -> uids bound and not gone
    used: dict[str, int] = field(default_factory=dict)  # node -> GPUs held
    submitted: dict[str, float] = field(default_factory=dict)
    starts: dict[str, list] = field(default_factory=dict)  # job -> times all its pods held GPUs
    ended: dict[str, tuple] = field(default_factory=dict)  # job -> (time, "Succeeded"|"Failed")
    partial_gpus: int = 0
    partial_gpu_s: float = 0.0
    burst_gpu_s: float = 0.0  # the part of partial_gpu_s held by gangs whole within BIND_BURST_S
    partial_by_job: dict = field(default_factory=dict)  # job -> GPUs in its partial gang now
    accrued: dict = field(default_factory=dict)  # job -> partial GPU-s of its current attempt
    partial_since: float | None = None  # partial GPUs have been > 0 since then
    last_progress: float = 0.0  # a job started or ended
    timeline: list = field(default_factory=list)  # (s since t0, partial GPUs) at each change
    placeable_since: dict[str, float] = field(default_factory=dict)  # job -> its unbound pods fit since
    first_bound: dict[str, float] = field(default_factory=dict)  # job -> first bind of this attempt
    capacity_to_bind: list = field(default_factory=list)  # s: gang became placeable after waiting -> bound
    arrival_to_bind: list = field(default_factory=list)  # s: placeable at submission -> bound
    restart_to_bind: list = field(default_factory=list)  # s: a started job's gang placeable again -> bound
    bind_spread: list = field(default_factory=list)  # s: first to last pod bound, per start

    def __post_init__(self):
        self.now = self.last_progress = self.t0
        self.used = {n: 0 for n in self.nodes}
        self.timeline = [(0.0, 0)]

    # -- events -----------------------------------------------------------------------------
    def submit(self, t: float, job: str) -> None:
        self._advance(t)
        self.submitted[job] = t
        self._refresh_placeable(t)

    def bind(self, t: float, uid: str, job: str, node: str) -> None:
        if uid in self.pods or job not in self.jobs:
            return
        self._advance(t)
        spec = self.jobs[job]
        self.pods[uid] = _Pod(job, node, spec.gpus)
        self.used[node] = self.used.get(node, 0) + spec.gpus
        held = self.held.setdefault(job, set())
        if not held:  # a new attempt: what an aborted one held stays stranded
            self.first_bound[job] = t
            self.accrued[job] = 0.0
        held.add(uid)
        if len(held) >= spec.pods and not all(self.pods[u].in_full_gang for u in held):
            for u in held:
                self.pods[u].in_full_gang = True
            self._started(t, job)
        self._update_partial(t)
        self._refresh_placeable(t)

    def free(self, t: float, uid: str) -> None:
        pod = self.pods.get(uid)
        if pod is None or pod.gone:
            return
        self._advance(t)
        pod.gone = True
        self.used[pod.node] -= pod.gpus
        self.held[pod.job].discard(uid)
        self._update_partial(t)
        self._refresh_placeable(t)

    def end(self, t: float, job: str, outcome: str) -> None:
        if job in self.ended or job not in self.jobs:
            return
        self._advance(t)
        self.ended[job] = (t, outcome)
        self.last_progress = t
        self.placeable_since.pop(job, None)

    # -- state --------------------------------------------------------------------------------
    def unfinished(self) -> list[str]:
        return [j for j in self.submitted if j not in self.ended]

    def stuck(self, t: float, window: float = DEADLOCK_S) -> str | None:
        """"deadlock": for `window` s no job started or ended and partial gangs held GPUs all along;
        "stall": no job started or ended for `window` s while jobs wait; else None."""
        if not self.unfinished() or t - self.last_progress < window:
            return None
        if self.partial_since is not None and t - max(self.last_progress, self.partial_since) >= window:
            return "deadlock"
        return "stall" if self.partial_since is None else None

    def fits(self, pods: int, gpus: int) -> bool:
        """Would `pods` pods of `gpus` GPUs each fit in the GPUs nobody holds now?"""
        return sum((self.nodes[n] - self.used[n]) // gpus for n in self.nodes) >= pods

    # -- internals ----------------------------------------------------------------------------
    def _advance(self, t: float) -> None:
        t = max(t, self.now)
        self.partial_gpu_s += self.partial_gpus * (t - self.now)
        for job, gpus in self.partial_by_job.items():
            self.accrued[job] = self.accrued.get(job, 0.0) + gpus * (t - self.now)
        self.now = t

    def _started(self, t: float, job: str) -> None:
        previous = self.starts.setdefault(job, [])
        since = self.placeable_since.pop(job, None)
        if since is not None:
            if previous:
                self.restart_to_bind.append(t - since)
            elif since > self.submitted.get(job, since):
                self.capacity_to_bind.append(t - since)
            else:
                self.arrival_to_bind.append(t - since)
        spread = t - self.first_bound.get(job, t)
        self.bind_spread.append(spread)
        if spread <= BIND_BURST_S:
            self.burst_gpu_s += self.accrued.get(job, 0.0)
        self.accrued[job] = 0.0
        previous.append(t)
        self.last_progress = t

    def _update_partial(self, t: float) -> None:
        self.partial_by_job = {job: g for job, uids in self.held.items()
                               if (g := sum(p.gpus for u in uids if not (p := self.pods[u]).in_full_gang))}
        gpus = sum(self.partial_by_job.values())
        if gpus == self.partial_gpus:
            return
        if gpus and not self.partial_gpus:
            self.partial_since = t
        elif not gpus:
            self.partial_since = None
        self.partial_gpus = gpus
        at = t - self.t0
        if len(self.timeline) > 1 and self.timeline[-1][0] == at:  # a state that lasted no time
            self.timeline.pop()
        if self.timeline[-1][1] != gpus:
            self.timeline.append((at, gpus))

    def _refresh_placeable(self, t: float) -> None:
        for job in self.unfinished():
            spec, held = self.jobs[job], self.held.get(job, set())
            missing = spec.pods - len(held)
            if missing > 0 and self.fits(missing, spec.gpus):
                self.placeable_since.setdefault(job, t)
            else:
                self.placeable_since.pop(job, None)

    # -- figures ------------------------------------------------------------------------------
    def metrics(self, t_end: float, outcome: str) -> dict:
        self._advance(t_end)
        done = self.ended
        jct = [done[j][0] - self.submitted[j] for j in done if j in self.submitted]
        first = min(self.submitted.values(), default=self.t0)
        finished = outcome == "finished"
        return {
            "outcome": outcome, "deadlocks": int(outcome == "deadlock"), "stalls": int(outcome == "stall"),
            "jobs": len(self.jobs), "jobs_submitted": len(self.submitted),
            "jobs_succeeded": sum(1 for _, o in done.values() if o == "Succeeded"),
            "jobs_failed": sum(1 for _, o in done.values() if o == "Failed"),
            "jobs_started": len(self.starts), "restarts": sum(max(0, len(s) - 1) for s in self.starts.values()),
            "duration_s": t_end - self.t0,
            "makespan_s": (max(e[0] for e in done.values()) - first) if finished and done else None,
            "jct_mean_s": sum(jct) / len(jct) if jct else None, "jct_p95_s": percentile(jct, 95),
            "partial_gpu_s": self.partial_gpu_s, "bind_burst_gpu_s": self.burst_gpu_s,
            "stranded_gpu_s": self.partial_gpu_s - self.burst_gpu_s,
            "max_partial_gpus": max(g for _, g in self.timeline),
            "capacity_gpu_s": sum(self.nodes.values()) * (t_end - self.t0),
            "capacity_to_bind_s": self.capacity_to_bind, "arrival_to_bind_s": self.arrival_to_bind,
            "restart_to_bind_s": self.restart_to_bind, "bind_spread_s": self.bind_spread,
            "timeline": self.timeline + [(t_end - self.t0, self.partial_gpus)],
        }


# -- report -----------------------------------------------------------------------------------

def fmt(v, spec: str = ".1f") -> str:
    return "-" if v is None else format(v, spec)


def worst(values: list[float]) -> float | None:
    return max(values) if values else None


def run_row(trial: dict, mode: str) -> list[str]:
    r = trial["runs"][mode]
    return [str(trial["index"]), f"{trial['nodes']}x{trial['gpus_per_node']}", str(len(trial["jobs"])),
            "yes" if trial["member_failure"] else "", mode, r["outcome"], fmt(r["partial_gpu_s"], ".2f"),
            fmt(r["stranded_gpu_s"], ".2f"), str(r["max_partial_gpus"]), str(r["deadlocks"]),
            f"{r['jobs_succeeded']}/{r['jobs']}",
            fmt(r["makespan_s"]), fmt(r["jct_mean_s"]), fmt(r["jct_p95_s"]),
            fmt(worst(r["capacity_to_bind_s"]), ".2f"), fmt(percentile(r["capacity_to_bind_s"], 50), ".2f"),
            fmt(worst(r["bind_spread_s"]), ".3f"), str(r["restarts"])]


RUN_HEAD = ["trial", "nodes x GPUs", "jobs", "member failure", "gang", "outcome", "partial GPU-s",
            "stranded GPU-s", "max partial GPUs", "deadlocks", "succeeded", "makespan s", "JCT mean s", "JCT p95 s",
            "capacity→bound max s", "capacity→bound p50 s", "bind spread max s", "restarts"]
SUMMARY_HEAD = ["scheduler", "gang", "trials", "partial GPU-s (sum)", "stranded GPU-s (sum)",
                "partial GPU-s (max/trial)", "% of GPU-s partial",
                "deadlocks", "stalls", "jobs succeeded", "makespan mean s", "JCT mean s", "JCT p95 s (mean)",
                "capacity→bound max s", "capacity→bound p95 s", "bind spread max s"]


def summary_row(scheduler: str, trials: list[dict], mode: str) -> list[str]:
    runs = [t["runs"][mode] for t in trials if mode in t["runs"]]
    if not runs:
        return []
    cap = [v for r in runs for v in r["capacity_to_bind_s"]]
    spans = [r["makespan_s"] for r in runs if r["makespan_s"] is not None]
    means = [r["jct_mean_s"] for r in runs if r["jct_mean_s"] is not None]
    p95s = [r["jct_p95_s"] for r in runs if r["jct_p95_s"] is not None]
    avg = lambda xs: sum(xs) / len(xs) if xs else None  # noqa: E731
    partial = sum(r["partial_gpu_s"] for r in runs)
    return [scheduler, mode, str(len(runs)), fmt(partial, ".2f"), fmt(sum(r["stranded_gpu_s"] for r in runs), ".2f"),
            fmt(max(r["partial_gpu_s"] for r in runs), ".2f"),
            fmt(100 * partial / sum(r["capacity_gpu_s"] for r in runs), ".2f"), str(sum(r["deadlocks"] for r in runs)),
            str(sum(r["stalls"] for r in runs)),
            f"{sum(r['jobs_succeeded'] for r in runs)}/{sum(r['jobs'] for r in runs)}",
            fmt(avg(spans)) + (f" ({len(spans)} of {len(runs)} finished)" if len(spans) < len(runs) else ""),
            fmt(avg(means)), fmt(avg(p95s)), fmt(worst(cap), ".2f"), fmt(percentile(cap, 95), ".2f"),
            fmt(worst([v for r in runs for v in r["bind_spread_s"]]), ".3f")]


def md_table(head: list[str], rows: list[list[str]]) -> str:
    return "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
                     + ["| " + " | ".join(r) + " |" for r in rows if r])


def plot(scheduler: str, trials: list[dict], path: Path) -> bool:
    """One panel per trial: GPUs held by partial gangs over time, gang on and off."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("[contention] matplotlib not installed: no plot (pip install '.[bench]')", file=sys.stderr)
        return False
    cols = min(3, len(trials)) or 1
    rows = math.ceil(len(trials) / cols) or 1
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 2.8 * rows), squeeze=False)
    for ax, trial in zip(axes.flat, trials):
        for mode, colour in (("on", "tab:blue"), ("off", "tab:red")):
            run = trial["runs"].get(mode)
            if run:
                xs, ys = zip(*run["timeline"])
                ax.step(xs, ys, where="post", color=colour,
                        label=f"gang {mode}: {run['partial_gpu_s']:.1f} GPU-s partial, {run['outcome']}")
        ax.set_title(f"trial {trial['index']}: {trial['nodes']}x{trial['gpus_per_node']} GPUs"
                     + (", member failure" if trial["member_failure"] else ""), fontsize=9)
        ax.set_xlabel("s", fontsize=8)
        ax.set_ylabel("GPUs in partial gangs", fontsize=8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(trials):]:
        ax.axis("off")
    fig.suptitle(f"{scheduler}: GPUs held by partially bound gangs", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True
