"""Build the e2e control-plane binaries from pinned Go modules.

Each component is a tiny Go module under e2e/components/<name>/ whose go.mod
pins the upstream release (via `tool` directives, or a main package of its own
in the component dir, package path "."). Binaries go to a cache directory
outside the repo, keyed by a hash of go.mod, go.sum and any *.go files there, so
a second run builds nothing.

    python -m e2e.build [--components kubernetes,etcd,...] [--force]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

try:
    import fcntl
except ImportError:  # non-POSIX: no cross-process build lock
    fcntl = None

COMPONENTS_DIR = Path(__file__).resolve().parent / "components"

# component -> {binary name: Go package path}; "." is the main package in the
# component dir. Order = build order (the kubernetes build warms the Go build
# cache that the schedulers reuse).
COMPONENTS: dict[str, dict[str, str]] = {
    "kubernetes": {
        "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
        "kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
        "kube-scheduler": "k8s.io/kubernetes/cmd/kube-scheduler",
        "kubectl": "k8s.io/kubernetes/cmd/kubectl",
        "kubelet": "k8s.io/kubernetes/cmd/kubelet",
        "kube-proxy": "k8s.io/kubernetes/cmd/kube-proxy",  # a real node's Services (the apiserver's)
    },
    "etcd": {"etcd": "go.etcd.io/etcd/server/v3"},
    # Cluster DNS of the real nodes: CoreDNS with only the plugins they use (main.go).
    "coredns": {"coredns": "."},
    "kwok": {"kwok": "sigs.k8s.io/kwok/cmd/kwok"},
    "scheduler-plugins": {
        "scheduler-plugins-scheduler": "sigs.k8s.io/scheduler-plugins/cmd/scheduler",
        "scheduler-plugins-controller": "sigs.k8s.io/scheduler-plugins/cmd/controller",
    },
    "volcano": {
        "vc-scheduler": "volcano.sh/volcano/cmd/scheduler",
        # Only clusters that ask for the "volcano-webhook" scheduler entry run it.
        "vc-webhook-manager": "volcano.sh/volcano/cmd/webhook-manager",
    },
    "koordinator": {"koord-scheduler": "github.com/koordinator-sh/koordinator/cmd/koord-scheduler"},
    # Optional (not built unless asked for or a cluster needs it).
    # Kubernetes 1.37's control plane, for native gang scheduling (Workload API, PodGroup v1beta1):
    # Cluster.up(kubernetes="1.37"). Binary names carry the version: they are unique across components.
    "kubernetes-1.37": {
        "kube-apiserver-1.37": "k8s.io/kubernetes/cmd/kube-apiserver",
        "kube-controller-manager-1.37": "k8s.io/kubernetes/cmd/kube-controller-manager",
        "kube-scheduler-1.37": "k8s.io/kubernetes/cmd/kube-scheduler",
    },
    # Kubernetes 1.30's control plane, the oldest release tfop supports: Cluster.up(kubernetes="1.30"),
    # e2e/tests/test_kubernetes_versions.py.
    "kubernetes-1.30": {
        "kube-apiserver-1.30": "k8s.io/kubernetes/cmd/kube-apiserver",
        "kube-controller-manager-1.30": "k8s.io/kubernetes/cmd/kube-controller-manager",
        "kube-scheduler-1.30": "k8s.io/kubernetes/cmd/kube-scheduler",
    },
    "yunikorn": {"yunikorn-scheduler": "github.com/apache/yunikorn-k8shim/pkg/cmd/shim"},
    # Job queueing and quota admission (its kubeflow.org/tfjob integration suspends/unsuspends TFJobs),
    # and MultiKueue: v0.15.0, and v0.10.2 (before Kueue defaulted managedBy).
    "kueue": {"kueue-manager": "sigs.k8s.io/kueue/cmd/kueue"},
    "kueue-0.10": {"kueue-manager-0.10": "sigs.k8s.io/kueue/cmd/kueue"},
    "training-operator": {"training-operator": "github.com/kubeflow/training-operator/cmd/training-operator.v1"},
    # Lints and renders charts/tfop in tests/test_install_paths.py and e2e/tests/test_install.py.
    "helm": {"helm": "helm.sh/helm/v3/cmd/helm"},
}
# What real (kubelet) nodes need besides kubernetes (its kubelet) and etcd.
REAL_NODE_COMPONENTS = ["coredns"]
DEFAULT_COMPONENTS = ["kubernetes", "etcd", *REAL_NODE_COMPONENTS, "kwok", "scheduler-plugins", "volcano",
                      "koordinator"]

BINARY_COMPONENT = {b: c for c, bins in COMPONENTS.items() for b in bins}


class BuildError(RuntimeError):
    pass


def go_exe() -> str | None:
    found = shutil.which("go")
    if found:
        return found
    fallback = Path("/usr/local/go/bin/go")
    return str(fallback) if fallback.exists() else None


def cache_root() -> Path:
    env = os.environ.get("TFOP_E2E_CACHE")
    if env:
        return Path(env)
    return Path.home() / ".cache" / "tfop-e2e" / "bin"


def component_key(name: str) -> str:
    h = hashlib.sha256()
    for f in ("go.mod", "go.sum"):
        p = COMPONENTS_DIR / name / f
        h.update(f.encode() + b"\0")
        h.update(p.read_bytes() if p.exists() else b"")
    # Sources of a main package of its own; none in the tool-only components, whose keys stay as they were.
    for p in sorted((COMPONENTS_DIR / name).glob("*.go")):
        h.update(p.name.encode() + b"\0" + p.read_bytes())
    stamp = _version_stamp(name)
    if stamp:  # only then: the keys (cache dirs) of the other components stay as they were
        h.update(b"ldflags\0" + stamp.encode())
    return h.hexdigest()[:16]


def _version_stamp(name: str) -> str:
    """Extra -ldflags of a component. Kubernetes binaries built from the module report version
    "v0.0.0-master+$Format:%H$" unless stamped as Kubernetes' own build does; clients that parse
    the apiserver's /version (Kueue exits at start on that one) need the real release."""
    if name not in ("kubernetes", "kubernetes-1.37", "kubernetes-1.30"):
        return ""
    text = (COMPONENTS_DIR / name / "go.mod").read_text()
    release = next(line.split()[1] for line in text.splitlines()
                   if line.strip().startswith("k8s.io/kubernetes v"))
    return f"-X k8s.io/component-base/version.gitVersion={release}"


def bin_dir(name: str) -> Path:
    return cache_root() / f"{name}-{component_key(name)}"


def is_built(name: str) -> bool:
    d = bin_dir(name)
    return all((d / b).is_file() for b in COMPONENTS[name])


def binary(bin_name: str) -> Path:
    """Path of a built binary (e.g. 'kube-apiserver'); raises if not built."""
    comp = BINARY_COMPONENT[bin_name]
    p = bin_dir(comp) / bin_name
    if not p.is_file():
        raise BuildError(f"{bin_name} not built; run: python -m e2e.build --components {comp}")
    return p


def built_binary(bin_name: str) -> Path:
    """Path of a binary, its component built first when missing (BuildError when it cannot be)."""
    ensure([BINARY_COMPONENT[bin_name]])
    return binary(bin_name)


def _go_env() -> dict[str, str]:
    env = dict(os.environ)
    flags = env.get("GOFLAGS", "")
    if "-buildvcs" not in flags:  # module builds have no VCS info to stamp
        env["GOFLAGS"] = (flags + " -buildvcs=false").strip()
    env.setdefault("CGO_ENABLED", "0")  # static binaries; no C toolchain needed
    return env


def _heartbeat(label: str, start: float, stop: threading.Event) -> None:
    while not stop.wait(30):
        print(f"  ... {label} still building ({time.monotonic() - start:.0f}s)", flush=True)


@contextlib.contextmanager
def one_builder(lock_path: Path, label: str) -> Iterator[None]:
    """Several pytest sessions or engineers may build the same thing at once: one builds, the
    others wait for it here and then find the result cached."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as lock:
        if fcntl is not None:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                print(f"{label}: another process is building it; waiting", flush=True)
                fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def build_component(name: str, force: bool = False) -> tuple[Path, float | None]:
    """Build one component; returns (bin dir, seconds or None when cached)."""
    out = bin_dir(name)
    if is_built(name) and not force:
        print(f"[e2e.build] {name}: cached in {out}", flush=True)
        return out, None
    with one_builder(cache_root() / f".{name}.lock", f"[e2e.build] {name}"):
        if is_built(name) and not force:
            print(f"[e2e.build] {name}: cached in {out}", flush=True)
            return out, None
        return _build_locked(name, out)


def go_output_name(pkg: str, module: str) -> str:
    """The file `go build -o DIR/` writes for a main package: the last element of its import path
    (the module's for "."), a major-version suffix skipped (go.etcd.io/etcd/server/v3 -> server)."""
    parts = (module if pkg == "." else pkg).split("/")
    if len(parts) > 1 and re.fullmatch(r"v[0-9]+", parts[-1]):
        parts = parts[:-1]
    return parts[-1]


def _module_path(name: str) -> str:
    for line in (COMPONENTS_DIR / name / "go.mod").read_text().splitlines():
        if line.startswith("module "):
            return line.split()[1]
    raise BuildError(f"e2e/components/{name}/go.mod names no module")


def _build_locked(name: str, out: Path) -> tuple[Path, float]:
    go = go_exe()
    if not go:
        raise BuildError("Go toolchain not found (need `go` on PATH)")
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    binaries = COMPONENTS[name]
    module = _module_path(name)
    # One `go build` for all of a component's binaries: each link (one core, tens of seconds for a
    # Kubernetes binary) then overlaps the compiling for the next, instead of waiting its turn.
    print(f"[e2e.build] building {name}: {', '.join(binaries)}", flush=True)
    t0 = time.monotonic()
    stop = threading.Event()
    threading.Thread(target=_heartbeat, args=(name, t0, stop), daemon=True).start()
    try:
        proc = subprocess.run(
            [go, "build", "-trimpath", f"-ldflags=-s -w {_version_stamp(name)}".strip(), "-o", f"{tmp}{os.sep}",
             *binaries.values()],
            cwd=COMPONENTS_DIR / name, env=_go_env(), capture_output=True, text=True,
        )
    finally:
        stop.set()
    if proc.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise BuildError(f"go build {' '.join(binaries.values())} failed:\n{proc.stderr[-4000:]}")
    for bin_name, pkg in binaries.items():
        (tmp / go_output_name(pkg, module)).rename(tmp / bin_name)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    dt = time.monotonic() - t0
    print(f"[e2e.build] {name}: done in {dt:.0f}s -> {out}", flush=True)
    return out, dt


def ensure(components: list[str] | None = None, force: bool = False) -> dict[str, Path]:
    """Build (sequentially: 2 cores) whatever is missing; returns bin dirs."""
    names = components or DEFAULT_COMPONENTS
    unknown = [n for n in names if n not in COMPONENTS]
    if unknown:
        raise BuildError(f"unknown components {unknown}; known: {list(COMPONENTS)}")
    t0 = time.monotonic()
    result, timings = {}, {}
    for n in names:
        result[n], timings[n] = build_component(n, force=force)
    built = {n: t for n, t in timings.items() if t is not None}
    total = time.monotonic() - t0
    if built:
        print("[e2e.build] timings: " + ", ".join(f"{n} {t:.0f}s" for n, t in built.items())
              + f"; total {total:.0f}s", flush=True)
    else:
        print(f"[e2e.build] all cached ({total:.1f}s)", flush=True)
    return result


def module_dir(component: str, module: str) -> Path:
    """Source dir (in GOMODCACHE) of `module` at the version pinned by a
    component's go.mod, downloading it if needed. CRDs and sample configs are
    read from here at run time instead of being copied into the repo."""
    go = go_exe()
    if not go:
        raise BuildError("Go toolchain not found")
    proc = subprocess.run([go, "mod", "download", "-json", module], cwd=COMPONENTS_DIR / component,
                          env=_go_env(), capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildError(f"go mod download {module}: {proc.stdout}{proc.stderr}")
    info = json.loads(proc.stdout)
    if info.get("Error"):
        raise BuildError(f"go mod download {module}: {info['Error']}")
    return Path(info["Dir"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m e2e.build", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--components", default=",".join(DEFAULT_COMPONENTS),
                    help="comma-separated, from: " + ",".join(COMPONENTS))
    ap.add_argument("--force", action="store_true", help="rebuild even if cached")
    args = ap.parse_args(argv)
    try:
        ensure([c for c in args.components.split(",") if c], force=args.force)
    except BuildError as e:
        print(f"[e2e.build] ERROR: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
