"""This machine's side of a row: a process's CPU, memory and wake-ups, CPU pinning, stolen time."""
from __future__ import annotations

import os
from pathlib import Path


def proc_stats(pid: int) -> dict:
    """CPU seconds (user+system, and each), peak RSS (VmHWM) and voluntary context switches of a live process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    user, system = int(fields[11]) / tick, int(fields[12]) / tick  # as proc_cpu reads them, in one read
    stats = {"cpu_s": user + system, "user_s": user, "system_s": system, "peak_rss": 0, "rss": 0, "wakeups": 0}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            stats["peak_rss"] = int(line.split()[1]) * 1024
        elif line.startswith("VmRSS:"):
            stats["rss"] = int(line.split()[1]) * 1024
        elif line.startswith("voluntary_ctxt_switches:"):  # each a sleep ended: the event loop woken
            stats["wakeups"] += int(line.split()[1])
    return stats


def split_cpus(cpus: set[int]) -> tuple[int, set[int]]:
    """(the operator's CPU, the others) for --pin-operator: the last one alone, the rest for the
    benchmark and the control plane."""
    if len(cpus) < 2:
        raise SystemExit(f"--pin-operator needs 2 CPUs or more; this process may use {sorted(cpus)}")
    last = max(cpus)
    return last, cpus - {last}


def pin(pid: int, cpus: set[int]) -> None:
    """Every thread of process `pid` to `cpus` (a thread started later inherits its starter's); none
    of a process gone."""
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return
    for tid in threads:
        try:
            os.sched_setaffinity(int(tid), cpus)
        except ProcessLookupError:  # the thread ended meanwhile
            pass


def proc_cpu(pid: int) -> float | None:
    """CPU seconds (user+system, every thread) of a live process, from /proc; None if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stolen_seconds(stat: str | None = None) -> float:
    """CPU seconds the hypervisor gave other guests while this machine's CPUs wanted to run, since boot
    (/proc/stat's steal, summed over CPUs): a row with seconds of it ran on a slower machine."""
    if stat is None:
        stat = Path("/proc/stat").read_text()
    fields = stat.split("\n", 1)[0].split()
    return int(fields[8]) / os.sysconf("SC_CLK_TCK") if fields[:1] == ["cpu"] and len(fields) > 8 else 0.0
