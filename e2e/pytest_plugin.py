"""pytest fixtures for tests against the real local control plane.

Load with `pytest_plugins = ["e2e.pytest_plugin"]` in a top-level conftest.py.

Fixtures: `cluster` (session; an e2e.harness.cluster.Cluster), `namespace` (function;
a fresh namespace name, deleted afterwards), `kubectl` (function; runs the
built kubectl against the cluster as admin). Mark tests with
`@pytest.mark.cluster`. `own_cluster(dir, schedulers)` starts a cluster for
one module only (e.g. with Volcano's cluster-wide admission webhook), under the
same skip/fail rules.

`real_cluster` (session) is a cluster of its own with a real node (e2e.harness.realnode:
kubelet, containerd, CoreDNS; the TensorFlow image imported), Volcano and
scheduler-plugins, and no GPU nodes; mark its tests `@pytest.mark.realnode`
(and `cluster`), and `images(...)` with the e2e.harness.images images they use, so that those
are built in the background while the tests before them run. Where this machine
cannot run a real node the tests are skipped with the one-line reason, and fail
under CI=true.

Environment: CI=true turns every start-up problem (no Go, build failure,
component not starting) into a test failure, never a skip. TFOP_E2E_SCHEDULERS
(default "default,coscheduling,volcano,koordinator";
add ",yunikorn" to run the YuniKorn tests; the Kueue and Volcano-webhook
tests always start a cluster of their own), TFOP_E2E_GPU_NODES (4),
TFOP_E2E_GPUS_PER_NODE (1) shape the session cluster.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from e2e import build
from e2e.harness.cluster import ALL_SCHEDULERS, Cluster, components_for
from e2e.harness.errors import RealNodeUnavailable
from e2e.harness.kubelet_node import real_node_images

_session_cluster: Cluster | None = None
_session_error: str | None = None
_real_cluster: Cluster | None = None
_real_error: str | None = None
_background: list[subprocess.Popen] = []  # what pytest_collection_finish started
REAL_CLUSTER_SCHEDULERS = ("default", "coscheduling", "volcano")
# Imported into real_cluster's node at its start; its modules' `images` marker names REAL_CLUSTER_IMAGES.
REAL_CLUSTER_NODE_IMAGES = ("tf",)
REAL_CLUSTER_IMAGES = real_node_images(REAL_CLUSTER_NODE_IMAGES)


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def pytest_configure(config):
    config.addinivalue_line("markers", "cluster: needs the real local control plane (e2e.harness.cluster)")
    config.addinivalue_line("markers", "realnode: runs real pods on a real kubelet (e2e.harness.realnode; root)")
    config.addinivalue_line("markers", "builds(*components): optional e2e.build components its tests need "
                                       "(its cluster's, helm, training-operator), built in the background from "
                                       "the start of the session")
    config.addinivalue_line("markers", "images(*names): e2e.harness.images images its tests need, built in the "
                                       "background from the start of the session")


def pytest_collection_modifyitems(session, config, items):
    """Tests whose clusters need optional components (`builds`) run last, in their own order (whole
    modules move: the marker is a module's): the components' background builds then have the whole
    session instead of holding up those tests' fixtures."""
    items[:] = sorted(items, key=lambda item: item.get_closest_marker("builds") is not None)


def pytest_collection_finish(session):
    """Start making, at the lowest CPU priority, what the selected tests need and may not find
    cached: the optional components of `builds` (Kueue's, Kubernetes 1.37's, helm's cold builds: minutes
    each) and the node images of `images` (the TensorFlow and operator images: minutes of downloads). They
    then use the cores the tests before them leave idle (most of two, while a test waits on a scheduler),
    instead of holding up their own tests' fixtures. A fixture needing one waits for it (the build's
    lock), and makes it itself if the background one failed, with the error."""
    if build.go_exe() is None or session.config.option.collectonly:
        return
    components = [c for c in _marked(session.items, "builds") if not build.is_built(c)]
    if components:
        _background.append(_in_background("e2e.build", "--components", ",".join(components)))
    if wanted := _marked(session.items, "images"):  # it finds which are cached (a key may read Go sources)
        _background.append(_in_background("e2e.harness.images", "--images", ",".join(wanted)))


def _marked(items, marker: str) -> list[str]:
    """The arguments of every `marker` on the items, each once."""
    wanted: list[str] = []
    for item in items:
        for mark in item.iter_markers(marker):
            wanted += [name for name in mark.args if name not in wanted]
    return wanted


def _in_background(module: str, *args: str) -> subprocess.Popen:
    log_path = Path(tempfile.gettempdir()) / f"tfop-{module.replace('.', '-')}-background-{os.getpid()}.log"
    print(f"\n[e2e] {module} {' '.join(args)} in the background (nice 19); log: {log_path}", flush=True)
    with open(log_path, "wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", module, *args], stdout=log, stderr=subprocess.STDOUT,
            cwd=Path(__file__).resolve().parents[1], start_new_session=True, preexec_fn=lambda: os.nice(19))


def pytest_sessionfinish(session, exitstatus):
    global _session_cluster, _real_cluster
    for c in (_session_cluster, _real_cluster):
        if c is not None:
            c.down()
    _session_cluster = _real_cluster = None
    for running in _background:
        if running.poll() is None:  # its tests were not reached
            os.killpg(running.pid, signal.SIGTERM)
            running.wait(timeout=30)
    _background.clear()


def _get_cluster(tmp_dir) -> Cluster:
    """One cluster per session, even if these fixtures are registered twice
    (plugin + a conftest importing them)."""
    global _session_cluster, _session_error
    if _session_cluster is not None:
        return _session_cluster
    if _session_error is not None:  # don't retry a failed start for every test
        pytest.fail(_session_error, pytrace=False)
    schedulers = os.environ.get("TFOP_E2E_SCHEDULERS", ",".join(ALL_SCHEDULERS)).split(",")
    _skip_without_binaries(schedulers)
    try:
        _session_cluster = Cluster.up(
            tmp_dir, schedulers=[s for s in schedulers if s],
            gpu_nodes=int(os.environ.get("TFOP_E2E_GPU_NODES", "4")),
            gpus_per_node=int(os.environ.get("TFOP_E2E_GPUS_PER_NODE", "1")))
    except Exception as e:  # a failure, in CI and outside: the harness is broken
        _session_error = f"e2e cluster failed to start: {e}"
        pytest.fail(_session_error, pytrace=False)
    return _session_cluster


def _skip_without_binaries(schedulers, kubernetes: str | None = None) -> None:
    if build.go_exe() is None and not all(build.is_built(c) for c in components_for(schedulers, kubernetes)):
        msg = "Go toolchain not found and e2e binaries not built: cannot run real-cluster tests"
        if _in_ci():
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg + " (install Go, then `python -m e2e.build`)")


@contextlib.contextmanager
def own_cluster(tmp_dir, schedulers, **kwargs):
    """A cluster apart from the session's, stopped on exit: for components whose effect is
    cluster-wide (admission webhooks see every pod) and must not reach other tests."""
    _skip_without_binaries(schedulers, kwargs.get("kubernetes"))
    try:
        c = Cluster.up(tmp_dir, schedulers=list(schedulers), **kwargs)
    except Exception as e:  # a failure, in CI and outside: the harness is broken
        pytest.fail(f"e2e cluster failed to start: {e}", pytrace=False)
    try:
        yield c
    finally:
        c.down()


@pytest.fixture(scope="session")
def cluster(tmp_path_factory) -> Cluster:
    return _get_cluster(tmp_path_factory.mktemp("e2e-cluster"))


def real_node_unavailable(reason: str):
    """Skip with the reason; under CI a missing privilege or binary is a failure."""
    msg = f"real nodes cannot run here: {reason}"
    if _in_ci():
        pytest.fail(msg, pytrace=False)
    pytest.skip(msg)


@pytest.fixture(scope="session")
def real_cluster(tmp_path_factory) -> Cluster:
    global _real_cluster, _real_error
    if _real_cluster is None:
        if _real_error is not None:
            pytest.fail(_real_error, pytrace=False)
        _skip_without_binaries(REAL_CLUSTER_SCHEDULERS)
        try:
            _real_cluster = Cluster.up(tmp_path_factory.mktemp("e2e-real-cluster"),
                                       schedulers=list(REAL_CLUSTER_SCHEDULERS), gpu_nodes=0, real_nodes=1,
                                       node_images=REAL_CLUSTER_NODE_IMAGES)
        except RealNodeUnavailable as e:
            real_node_unavailable(str(e))
        except Exception as e:  # a failure, in CI and outside: the harness is broken
            _real_error = f"e2e real-node cluster failed to start: {e}"
            pytest.fail(_real_error, pytrace=False)
    return _real_cluster


def stop_real_cluster() -> None:
    """Stop the session's real-node cluster (one per machine), for a test that starts its own;
    the next test that asks for `real_cluster` starts it again."""
    global _real_cluster
    if _real_cluster is not None:
        _real_cluster.down()
        _real_cluster = None


@pytest.fixture
def real_namespace(real_cluster, request) -> str:
    yield from _fresh_namespace(real_cluster, request)


class Kubectl:
    """`kubectl(*args)` -> CompletedProcess (raises on failure unless check=False);
    `kubectl.json(*args)` -> parsed `-o json` output."""

    def __init__(self, cluster: Cluster, namespace: str | None = None):
        self.cluster, self.namespace = cluster, namespace

    def __call__(self, *args: str, input: str | None = None, check: bool = True,
                 timeout: float = 60) -> subprocess.CompletedProcess:
        ns = ["-n", self.namespace] if self.namespace else []
        return self.cluster.kubectl(*ns, *args, input=input, check=check, timeout=timeout)

    def json(self, *args: str) -> dict:
        return json.loads(self(*args, "-o", "json").stdout)


@pytest.fixture
def kubectl(cluster) -> Kubectl:
    return Kubectl(cluster)


@pytest.fixture
def namespace(cluster, request) -> str:
    yield from _fresh_namespace(cluster, request)


def _fresh_namespace(cluster: Cluster, request):
    base = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"{base}-{uuid.uuid4().hex[:5]}"
    cluster.kubectl("create", "namespace", name)
    # Pods are rejected until the ServiceAccount controller made `default`.
    deadline = time.monotonic() + 30
    while cluster.kubectl("get", "sa", "default", "-n", name, check=False).returncode != 0:
        if time.monotonic() > deadline:
            pytest.fail(f"no default ServiceAccount in {name}:\n{cluster.logs_tail('kube-controller-manager')}")
        time.sleep(0.2)
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)
