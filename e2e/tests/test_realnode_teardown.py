"""`python -m e2e.harness up --real-nodes 1` then `down` leaves this machine as it was.

What a real node changes is machine-wide: processes (containerd, its shims, the kubelet, CoreDNS,
the pods' own), mounts (overlay rootfs, network namespaces, the kubelet's volumes), a bridge and
veths, iptables chains, cgroups and kernel settings. Each test lists all of them before and after,
with a pod running in between, once after a clean `down` and once after the process that started
the cluster was SIGKILLed (its components die with it; the pods' shims and mounts do not).
"""
from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from e2e.harness import realnode
from e2e.harness.cluster import Cluster
from e2e.harness.errors import RealNodeUnavailable
from e2e.pytest_plugin import real_node_unavailable, stop_real_cluster

pytestmark = [pytest.mark.cluster, pytest.mark.realnode]
REPO = Path(__file__).resolve().parents[2]
CGROUP_FS = Path("/sys/fs/cgroup")


def host_state() -> dict[str, set[str]]:
    """Everything of the host a real node could leave behind, as comparable sets."""
    return {
        "processes": {cmd for cmd in _commands()
                      if any(word in cmd for word in ("containerd", "kubelet", "coredns", "/pause", "sleep 3600"))},
        "mounts": {line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()},
        "links": set(os.listdir("/sys/class/net")),
        "iptables chains": {f"{tool} {table} {line.split()[1]}"
                            for tool in ("iptables", "ip6tables") for table in ("filter", "nat", "mangle")
                            for line in _run(tool, "-w", "-t", table, "-S").stdout.splitlines()
                            if line.startswith("-N ")},
        "cgroups": {str(p) for p in CGROUP_FS.rglob("*") if p.is_dir() and not _beside_this_process(p)},
        "sysctls": {f"{k}={(Path('/proc/sys') / k).read_text().strip()}" for k in realnode.KUBELET_SYSCTLS},
        "files": {str(f) for d in (realnode.PATHS.root, realnode.CONTAINERD_FIXED_STATE, Path("/var/log/containers"))
                  if d.exists() for f in (d, *d.rglob("*"))},
    }


def assert_as_before(before: dict[str, set[str]]) -> None:
    after = host_state()
    diff = {kind: {"left": sorted(after[kind] - before[kind]), "gone": sorted(before[kind] - after[kind])}
            for kind in before if after[kind] != before[kind]}
    assert not diff, json.dumps(diff, indent=1)


def _beside_this_process(cgroup: Path) -> bool:
    """A cgroup beside this process's own, below the root: where whatever runs commands on this machine
    (the CI runner, a shell tool) puts each other command it runs. Those come and go with the other
    commands, never with the node, which makes its cgroups at the root (kubepods) or in its own."""
    parts = cgroup.relative_to(CGROUP_FS).parts
    inside = "/" + "/".join(parts if (CGROUP_FS / "cgroup.controllers").exists() else parts[1:])  # v2, v1
    return any(inside.startswith(parent + "/") and not (inside + "/").startswith(own + "/")
               for parent, own in _own_cgroups())


@functools.cache
def _own_cgroups() -> tuple[tuple[str, str], ...]:
    """(parent, own) of this process's cgroup in each hierarchy whose parent is below the root."""
    owns = [line.split(":", 2)[2] for line in Path("/proc/self/cgroup").read_text().splitlines()]
    return tuple((own.rsplit("/", 1)[0], own) for own in owns if own.rsplit("/", 1)[0])


def _commands() -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                found.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip())
            except OSError:
                pass
    return [c for c in found if c]


def _run(*cmd: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, **kwargs)


def cluster_cli(*args: str) -> subprocess.CompletedProcess:
    return _run(sys.executable, "-m", "e2e.harness", *args, cwd=REPO)


def sleeper(image: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sleeper", "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": image, "command": ["sleep", "3600"]}],
                     "terminationGracePeriodSeconds": 1, **realnode.placement()}}


def wait_running(cluster: Cluster, pod: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cluster.kubectl("get", "pod", pod, "-n", "default", "-o", "jsonpath={.status.phase}", check=False)
        if got.stdout == "Running":
            return
        time.sleep(0.5)
    raise AssertionError(f"pod {pod} not Running: {cluster.kubectl('describe', 'pod', pod, '-n', 'default').stdout}")


@pytest.fixture
def machine():
    """The host as it is with no real node, and nothing of one left when the test ends."""
    if reason := realnode.unavailable_reason():
        real_node_unavailable(reason)
    stop_real_cluster()
    before = host_state()
    yield before
    realnode.teardown()


def test_up_then_down_leaves_nothing(machine, tmp_path):
    d = tmp_path / "cluster"
    up = cluster_cli("up", "--dir", str(d), "--real-nodes", "1", "--node-images", "base",
                     "--schedulers", "default", "--gpu-nodes", "0")
    assert up.returncode == 0, up.stdout + up.stderr
    c = Cluster.attach(d)
    c.apply(sleeper(c.node_image("base")))
    wait_running(c, "sleeper")
    assert realnode.leftovers()["mounts"], "a running pod has mounts under the node's root"
    down = cluster_cli("down", "--dir", str(d))
    assert down.returncode == 0, down.stdout + down.stderr
    assert_as_before(machine)
    assert not any(realnode.leftovers().values()), realnode.leftovers()


def test_down_after_the_test_process_crashed_leaves_nothing(machine, tmp_path):
    d = tmp_path / "cluster"
    script = textwrap.dedent(f"""
        import sys, time
        from e2e.harness.cluster import Cluster
        from e2e.harness import realnode
        c = Cluster.up({str(d)!r}, schedulers=["default"], gpu_nodes=0, real_nodes=1, node_images=("base",))
        print("UP", flush=True)
        time.sleep(3600)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        said = next((line.strip() for line in iter(proc.stdout.readline, "") if not line.startswith("[e2e.")), "")
        assert said == "UP", f"the cluster did not start: {said!r}"
        c = Cluster.attach(d)
        c.apply(sleeper(c.node_image("base")))
        wait_running(c, "sleeper")
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        time.sleep(1)
        # The components died with their parent; the pod's shim, process and mounts did not.
        left = realnode.leftovers()
        assert left["processes"] and left["mounts"], left
    finally:
        if proc.poll() is None:
            proc.kill()
    down = cluster_cli("down", "--dir", str(d))
    assert down.returncode == 0, down.stdout + down.stderr
    assert_as_before(machine)


def test_a_machine_without_real_nodes_says_why_in_one_line(monkeypatch):
    monkeypatch.setattr(realnode, "REQUIRED_COMMANDS", ("no-such-containerd",))
    reason = realnode.unavailable_reason()
    assert reason and "\n" not in reason and "no-such-containerd" in reason, reason
    with pytest.raises(RealNodeUnavailable, match="no-such-containerd"):
        Cluster.up(Path("/nonexistent-tfop-e2e"), real_nodes=1, build_missing=False)
