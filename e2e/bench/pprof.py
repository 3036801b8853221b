"""--pprof: where the control plane's CPU goes during a benchmark row.

On this machine a row's wall time is the whole machine's CPU over its two cores, and most of that is
the control plane's (BENCHMARK.md), so "why is tfop's row slower than the raw client's" is mostly
"what does the apiserver or the controller manager do more of". Their /debug/pprof answers it: over
a row's burst the benchmark takes back-to-back CPU profiles of each (a profile has a fixed length,
so slices of SLICE_SECONDS), merges them with `go tool pprof -proto` into one file next to the
results, and adds to the row the CPU seconds of a few named parts (BUCKETS). `go tool pprof -top
-cum FILE` on the kept file shows the rest.
"""
from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from pathlib import Path

from e2e import build
from e2e.bench.control_plane_figures import component_get

SLICE_SECONDS = 5
# Named parts of each component's CPU: a sample counts in a part when a frame of its stack matches.
# Parts may overlap (creates of every kind include a TFJob's); each is read on its own.
BUCKETS: dict[str, dict[str, str]] = {
    "kube-apiserver": {
        # custom resources: TFJobs, and a gang's group objects (PodGroups) when there are
        "custom resource creates": r"crdHandler\)\.serveResource\.CreateResource",
        "custom resource status writes": r"customresource\.\(\*StatusREST\)\.Update",
        "pod status writes": r"pod/storage\.\(\*StatusREST\)\.Update",
        "pod bindings": r"\(\*BindingREST\)\.Create",
        "creates, every kind": r"CreateResource\.createHandler",
        "watches served": r"\(\*WatchServer\)\.HandleHTTP",
        "lists served": r"ListResource\.func1$",
        "etcd watch decoding": r"etcd3\.\(\*watchChan\)",
        "Go garbage collection": r"runtime\.gcBgMarkWorker",
    },
    "kube-controller-manager": {
        "endpoints": r"pkg/controller/endpoint\.",
        "endpointslices": r"pkg/controller/endpointslice\.",
        "endpointslice mirroring": r"pkg/controller/endpointslicemirroring\.",
        "garbage collector": r"pkg/controller/garbagecollector\.",
        "Go garbage collection": r"runtime\.gcBgMarkWorker",
    },
    "kube-scheduler": {
        "scheduling cycles": r"\(\*Scheduler\)\.schedulingCycle",
        "binding cycles": r"\(\*Scheduler\)\.bindingCycle",
        "Go garbage collection": r"runtime\.gcBgMarkWorker",
    },
}
UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "mins": 60.0, "hrs": 3600.0}
SHOWING = re.compile(r"Showing nodes accounting for (\S+), [\d.]+% of (\S+) total")


def seconds(text: str) -> float:
    """A duration as pprof prints it: 0, 650ms, 3.02s, 1.50mins."""
    match = re.fullmatch(r"([\d.]+)([a-zµ]*)", text)
    if not match:
        raise ValueError(f"not a pprof duration: {text!r}")
    number, unit = match.groups()
    return float(number) * (UNITS[unit] if unit else 1.0)


def focused_seconds(top_output: str) -> tuple[float, float]:
    """(seconds in the focused samples, seconds in the whole profile) from `go tool pprof -top`'s
    header; (0, 0) when nothing matched (pprof then prints no such line)."""
    match = SHOWING.search(top_output)
    return (seconds(match.group(1)), seconds(match.group(2))) if match else (0.0, 0.0)


def merged_profile(out_dir: Path, stem: str, component: str) -> Path:
    """Where a row's merged profile of one component is kept (stem: the row's namespace)."""
    return out_dir / f"pprof-{stem}-{component}.pb.gz"


def pprof(*args: str) -> subprocess.CompletedProcess:
    go = build.go_exe()
    if go is None:
        raise RuntimeError("--pprof needs the Go toolchain (`go tool pprof`)")
    return subprocess.run([go, "tool", "pprof", *args], capture_output=True, text=True, timeout=120)


def summarise(component: str, profile: Path) -> dict[str, float]:
    """CPU seconds of the whole profile ("total") and of each of the component's BUCKETS."""
    every = ["-top", "-nodecount=1000000", "-nodefraction=0", "-edgefraction=0"]
    _, total = focused_seconds(pprof(*every, str(profile)).stdout)
    out = {"total": round(total, 2)}
    for name, pattern in BUCKETS.get(component, {}).items():
        part, _ = focused_seconds(pprof(*every, f"-focus={pattern}", str(profile)).stdout)
        out[name] = round(part, 2)
    return out


class ControlPlaneProfile:
    """Back-to-back CPU profiles of the cluster's Go components from start() until stop(), merged."""

    def __init__(self, cluster, out_dir: Path, stem: str, components: tuple[str, ...] = tuple(BUCKETS)):
        self.cluster, self.out_dir, self.stem = cluster, out_dir, stem
        self.components = [c for c in components if c in (cluster.state.get("pids") or {})]
        self.slices: dict[str, list[Path]] = {c: [] for c in self.components}
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task] = []

    def start(self) -> "ControlPlaneProfile":
        self._tasks = [asyncio.create_task(self._capture(c)) for c in self.components]
        return self

    async def _capture(self, component: str) -> None:
        while not self._stop.is_set():
            n = len(self.slices[component])
            path = self.out_dir / f"pprof-{self.stem}-{component}.{n}.pb.gz"
            data = await asyncio.to_thread(component_get, self.cluster, component,
                                           f"/debug/pprof/profile?seconds={SLICE_SECONDS}",
                                           SLICE_SECONDS + 30, True)
            path.write_bytes(data)
            self.slices[component].append(path)

    async def stop(self) -> dict[str, Path]:
        """Ends at the current slice's end (within SLICE_SECONDS); the merged file of each component."""
        self._stop.set()
        await asyncio.gather(*self._tasks)
        merged = {}
        for component, parts in self.slices.items():
            if not parts:
                continue
            path = merged_profile(self.out_dir, self.stem, component)
            done = pprof("-proto", f"-output={path}", *map(str, parts))
            if done.returncode != 0:
                raise RuntimeError(f"merging {component}'s profiles: {done.stderr.strip()}")
            for part in parts:
                part.unlink()
            merged[component] = path
        return merged


def resummarise(results: Path) -> None:
    """Read each row's kept profiles (`logs/` beside the results) again with today's BUCKETS."""
    data = json.loads(results.read_text())
    for row in data["rows"]:
        for component in row.get("control_plane_profile") or {}:
            profile = merged_profile(results.parent / "logs", row["namespace"], component)
            row["control_plane_profile"][component] = summarise(component, profile)
    results.write_text(json.dumps(data, indent=1))


if __name__ == "__main__":
    for name in sys.argv[1:]:  # python -m e2e.bench.pprof RESULTS.json...
        resummarise(Path(name))
