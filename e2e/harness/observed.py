"""What the apiserver saw: its /metrics (request counters) and the audit log of ServiceAccounts'
requests (control_plane.AUDIT_POLICY)."""
from __future__ import annotations

import json
import urllib.request
from pathlib import Path

from e2e.harness.identities import admin_tls

AUDIT_LOG = "audit.log"  # in the cluster directory: one JSON line per request of a ServiceAccount


def apiserver_metrics(cluster, names: tuple[str, ...] | None = None) -> list:
    """GET /metrics as admin, parsed: prometheus_client Metric families, only those in
    `names` if given (parsing all 2 MB takes about 2 s here). The counters start again
    from zero whenever the apiserver restarts."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"{cluster.server}/metrics", timeout=10, context=admin_tls(cluster.pki)) as r:
        text = r.read().decode()
    if names is not None:
        text = "".join(line for line in text.splitlines(keepends=True) if _in_families(line, names))
    return list(text_string_to_metric_families(text))


def audit_offset(cluster_dir: Path) -> int:
    """The audit log's size now: audit_entries(since=this) reads only what comes after."""
    try:
        return (cluster_dir / AUDIT_LOG).stat().st_size
    except FileNotFoundError:
        return 0


def audit_entries(cluster_dir: Path, since: int = 0) -> list[dict]:
    """The audit log's entries (ServiceAccounts outside kube-system: AUDIT_POLICY) from byte
    offset `since` on; a line still being written is left out. The log survives restarts
    of the apiserver, which appends to it and writes each entry before it answers."""
    try:
        with open(cluster_dir / AUDIT_LOG, "rb") as f:
            f.seek(since)
            chunk = f.read()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in chunk[:chunk.rfind(b"\n") + 1].splitlines() if line.strip()]


def _in_families(line: str, names: tuple[str, ...]) -> bool:
    """Is this line of the text format (# HELP/# TYPE or a sample) of one of these families?"""
    name = line.split(" ", 3)[2] if line.startswith("# ") else line.split("{", 1)[0].split(" ", 1)[0]
    return name in names or any(name == n + part for n in names for part in ("_bucket", "_sum", "_count"))


def request_counts(families, verb: str = "POST", code: str = "201") -> dict[str, float]:
    """apiserver_request_total summed per resource for one verb and code, dry runs left out
    (their label dry_run is "All"). Keys: "pods", "pods/binding", "podgroups.scheduling.volcano.sh".
    Families: only apiserver_request_total is read: c.apiserver_metrics(("apiserver_request_total",))."""
    counts: dict[str, float] = {}
    for family in families:
        for sample in family.samples:
            labels = sample.labels
            if (sample.name != "apiserver_request_total" or labels.get("verb") != verb
                    or labels.get("code") != code or labels.get("dry_run")):
                continue
            key = labels.get("resource", "") + (f".{labels['group']}" if labels.get("group") else "")
            key += f"/{labels['subresource']}" if labels.get("subresource") else ""
            counts[key] = counts.get(key, 0) + sample.value
    return counts
