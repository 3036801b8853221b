"""The operator's own /metrics: passes over jobs, requests by its own count, what its watches
received."""
from __future__ import annotations

import urllib.request


def operator_metrics(metrics_port: int) -> str | None:
    """The operator's own /metrics text; None if unreachable."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as r:
            return r.read().decode()
    except OSError:
        return None


def operator_passes(text: str) -> int:
    """Passes over jobs so far (any outcome)."""
    return round(metric_sum(text, "tfop_reconcile_duration_seconds_count{"))


def own_requests(text: str) -> dict[str, int]:
    """"VERB resource" -> requests the operator made so far, by its own count (any answer)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        if line.startswith("tfop_api_requests_total{"):
            labels = dict(part.split("=", 1) for part in line[line.index("{") + 1:line.index("}")].split(","))
            key = f"{labels['verb'].strip(chr(34))} {labels['resource'].strip(chr(34))}"
            out[key] = out.get(key, 0) + round(float(line.rsplit(" ", 1)[1]))
    return out


def watch_received(text: str) -> dict[str, tuple[int, int, int]]:
    """resource -> (events, bytes, reads) the operator's watches received so far."""
    out: dict[str, list[int]] = {}
    names = ("tfop_watch_events_total{", "tfop_watch_bytes_total{", "tfop_watch_reads_total{")
    for line in text.splitlines():
        for at, name in enumerate(names):
            if line.startswith(name):
                resource = line.split('resource="', 1)[1].split('"', 1)[0]
                out.setdefault(resource, [0, 0, 0])[at] = round(float(line.rsplit(" ", 1)[1]))
    return {resource: (n, size, reads) for resource, (n, size, reads) in out.items()}


def metric_sum(text: str, prefix: str) -> float:
    """The sum of a Prometheus text exposition's samples whose line starts with `prefix`."""
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(prefix))
