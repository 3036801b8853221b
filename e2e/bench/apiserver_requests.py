"""The apiserver's request counters (apiserver_request_total) as the benchmark reads them: the
operator's writes apart from other components', and an admin client that waits until they stop
changing."""
from __future__ import annotations

import asyncio
import re
import time
from collections import Counter
from pathlib import Path

from tfop.kube.client import KubeClient
from tfop.kube.credentials import load_credentials

WRITE_VERBS = {"POST", "PUT", "PATCH", "DELETE", "APPLY", "DELETECOLLECTION"}
# (group, resource, subresource) an operator of TFJobs writes. Everything else
# the apiserver counts (pods/binding from the scheduler, pods/status from kwok,
# podgroups/status from Volcano, endpointslices, leases, events.k8s.io from the
# scheduler) is other components' work and is reported apart as "other".
OPERATOR_KEYS = {
    ("", "pods", ""), ("", "services", ""), ("", "events", ""),
    ("kubeflow.org", "tfjobs", ""), ("kubeflow.org", "tfjobs", "status"),
    ("scheduling.volcano.sh", "podgroups", ""), ("scheduling.x-k8s.io", "podgroups", ""),
}
_LINE = re.compile(r'^apiserver_request_total\{(.*)\} ([0-9.e+]+)$')
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_request_totals(text: str) -> Counter:
    """apiserver_request_total -> Counter[(verb, group, resource, subresource, code)]."""
    out: Counter = Counter()
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        m = _LINE.match(line)
        if not m:
            continue
        labels = dict(_LABEL.findall(m.group(1)))
        verb = labels.get("verb", "")
        if labels.get("dry_run"):  # a dry run writes nothing: not counted among the writes
            verb += " dry-run"
        key = (verb, labels.get("group", ""), labels.get("resource", ""),
               labels.get("subresource", ""), labels.get("code", ""))
        out[key] += int(float(m.group(2)))
    return out


def resource_name(group: str, resource: str, sub: str) -> str:
    return resource + (f"/{sub}" if sub else "")


def operator_requests(delta: Counter, writes_only: bool = True) -> Counter:
    """Counter[(verb, resource[/sub])] of the keys an operator of TFJobs touches. Requests the
    apiserver turned away with 429 (too many in flight) changed nothing: not writes (see throttled)."""
    out: Counter = Counter()
    for (verb, group, resource, sub, code), n in delta.items():
        if writes_only and code == "429":
            continue
        if (group, resource, sub) in OPERATOR_KEYS and (verb in WRITE_VERBS or not writes_only) and n:
            out[(verb, resource_name(group, resource, sub))] += n
    return out


def throttled(delta: Counter) -> int:
    """Requests on an operator's keys that the apiserver answered 429 (retried by the client)."""
    return sum(n for (verb, group, resource, sub, code), n in delta.items()
               if code == "429" and (group, resource, sub) in OPERATOR_KEYS)


def other_writes(delta: Counter) -> Counter:
    out: Counter = Counter()
    for (verb, group, resource, sub, _code), n in delta.items():
        if (group, resource, sub) not in OPERATOR_KEYS and verb in WRITE_VERBS and n:
            out[(verb, resource_name(group, resource, sub))] += n
    return out


class Admin:
    """Admin (system:masters) asyncio client for the benchmark's own calls."""

    def __init__(self, kubeconfig: Path, connections: int = 128):
        self.client = KubeClient(load_credentials(str(kubeconfig)), max_connections=connections)

    async def __aenter__(self) -> "Admin":
        await self.client.__aenter__()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.client.__aexit__(*exc)

    async def job_events(self, namespace: str) -> int:
        """Events on the namespace's TFJobs: the operator's own (schedulers and kubelets post on pods
        and groups; apiserver_request_total cannot tell who posted, and counts other namespaces too)."""
        listing = await self.client.list("v1", "events", namespace)
        return sum(int(e.get("count") or 1) for e in listing.get("items") or []
                   if (e.get("involvedObject") or {}).get("kind") == "TFJob")

    async def metrics(self) -> Counter:
        return parse_request_totals(await self.client.request("GET", "/metrics", timeout=60))

    async def wait_idle(self, quiet: float = 2.0, timeout: float = 120.0, poll: float = 0.5,
                        since: float | None = None, activity=None) -> tuple[float, Counter, bool]:
        """Wait until the operator keys (all verbs but WATCH) stop changing for
        `quiet` seconds. Returns (monotonic time of the last change, counters, idle?)."""
        activity = activity or _activity
        start = time.monotonic()
        last_change = since if since is not None else start
        prev = await self.metrics()
        sig = activity(prev)
        while True:
            await asyncio.sleep(poll)
            cur = await self.metrics()
            now = time.monotonic()
            s = activity(cur)
            if s != sig:
                sig, last_change = s, now
            if now - last_change >= quiet:
                return last_change, cur, True
            if now - start > timeout:
                return last_change, cur, False


    async def wait_quiet(self, quiet: float = 3.0, timeout: float = 300.0) -> tuple[float, Counter, bool]:
        """Wait until nobody writes anything but heartbeats (leases, node status) for `quiet` seconds."""
        return await self.wait_idle(quiet=quiet, timeout=timeout, activity=_any_write)


def _any_write(c: Counter) -> tuple:
    return tuple(sorted((k, v) for k, v in c.items()
                        if k[0] in WRITE_VERBS and k[2] not in ("leases", "nodes")))


def _activity(c: Counter) -> tuple:
    return tuple(sorted((k, v) for k, v in c.items()
                        if (k[1], k[2], k[3]) in OPERATOR_KEYS and k[0] != "WATCH"))
