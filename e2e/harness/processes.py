"""The components as process groups: started in the cluster directory, recorded in its state,
health-checked, stopped. Every component runs with the cluster directory as its cwd, which tells a
component's pid from a reused one."""
from __future__ import annotations

import ctypes
import json
import os
import random
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from e2e.harness.errors import ClusterError


def free_port() -> int:
    """A port free now and outside the kernel's ephemeral range: the component binds it seconds or
    minutes later, and a port from that range can be taken in between by any outgoing connection
    (a component's client, kubectl), which made a component exit at start."""
    low, high = _ephemeral_range()
    below, above = range(PORTS_FROM, low), range(high + 1, 65536)
    choices = below if len(below) >= len(above) else above
    if not choices:
        raise ClusterError(f"no port range outside the ephemeral ports {low}-{high}")
    for _ in range(200):
        port = random.choice(choices)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:  # another cluster's or service's
                continue
        return port
    raise ClusterError(f"no free port in {choices.start}-{choices.stop - 1} after 200 tries")


PORTS_FROM = 20000  # below: well-known services' ports


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default
    return low, high


def load_state(cluster_dir: Path) -> dict:
    """DIR/state.json, or {} if there is none."""
    sf = cluster_dir / "state.json"
    return json.loads(sf.read_text()) if sf.exists() else {}


def alive_components(state: dict, cluster_dir: Path) -> dict[str, bool]:
    """Every component started, in start order: is its process running?"""
    pids = state.get("pids", {})
    names = list(state.get("components", {})) or list(pids)
    return {n: n in pids and pid_alive(pids[n], cluster_dir) for n in names}


def launch(name: str, record: dict, cluster_dir: Path, logs: Path, die_with_parent: bool) -> subprocess.Popen:
    """Start component `name` as recorded (command, env), its output appended to logs/<name>.log."""
    log = open(logs / f"{name}.log", "ab")
    proc = subprocess.Popen(
        record["cmd"], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        cwd=cluster_dir, env={**os.environ, **record["env"]}, start_new_session=True,
        preexec_fn=_die_with_parent if die_with_parent else None)
    log.close()
    return proc


def wait(what: str, pred, timeout: float, component: str, procs: dict[str, subprocess.Popen], logs_tail) -> None:
    """Poll pred() until it holds; fail at once if one of `procs` exits, with its log's tail, and on
    timeout with the tail of `component`'s log."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        dead = [n for n, p in procs.items() if p.poll() is not None]
        if dead:
            raise ClusterError(f"{dead[0]} exited ({procs[dead[0]].returncode}) while waiting "
                               f"for {what}:\n{logs_tail(dead[0])}")
        try:
            if pred():
                return
        except Exception:  # not up yet: connection refused, TLS, 5xx...
            pass
        time.sleep(0.3)
    raise ClusterError(f"timed out after {timeout:.0f}s waiting for {what}:\n{logs_tail(component)}")


def logs_tail(logs: Path, component: str | None = None, lines: int = 30) -> str:
    """The last lines of one component's log, or of every log, after the first error lines before
    them (a component that fails at start logs its cause first, then minutes of shutdown)."""
    names = [component] if component else sorted(p.stem for p in logs.glob("*.log"))
    out = []
    for n in names:
        f = logs / f"{n}.log"
        if f.exists():
            text = f.read_text(errors="replace").splitlines()
            first = [line for line in text[:-lines] if _ERROR_LINE.search(line)][:FIRST_ERRORS]
            if first:
                out.append(f"==> {f}: its first errors <==\n" + "\n".join(first))
            out.append(f"==> {f} <==\n" + "\n".join(text[-lines:]))
    return "\n".join(out)


FIRST_ERRORS = 5
# klog's error lines (E1202 07:52:29.123 ...), JSON logs' error level, and Go's panics
_ERROR_LINE = re.compile(r'^E\d{4} |"level":"(error|fatal)"|\blevel=(error|fatal)\b|^panic: ')


def http_ok(url: str, admin_tls: ssl.SSLContext | None):
    """A predicate: GET url answers 200 (component serving certs are self-signed, so an https URL
    is checked with the admin's TLS context where given, unverified otherwise)."""
    ctx = None
    if url.startswith("https"):
        ctx = admin_tls or ssl._create_unverified_context()

    def ok() -> bool:
        with urllib.request.urlopen(url, timeout=2, context=ctx) as r:
            return r.status == 200
    return ok


def pid_alive(pid: int, cluster_dir: Path) -> bool:
    # Guard against pid reuse: every component runs with DIR as its cwd.
    try:
        return Path(os.readlink(f"/proc/{pid}/cwd")) == cluster_dir
    except OSError:
        return False


def kill_groups(pids: list[int], cluster_dir: Path, grace: float = 5.0) -> None:
    """SIGTERM every component's process group at once, SIGKILL what is left
    after a short grace period (a test cluster needs no graceful shutdown)."""
    pids = [p for p in pids if pid_alive(p, cluster_dir)]
    for sig, wait_s in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        for pid in pids:
            try:
                os.killpg(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait_s
        while pids and time.monotonic() < deadline:
            for pid in list(pids):
                try:  # reap our own children; others' zombies vanish by themselves
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass
                try:
                    os.killpg(pid, 0)
                except ProcessLookupError:
                    pids.remove(pid)
            time.sleep(0.1)
        if not pids:
            return


def rmtree(p: Path) -> None:
    shutil.rmtree(p, ignore_errors=True)


def install_sigterm_handler() -> None:
    """Turn SIGTERM into SystemExit so atexit handlers stop the cluster. Once installed, the
    handler is no longer the default one, so a second call leaves it."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))


def _die_with_parent() -> None:
    # Linux: the child gets SIGKILL when the Python process that started it
    # dies, even by SIGKILL, so a crashed test session leaves nothing behind.
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass
