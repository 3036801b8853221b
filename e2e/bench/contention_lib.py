"""Pieces of e2e/bench/contention.py that talk to no cluster: the seeded trials, the ledger that
turns pod bindings into the contention metrics, the tables and the plot.

The ledger is fed events in time order (a TFJob submitted, a pod bound to a node, a pod
gone or terminal, a job ended) and keeps every figure up to date, so the run can stop at a
deadlock while it happens and the same code is tested with plain tables.
"""
from __future__ import annotations

import math
import random
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from e2e.bench.burst import percentile

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
    priority: str | None = None  # a PriorityClass for its pods (the preemption scenario)

    @property
    def total_gpus(self) -> int:
        return self.pods * self.gpus


@dataclass(frozen=True)
class NodeLoss:
    """The node-loss scenario's fault: once `job`'s gang first runs whole, after `after_frac` of its
    run time, the node holding its members at index int(pick * n) of the n such nodes (by name)
    stops heartbeating."""
    job: str
    after_frac: float
    pick: float


@dataclass(frozen=True)
class Trial:
    index: int
    nodes: int
    gpus_per_node: int
    jobs: tuple[JobSpec, ...]
    spare_nodes: int = 0  # nodes beyond `nodes`, alike, not counted in the jobs' sizes (room to run elsewhere)
    node_loss: NodeLoss | None = None

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


def draw_node_loss_trial(stream_trial: Trial, seed: int) -> Trial:
    """The node-loss scenario's trial: the stream scenario's trial of the same seed and index (its
    cluster and jobs; no member failure), one spare node more, and the node loss drawn from a
    generator of its own, so the streams stay the stream scenario's. The lost gang is the job a
    third into the stream, as the member failure's."""
    rng = random.Random(f"node-loss-{seed}-{stream_trial.index}")
    jobs = tuple(replace(j, fail_member=None) for j in stream_trial.jobs)
    loss = NodeLoss(jobs[len(jobs) // 3].name, round(rng.uniform(0.25, 0.5), 2), rng.random())
    return replace(stream_trial, jobs=jobs, spare_nodes=1, node_loss=loss)


LOW_PRIORITY, HIGH_PRIORITY = "tfop-contention-low", "tfop-contention-high"  # PriorityClasses
PRIORITY_VALUES = {LOW_PRIORITY: 100, HIGH_PRIORITY: 10000}


def draw_preemption_trial(rng: random.Random, index: int, low_run_s: tuple[float, float] = (8.0, 12.0),
                          high_run_s: tuple[float, float] = (2.0, 5.0)) -> Trial:
    """A cluster drawn as draw_trial draws it (3-6 nodes of 1, 2 or 4 GPUs), filled exactly by
    low-priority gangs of 2 pods or more of one size g (g divides a node's GPUs, so any placement
    packs), then one high-priority gang (the last job) of pods of g' >= g GPUs, 2 pods up to half
    the cluster, which fits only once some low gangs are gone. The low gangs run 8-12 s, the high
    one 2-5 s; the harness submits the high one once every low one runs."""
    nodes, per_node = rng.randint(3, 6), rng.choice(GPU_CHOICES)
    total = nodes * per_node
    g = rng.choice([c for c in GPU_CHOICES if c <= per_node and 2 * c <= total])
    slots, sizes = total // g, []
    while slots:
        n = min(slots, rng.randint(2, max(2, math.ceil(total / 2 / g))))
        if slots - n == 1:
            n += 1
        sizes.append(n)
        slots -= n
    if sizes[-1] == 1:  # only when the cluster holds 3 slots and the first job took 2
        sizes[-2:] = [sizes[-2] + 1]
    specs = [JobSpec(f"p{index}-low{i:02d}", n, g, round(0.1 * i, 2), round(rng.uniform(*low_run_s), 1),
                     priority=LOW_PRIORITY) for i, n in enumerate(sizes)]
    gh = rng.choice([c for c in GPU_CHOICES if g <= c <= per_node and 2 * c <= total])
    pods = rng.randint(2, max(2, math.ceil(total / 2 / gh)))
    specs.append(JobSpec(f"p{index}-high", pods, gh, -1.0, round(rng.uniform(*high_run_s), 1),
                         priority=HIGH_PRIORITY))
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
    # Broken gangs: a started attempt that lost a member (deleted or Failed, not Succeeded) while
    # the job had not ended; its surviving members hold GPUs the job cannot use.
    lost: dict = field(default_factory=dict)  # job -> members lost before the job ended
    broken: dict = field(default_factory=dict)  # job -> (since, GPU-s so far) of its open episode
    broken_gpus: int = 0
    broken_gpu_s: float = 0.0
    broken_episodes: list = field(default_factory=list)  # (job, s since t0, duration s, GPU-s), closed
    # Lost nodes (the node-loss scenario): a gang with a member held on a lost node, or broken, cannot
    # progress; the GPUs its members hold on the other nodes are *stuck* (the lost node's own GPUs
    # are gone whatever the operator does, so they are not counted).
    lost_nodes: dict = field(default_factory=dict)  # node -> time it stopped heartbeating
    stuck_by_job: dict = field(default_factory=dict)  # job -> stuck GPUs now
    stuck_gpu_s: float = 0.0
    stuck_open: dict = field(default_factory=dict)  # job -> (since, GPU-s so far) of its open episode
    stuck_episodes: list = field(default_factory=list)  # (job, s since t0, duration s, GPU-s), closed
    stuck_timeline: list = field(default_factory=list)  # (s since t0, stuck GPUs) at each change

    def __post_init__(self):
        self.now = self.last_progress = self.t0
        self.used = {n: 0 for n in self.nodes}
        self.timeline = [(0.0, 0)]
        self.stuck_timeline = [(0.0, 0)]

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

    def free(self, t: float, uid: str, lost: bool = False) -> None:
        """The pod no longer holds GPUs. `lost`: it ended other than Succeeded (deleted, evicted,
        Failed); a member of a started attempt lost before its job ended breaks the gang."""
        pod = self.pods.get(uid)
        if pod is None or pod.gone:
            return
        self._advance(t)
        pod.gone = True
        self.used[pod.node] -= pod.gpus
        self.held[pod.job].discard(uid)
        if lost and pod.job not in self.ended:
            self.lost[pod.job] = self.lost.get(pod.job, 0) + 1
            if pod.in_full_gang and pod.job not in self.broken:
                self.broken[pod.job] = (t, 0.0)
        self._update_partial(t)
        self._refresh_placeable(t)

    def lose_node(self, t: float, node: str) -> None:
        """`node` stopped heartbeating at `t`: what is bound to it makes no progress from then on."""
        self._advance(t)
        self.lost_nodes.setdefault(node, t)
        self._update_partial(t)
        self._refresh_placeable(t)

    def end(self, t: float, job: str, outcome: str) -> None:
        if job in self.ended or job not in self.jobs:
            return
        self._advance(t)
        self.ended[job] = (t, outcome)
        self.last_progress = t
        self.placeable_since.pop(job, None)
        self._close_broken(t, job)
        self._update_partial(t)

    # -- state --------------------------------------------------------------------------------
    def unfinished(self) -> list[str]:
        return [j for j in self.submitted if j not in self.ended]

    def stuck(self, t: float, window: float = DEADLOCK_S, since: float | None = None) -> str | None:
        """"deadlock": for `window` s no job started or ended and partial gangs held GPUs all along;
        "stall": no job started or ended for `window` s while jobs wait; else None. `since`: count
        the window from no earlier than this (a wait the run imposes, such as a lost node's)."""
        progress = max(self.last_progress, since if since is not None else self.last_progress)
        if not self.unfinished() or t - progress < window:
            return None
        # partial_since: partial or broken gangs have held GPUs since then
        if self.partial_since is not None and t - max(progress, self.partial_since) >= window:
            return "deadlock"
        return "stall" if self.partial_since is None else None

    def fits(self, pods: int, gpus: int) -> bool:
        """Would `pods` pods of `gpus` GPUs each fit in the GPUs nobody holds now (on nodes not lost)?"""
        return sum((self.nodes[n] - self.used[n]) // gpus for n in self.nodes if n not in self.lost_nodes) >= pods

    # -- internals ----------------------------------------------------------------------------
    def _advance(self, t: float) -> None:
        t = max(t, self.now)
        self.partial_gpu_s += self.partial_gpus * (t - self.now)
        for job, gpus in self.partial_by_job.items():
            self.accrued[job] = self.accrued.get(job, 0.0) + gpus * (t - self.now)
        for job, (since, acc) in self.broken.items():
            gpus = self._broken_gpus(job)
            self.broken_gpu_s += gpus * (t - self.now)
            self.broken[job] = (since, acc + gpus * (t - self.now))
        for job, gpus in self.stuck_by_job.items():
            self.stuck_gpu_s += gpus * (t - self.now)
            since, acc = self.stuck_open[job]
            self.stuck_open[job] = (since, acc + gpus * (t - self.now))
        self.now = t

    def _stuck_gpus(self, job: str) -> int:
        """GPUs `job`'s members hold on nodes not lost, if the gang cannot progress: a member is held
        on a lost node, or the gang is broken (a started attempt lost a member); else 0."""
        held = [self.pods[u] for u in self.held.get(job, ())]
        if job in self.ended or not (job in self.broken or any(p.node in self.lost_nodes for p in held)):
            return 0
        return sum(p.gpus for p in held if p.node not in self.lost_nodes)

    def _refresh_stuck(self, t: float) -> None:
        now = {job: g for job in self.held if (g := self._stuck_gpus(job))}
        for job in [j for j in self.stuck_open if j not in now]:
            since, acc = self.stuck_open.pop(job)
            self.stuck_episodes.append((job, since - self.t0, t - since, acc))
        for job in now:
            self.stuck_open.setdefault(job, (t, 0.0))
        self.stuck_by_job = now
        total, at = sum(now.values()), t - self.t0
        if total != self.stuck_timeline[-1][1]:
            if len(self.stuck_timeline) > 1 and self.stuck_timeline[-1][0] == at:  # a state that lasted no time
                self.stuck_timeline.pop()
            if total != self.stuck_timeline[-1][1]:
                self.stuck_timeline.append((at, total))

    def _broken_gpus(self, job: str) -> int:
        """GPUs the surviving members of `job`'s broken attempt hold."""
        return sum(p.gpus for u in self.held.get(job, ()) if (p := self.pods[u]).in_full_gang)

    def _close_broken(self, t: float, job: str) -> None:
        if job in self.broken:
            since, acc = self.broken.pop(job)
            self.broken_episodes.append((job, since - self.t0, t - since, acc))

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
        self._close_broken(t, job)  # whole again
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
        for job in [j for j in self.broken if not self._broken_gpus(j)]:  # no survivor holds GPUs any more
            self._close_broken(t, job)
        self._refresh_stuck(t)
        broken = sum(self._broken_gpus(j) for j in self.broken)
        gpus = sum(self.partial_by_job.values())
        if (gpus + broken > 0) != (self.partial_gpus + self.broken_gpus > 0):
            self.partial_since = t if gpus + broken else None
        self.broken_gpus = broken
        if gpus == self.partial_gpus:
            return
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
            "lost_pods": dict(self.lost), "broken_gpu_s": self.broken_gpu_s,
            "broken_episodes": self.broken_episodes + [(j, s - self.t0, t_end - s, acc)
                                                       for j, (s, acc) in self.broken.items()],
            "stuck_gpu_s": self.stuck_gpu_s,
            "stuck_episodes": self.stuck_episodes + [(j, s - self.t0, t_end - s, acc)
                                                     for j, (s, acc) in self.stuck_open.items()],
            "stuck_timeline": self.stuck_timeline + [(t_end - self.t0, sum(self.stuck_by_job.values()))],
            "lost_nodes": {n: t - self.t0 for n, t in self.lost_nodes.items()},
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


def _trial_panels(n: int):
    """(pyplot, figure, axes) of one panel per trial, three to a row; None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("[contention] matplotlib not installed: no plot (pip install '.[bench]')", file=sys.stderr)
        return None
    cols = min(3, n) or 1
    rows = math.ceil(n / cols) or 1
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 2.8 * rows), squeeze=False)
    return plt, fig, axes


def _save_panels(plt, fig, axes, n: int, title: str, path: Path) -> bool:
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def plot(scheduler: str, trials: list[dict], path: Path) -> bool:
    """One panel per trial: GPUs held by partial gangs over time, gang on and off."""
    panels = _trial_panels(len(trials))
    if panels is None:
        return False
    plt, fig, axes = panels
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
    return _save_panels(plt, fig, axes, len(trials), f"{scheduler}: GPUs held by partially bound gangs", path)


# -- the preemption scenario's report ---------------------------------------------------------

def broken_beyond_burst(run: dict) -> float:
    """Broken GPU-s of the episodes that lasted longer than BIND_BURST_S (a gang evicted whole
    still loses its pods one DELETE at a time, a few ms apart)."""
    return sum(gpu_s for _, _, duration, gpu_s in run.get("broken_episodes", []) if duration > BIND_BURST_S)


def evicted_gpus(trial: dict, run: dict) -> int:
    """GPUs of the low jobs' pods the scheduler marked DisruptionTarget (its victims)."""
    gpus = {j["name"]: j["gpus"] for j in trial["jobs"]}
    high = run["preemption"]["high"]
    return sum(gpus.get(job, 0) * n for job, n in run["preemption"]["disrupted_pods"].items() if job != high)


def low_disrupted(run: dict) -> int:
    pre = run["preemption"]
    return sum(n for job, n in pre["disrupted_pods"].items() if job != pre["high"])


def high_restarts(run: dict) -> int:
    """Gang restarts of the high job (tfop's restartCount): its own pods lost before it ran."""
    return run["restart_counts"].get(run["preemption"]["high"], 0)


def _shape(trial: dict) -> tuple[str, str]:
    jobs = trial["jobs"]
    lows = [j for j in jobs if j.get("priority") != jobs[-1].get("priority")] or jobs[:-1]
    high = jobs[-1]
    return " ".join(f"{j['pods']}x{j['gpus']}" for j in lows), f"{high['pods']}x{high['gpus']}"


PREEMPT_RUN_HEAD = ["trial", "nodes x GPUs", "low gangs (pods x GPUs)", "high gang", "gang", "outcome",
                    "high arrival→bound s", "low jobs ended before high bound", "broken GPU-s",
                    "broken GPU-s beyond 1 s", "partial GPU-s", "low pods lost (DisruptionTarget)",
                    "GPUs evicted / high gang's", "low jobs preempted",
                    "preempted back whole and Succeeded", "high gang restarts", "succeeded", "deadlocks"]
PREEMPT_SUMMARY_HEAD = ["scheduler", "gang", "trials", "broken GPU-s (sum)", "broken GPU-s beyond 1 s (sum)",
                        "broken GPU-s (max/trial)", "partial GPU-s (sum)", "low pods lost (DisruptionTarget)",
                        "GPUs evicted / high gangs'",
                        "trials with preemption", "low jobs preempted", "preempted back whole and Succeeded",
                        "high gang restarts", "jobs succeeded", "deadlocks", "high arrival→bound mean s", "p50 s",
                        "max s"]


def preempt_run_row(trial: dict, mode: str) -> list[str]:
    r = trial["runs"][mode]
    pre = r["preemption"]
    lows, high = _shape(trial)
    return [str(trial["index"]), f"{trial['nodes']}x{trial['gpus_per_node']}", lows, high, mode, r["outcome"],
            fmt(pre["high_arrival_to_bound_s"], ".2f"), str(pre["lows_ended_before_high_bound"]),
            fmt(r["broken_gpu_s"], ".2f"), fmt(broken_beyond_burst(r), ".2f"), fmt(r["partial_gpu_s"], ".2f"),
            f"{sum(pre['lost_pods'].values())} ({low_disrupted(r)})",
            f"{evicted_gpus(trial, r)}/{trial['jobs'][-1]['pods'] * trial['jobs'][-1]['gpus']}",
            str(len(pre["preempted_jobs"])), f"{len(pre['back_whole_and_succeeded'])}/{len(pre['preempted_jobs'])}",
            str(high_restarts(r)), f"{r['jobs_succeeded']}/{r['jobs']}", str(r["deadlocks"])]


def preempt_summary_row(scheduler: str, trials: list[dict], mode: str) -> list[str]:
    runs = [t["runs"][mode] for t in trials if mode in t["runs"]]
    if not runs:
        return []
    pres = [r["preemption"] for r in runs]
    bound = [p["high_arrival_to_bound_s"] for p in pres if p["high_arrival_to_bound_s"] is not None]
    preempted = sum(len(p["preempted_jobs"]) for p in pres)
    return [scheduler, mode, str(len(runs)), fmt(sum(r["broken_gpu_s"] for r in runs), ".2f"),
            fmt(sum(broken_beyond_burst(r) for r in runs), ".2f"), fmt(max(r["broken_gpu_s"] for r in runs), ".2f"),
            fmt(sum(r["partial_gpu_s"] for r in runs), ".2f"),
            f"{sum(sum(p['lost_pods'].values()) for p in pres)} "
            f"({sum(low_disrupted(r) for r in runs)})",
            f"{sum(evicted_gpus(t, t['runs'][mode]) for t in trials if mode in t['runs'])}/"
            f"{sum(t['jobs'][-1]['pods'] * t['jobs'][-1]['gpus'] for t in trials if mode in t['runs'])}",
            str(sum(1 for p in pres if p["preempted_jobs"])), str(preempted),
            f"{sum(len(p['back_whole_and_succeeded']) for p in pres)}/{preempted}",
            str(sum(high_restarts(r) for r in runs)),
            f"{sum(r['jobs_succeeded'] for r in runs)}/{sum(r['jobs'] for r in runs)}",
            str(sum(r["deadlocks"] for r in runs)),
            fmt(sum(bound) / len(bound) if bound else None, ".2f") + (
                f" ({len(bound)} of {len(runs)} bound)" if len(bound) < len(runs) else ""),
            fmt(percentile(bound, 50), ".2f"), fmt(worst(bound), ".2f")]


# -- the node-loss scenario's report ------------------------------------------------------------

def victim_marks(run: dict) -> dict:
    """The lost gang's milestones, s after the loss (survivors_deleted, lost_pods_gone, whole_again)."""
    loss = run["node_loss"]
    return loss["hit"].get(loss["job"], {})


def stuck_of(run: dict, job: str) -> float:
    return sum(gpu_s for j, _, _, gpu_s in run.get("stuck_episodes", []) if j == job)


def stuck_after_not_ready(run: dict) -> float | None:
    """Stuck GPU-s from the moment the lost node was seen NotReady on (what an operator that reads
    the node can act on; before it, nothing in the API says the node is gone)."""
    loss = run["node_loss"]
    not_ready = loss["loss_to"].get("not_ready")
    if not loss["lost"] or not_ready is None:
        return None
    start, total, timeline = loss["at_s"] + not_ready, 0.0, run["stuck_timeline"]
    for (t, gpus), (t_next, _) in zip(timeline, timeline[1:]):
        total += gpus * max(0.0, t_next - max(t, start))
    return total


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


NODE_LOSS_RUN_HEAD = ["trial", "nodes x GPUs (+ spare)", "lost gang (pods x GPUs)", "variant", "outcome",
                      "lost gang's pods on the lost node", "other gangs hit", "stuck GPU-s",
                      "stuck GPU-s after NotReady", "stuck GPU-s, lost gang", "loss→NotReady s",
                      "loss→survivors deleted s", "loss→admin's taint s", "loss→lost pods gone s",
                      "loss→lost gang whole again s", "loss→whole again, max of gangs hit s", "stranded GPU-s",
                      "succeeded", "lost gang restarts / disruptions", "NodeLost events", "deadlocks"]
NODE_LOSS_SUMMARY_HEAD = ["scheduler", "variant", "tfop", "trials", "node lost in", "stuck GPU-s (sum)",
                          "stuck GPU-s after NotReady (sum)", "stuck GPU-s per trial mean (max)",
                          "loss→survivors deleted mean (max) s", "loss→lost gang whole again mean / p50 / max s",
                          "whole again", "jobs succeeded", "deadlocks / timeouts", "stranded GPU-s (sum)",
                          "makespan mean s"]


def node_loss_run_row(trial: dict, variant: str) -> list[str]:
    r = trial["runs"][variant]
    loss, marks = r["node_loss"], victim_marks(r)
    spec = next(j for j in trial["jobs"] if j["name"] == loss["job"])
    whole = [m["whole_again"] for m in loss["hit"].values() if m.get("whole_again") is not None]
    status = loss["job_status"].get(loss["job"], {})
    return [str(trial["index"]), f"{trial['nodes']}+{trial['spare_nodes']}x{trial['gpus_per_node']}",
            f"{spec['pods']}x{spec['gpus']}", variant, r["outcome"],
            f"{loss['victim_pods_on_node']}/{spec['pods']}" if loss["lost"] else "not lost",
            str(len([j for j in loss["hit"] if j != loss["job"]])), fmt(r["stuck_gpu_s"], ".1f"),
            fmt(stuck_after_not_ready(r), ".1f"), fmt(stuck_of(r, loss["job"]), ".1f"),
            fmt(loss["loss_to"].get("not_ready")),
            fmt(marks.get("survivors_deleted")), fmt(loss["loss_to"].get("admin_taint")),
            fmt(marks.get("lost_pods_gone")), fmt(marks.get("whole_again")),
            fmt(max(whole) if len(whole) == len(loss["hit"]) and whole else None), fmt(r["stranded_gpu_s"], ".2f"),
            f"{r['jobs_succeeded']}/{r['jobs']}",
            f"{status.get('restart_count', 0)} / {status.get('disruption_count', 0)}",
            str(loss["tfjob_warnings"].get("NodeLost", 0)), str(r["deadlocks"])]


def node_loss_summary_row(scheduler: str, trials: list[dict], variant: str, tfop: str) -> list[str]:
    runs = [t["runs"][variant] for t in trials if variant in t["runs"]]
    if not runs:
        return []
    lost = [r for r in runs if r["node_loss"]["lost"]]
    deleted = [v for r in lost if (v := victim_marks(r).get("survivors_deleted")) is not None]
    whole = [v for r in lost if (v := victim_marks(r).get("whole_again")) is not None]
    stuck = [r["stuck_gpu_s"] for r in runs]
    spans = [r["makespan_s"] for r in runs if r["makespan_s"] is not None]
    after = [a for r in lost if (a := stuck_after_not_ready(r)) is not None]
    return [scheduler, variant, tfop, str(len(runs)), f"{len(lost)}/{len(runs)}", fmt(sum(stuck), ".1f"),
            fmt(sum(after), ".1f") + (f" ({len(after)} of {len(lost)})" if len(after) < len(lost) else ""),
            f"{fmt(_mean(stuck), '.1f')} ({fmt(worst(stuck), '.1f')})",
            f"{fmt(_mean(deleted))} ({fmt(worst(deleted))})" + (f", {len(deleted)} of {len(lost)}"
                                                                if len(deleted) < len(lost) else ""),
            f"{fmt(_mean(whole))} / {fmt(percentile(whole, 50))} / {fmt(worst(whole))}", f"{len(whole)}/{len(lost)}",
            f"{sum(r['jobs_succeeded'] for r in runs)}/{sum(r['jobs'] for r in runs)}",
            f"{sum(r['deadlocks'] for r in runs)} / {sum(1 for r in runs if r['outcome'] == 'timeout')}",
            fmt(sum(r["stranded_gpu_s"] for r in runs), ".2f"),
            fmt(_mean(spans)) + (f" ({len(spans)} of {len(runs)} finished)" if len(spans) < len(runs) else "")]


def plot_node_loss(scheduler: str, trials: list[dict], path: Path, variants: tuple[str, ...] = ("tfop", "baseline")
                   ) -> bool:
    """One panel per trial: GPUs held by gangs that cannot progress over time, s after the node's loss."""
    panels = _trial_panels(len(trials))
    if panels is None:
        return False
    plt, fig, axes = panels
    for ax, trial in zip(axes.flat, trials):
        for variant, colour in zip(variants, ("tab:blue", "tab:red")):
            run = trial["runs"].get(variant)
            if not run or not run["node_loss"]["lost"]:
                continue
            at = run["node_loss"]["at_s"]
            xs, ys = zip(*[(x - at, y) for x, y in run["stuck_timeline"]])
            ax.step(xs, ys, where="post", color=colour, label=f"{variant}: {run['stuck_gpu_s']:.0f} GPU-s stuck")
            admin = run["node_loss"]["loss_to"].get("admin_taint")
            if admin is not None:
                ax.axvline(admin, color=colour, linestyle=":", linewidth=0.8)
        ax.set_title(f"trial {trial['index']}: {trial['nodes']}+{trial['spare_nodes']}x{trial['gpus_per_node']} GPUs",
                     fontsize=9)
        ax.set_xlabel("s after the node's loss (dotted: the admin's taint)", fontsize=8)
        ax.set_ylabel("GPUs stuck", fontsize=8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return _save_panels(plt, fig, axes, len(trials),
                        f"{scheduler}: GPUs held by gangs that cannot progress after a node's loss", path)
