"""Pieces of e2e/bench.py: an admin asyncio client, apiserver request counters,
watchers recording when objects appear and pods run, the submitters, process and
scheduler figures, and the operators under test (tfop as its ServiceAccount, the
upstream training-operator binary).
"""
from __future__ import annotations

import asyncio
import copy
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable

import aiohttp

from tfop.api.constants import LABEL_JOB
from tfop.kube.client import ApiError, KubeClient
from tfop.kube.credentials import Credentials

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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


class Admin:
    """Admin (system:masters) asyncio client for the benchmark's own calls."""

    def __init__(self, kubeconfig: Path, connections: int = 128):
        self.client = KubeClient(Credentials.load(str(kubeconfig)), max_connections=connections)

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


# -- watchers ---------------------------------------------------------------------------------

@dataclass
class ObjectClock:
    """Watches one kind of object in one namespace (a list, then a watch from its resourceVersion,
    started before the burst) and records when each object was first seen: from then on it exists
    for every other component. Runs until cancelled."""
    client: KubeClient
    namespace: str
    api_version: str = "v1"
    plural: str = "pods"
    created: dict = field(default_factory=dict)  # name -> (job, monotonic time first seen)
    ready: asyncio.Event = field(default_factory=asyncio.Event)

    def see(self, obj: dict) -> None:
        meta = obj.get("metadata") or {}
        if meta.get("name") not in self.created:
            self.created[meta.get("name")] = ((meta.get("labels") or {}).get(LABEL_JOB, ""), time.monotonic())

    async def relist(self) -> str:
        listing = await self.client.list(self.api_version, self.plural, self.namespace)
        for obj in listing.get("items") or []:
            self.see(obj)
        return listing["metadata"]["resourceVersion"]

    async def run(self) -> None:
        version = await self.relist()
        self.ready.set()
        while True:
            try:
                async for ev in self.client.watch(self.api_version, self.plural, self.namespace, version,
                                                  timeout_seconds=120):
                    obj = ev.get("object") or {}
                    if ev.get("type") == "ERROR":
                        raise ApiError(410, obj, "WATCH", self.plural)
                    version = (obj.get("metadata") or {}).get("resourceVersion", version)
                    if ev.get("type") in ("ADDED", "MODIFIED"):
                        self.see(obj)
            except (ApiError, aiohttp.ClientError, asyncio.TimeoutError):
                # Expired (410) or dropped: what happened meanwhile comes with the new listing.
                version = await self.relist()


@dataclass
class PodClock(ObjectClock):
    """The pods' clock: when each was first seen (created) and first seen Running."""
    expected: int = 0
    running: dict = field(default_factory=dict)  # pod name -> (job, monotonic time)

    def see(self, pod: dict) -> None:
        super().see(pod)
        meta = pod.get("metadata") or {}
        name = meta.get("name")
        if name not in self.running and (pod.get("status") or {}).get("phase") == "Running":
            self.running[name] = ((meta.get("labels") or {}).get(LABEL_JOB, ""), time.monotonic())

    def done(self) -> bool:
        return len(self.running) >= self.expected


def per_job(seen: dict) -> dict[str, tuple[int, float]]:
    """{name: (job, time)} -> {job: (how many, the last one's time)}."""
    out: dict[str, tuple[int, float]] = {}
    for job, t in seen.values():
        n, last = out.get(job, (0, t))
        out[job] = (n + 1, max(last, t))
    return out


class Census:
    """The clocks of every kind of object the jobs should have (pods, services, group objects):
    when did the last expected object appear?"""

    def __init__(self, clocks: dict[str, ObjectClock], expected: Counter):
        self.clocks, self.expected = clocks, expected  # kind -> clock, kind -> how many

    def complete(self) -> bool:
        return all(len(self.clocks[k].created) >= n for k, n in self.expected.items())

    def last_seen(self) -> float | None:
        """Monotonic time the last expected object was first seen; None while some are missing."""
        if not self.complete():
            return None
        return max((t for k in self.expected for _, t in self.clocks[k].created.values()), default=None)

    async def start(self) -> list[asyncio.Task]:
        tasks = [asyncio.create_task(c.run()) for c in self.clocks.values()]
        ready = asyncio.ensure_future(asyncio.gather(*(c.ready.wait() for c in self.clocks.values())))
        await asyncio.wait([ready, *tasks], return_when=asyncio.FIRST_COMPLETED)
        failed = [t for t in tasks if t.done()]  # a listing failed before its watch started
        if failed:
            ready.cancel()
            await stop(tasks)
            failed[0].result()
        return tasks


async def stop(tasks: list[asyncio.Task]) -> None:
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def until(predicate, timeout: float, poll: float = 0.02) -> bool:
    """Wait until predicate() is true (False on timeout). The times measured are the watchers'
    own, so polling only decides when the benchmark goes on."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(poll)
    return True


# -- submitters -------------------------------------------------------------------------------

class BesideWrites:
    """`rate` merge patches a second on ConfigMaps of a namespace of its own, while running: work for the
    apiserver and etcd that tfop never sees, to run a row on a control plane as busy as another row's."""

    OBJECTS = 50

    def __init__(self, client: KubeClient, namespace: str, rate: float):
        self.client, self.namespace, self.rate = client, namespace, rate
        self.sent = 0
        self._task: asyncio.Task | None = None
        self._pending: set[asyncio.Task] = set()

    async def start(self) -> None:
        await self.client.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.namespace}},
                                 "namespaces")
        for i in range(self.OBJECTS):
            await self.client.create({"apiVersion": "v1", "kind": "ConfigMap", "data": {"n": "0"},
                                      "metadata": {"name": f"load-{i}", "namespace": self.namespace}}, "configmaps")
        self._task = asyncio.create_task(self._write())

    async def _write(self) -> None:
        began = time.monotonic()
        while True:
            await asyncio.sleep(max(0.0, began + self.sent / self.rate - time.monotonic()))
            n = self.sent
            patch = {"data": {"n": str(n)}, "metadata": {"labels": {"n": str(n)}}}
            task = asyncio.create_task(self.client.merge_patch("v1", "configmaps", self.namespace,
                                                               f"load-{n % self.OBJECTS}", patch))
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)
            self.sent += 1

    async def stop(self) -> None:
        await stop([t for t in (self._task, *self._pending) if t is not None])
        await self.client.delete("v1", "namespaces", None, self.namespace)


async def submit_tfjobs(client: KubeClient, jobs: list[dict], limit: int = 128) -> dict[str, float]:
    """Create every TFJob at once; returns job name -> monotonic time its POST was sent."""
    sent: dict[str, float] = {}
    sem = asyncio.Semaphore(limit)  # the request timeout must not count the wait for a connection

    async def one(job: dict) -> None:
        async with sem:
            sent[job["metadata"]["name"]] = time.monotonic()
            await client.create(job, "tfjobs")

    await asyncio.gather(*(one(j) for j in jobs))
    return sent


PLURALS = {"Pod": "pods", "Service": "services", "PodGroup": "podgroups"}


async def create_group_first(objects: list[dict], create: Callable[[dict], Awaitable[Any]]) -> None:
    """A job's objects in an operator's order: the group object first, then its pods and services together."""
    for group in [o for o in objects if o["kind"] == "PodGroup"]:
        await create(group)
    await asyncio.gather(*(create(o) for o in objects if o["kind"] != "PodGroup"))


async def submit_raw(client: KubeClient, rendered: dict[str, list[dict]], limit: int = 128) -> dict[str, float]:
    """The raw client: each job's objects as create_group_first orders them; all jobs at once."""
    sent: dict[str, float] = {}
    sem = asyncio.Semaphore(limit)  # the request timeout must not count the wait for a connection

    async def create(obj: dict) -> None:
        async with sem:
            sent.setdefault(obj["metadata"]["labels"][LABEL_JOB], time.monotonic())
            await client.create(obj, PLURALS[obj["kind"]])

    await asyncio.gather(*(create_group_first(objs, create) for objs in rendered.values()))
    return sent


async def submit_raw_with_tfjobs(client: KubeClient, submitter: KubeClient, rendered: dict[str, list[dict]],
                                 jobs: dict[str, dict], limit: int = 128) -> dict[str, float]:
    """The least any TFJob operator makes the control plane do, written straight: per job, the TFJob
    (by `submitter`, as the other rows' jobs), its objects as submit_raw creates them but owned by it,
    then its status written twice (Created, then Running: the two writes issue 13 allows)."""
    sent: dict[str, float] = {}
    sem = asyncio.Semaphore(limit)

    async def call(fn, *args, **kwargs):
        async with sem:
            return await fn(*args, **kwargs)

    async def one(name: str, objects: list[dict]) -> None:
        sent[name] = time.monotonic()
        job = await call(submitter.create, jobs[name], "tfjobs")
        meta = job["metadata"]
        owner = {"apiVersion": job["apiVersion"], "kind": job["kind"], "name": meta["name"], "uid": meta["uid"],
                 "controller": True, "blockOwnerDeletion": True}
        owned = [{**o, "metadata": {**o["metadata"], "ownerReferences": [owner]}} for o in objects]
        await create_group_first(owned, lambda obj: call(client.create, obj, PLURALS[obj["kind"]]))
        for status in raw_statuses(jobs[name], time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())):
            await call(client.merge_patch, job["apiVersion"], "tfjobs", meta["namespace"], meta["name"],
                       {"status": status}, subresource="status")

    await asyncio.gather(*(one(n, objs) for n, objs in rendered.items()))
    return sent


def raw_statuses(job: dict, now: str) -> list[dict]:
    """A TFJob's two status writes as an operator makes them: Created with its replicas counted, then Running."""
    def condition(ctype: str, reason: str) -> dict:
        return {"type": ctype, "status": "True", "reason": reason, "message": f"TFJob {job['metadata']['name']} "
                f"is {ctype.lower()}.", "lastUpdateTime": now, "lastTransitionTime": now}
    specs = job["spec"]["tfReplicaSpecs"]
    created = {"conditions": [condition("Created", "TFJobCreated")], "startTime": now,
               "replicaStatuses": {rtype: {"active": 0} for rtype in specs}}
    running = {"conditions": created["conditions"] + [condition("Running", "TFJobRunning")],
               "replicaStatuses": {rtype: {"active": spec.get("replicas", 1)} for rtype, spec in specs.items()}}
    return [created, running]


async def submit_raw_threaded(kubeconfig: Path, rendered: dict[str, list[dict]], connections: int,
                              jobs: dict[str, dict] | None = None,
                              submitter: Path | None = None) -> tuple[dict[str, float], float]:
    """submit_raw (with `jobs`: submit_raw_with_tfjobs, their TFJobs created with the `submitter`
    kubeconfig) on a thread of its own, with its own event loop and client: time.thread_time()
    then counts the raw client's CPU (TLS handshakes included) and not the benchmark's watches,
    which go on meanwhile on the caller's loop. Returns (sent times as submit_raw, CPU seconds)."""
    def work() -> tuple[dict[str, float], float]:
        async def go() -> tuple[dict[str, float], float]:
            async with KubeClient(Credentials.load(str(kubeconfig)), max_connections=connections) as client:
                cpu = time.thread_time()
                if jobs is None:
                    sent = await submit_raw(client, rendered)
                else:
                    async with KubeClient(Credentials.load(str(submitter)), max_connections=connections) as sub:
                        sent = await submit_raw_with_tfjobs(client, sub, rendered, jobs)
                return sent, time.thread_time() - cpu
        return asyncio.run(go())

    return await asyncio.to_thread(work)


def strip_owner(obj: dict) -> dict:
    """Rendered children point at a TFJob uid that the raw row never creates."""
    obj = copy.deepcopy(obj)
    obj["metadata"].pop("ownerReferences", None)
    obj.pop("status", None)
    return obj


# -- the operators under test -----------------------------------------------------------------

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


def rows_in_the_way(namespaces: list[str], run_id: str) -> list[str]:
    """Benchmark namespaces of another run: a benchmark running beside this one on the cluster, or a row
    whose deletion has not finished. A row beside either measures its work too (the freed pods of a
    namespace being deleted wake every waiting gang)."""
    return sorted(ns for ns in namespaces if ns.startswith("bench-") and not ns.endswith(f"-{run_id}"))


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


def component_cpu(cluster) -> dict[str, float]:
    """CPU seconds so far of each control-plane process the cluster started (its state's pids)."""
    cpu = {name: proc_cpu(pid) for name, pid in (cluster.state.get("pids") or {}).items()}
    return {name: s for name, s in cpu.items() if s is not None}


def compact_etcd(cluster) -> int:
    """Compact etcd's history up to now (its HTTP gateway); returns the revision. The apiserver
    compacts only every 5 min, keeping 5-10 min of history: rows of big pods one after another
    (--replicas 2000w: 2000 pods of 76 kB TF_CONFIG, ~5 revisions each with their deletion) would
    otherwise pile up past etcd's 2 GiB quota, after which the cluster takes no more writes."""
    url = f"http://127.0.0.1:{cluster.state['ports']['etcd']}/v3"

    def post(path: str, body: dict) -> dict:
        req = urllib.request.Request(url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            return json.loads(r.read() or b"{}")

    revision = int(post("/kv/range", {"key": "AA==", "count_only": True})["header"]["revision"])
    post("/kv/compaction", {"revision": revision, "physical": True})
    return revision


# Schedulers with a client-side rate limit (kube-scheduler's own and scheduler-plugins'; Volcano's is
# 2000 QPS by default, kwok has none): component -> its secure port's key in the cluster's ports.
# Components whose client QPS --scheduler-qps raises (their name -> their port's key in the cluster's state).
RATE_LIMITED_SCHEDULERS = {"kube-scheduler": "scheduler", "scheduler-plugins-scheduler": "cosched",
                           "kube-controller-manager": "kcm"}


SECURE_PORTS = {**RATE_LIMITED_SCHEDULERS, "kube-apiserver": "apiserver"}


def component_get(cluster, name: str, path: str, timeout: float = 10, binary: bool = False) -> str | bytes:
    """GET a component's secure port as admin (a scheduler's serving certificate is self-signed)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    ctx.load_cert_chain(str(cluster.pki / "admin.crt"), str(cluster.pki / "admin.key"))
    port = cluster.state["ports"][SECURE_PORTS[name]]
    with urllib.request.urlopen(f"https://127.0.0.1:{port}{path}", timeout=timeout, context=ctx) as r:
        data = r.read()
    return data if binary else data.decode()


def running_schedulers(cluster) -> list[str]:
    return [n for n in RATE_LIMITED_SCHEDULERS if n in (cluster.state.get("pids") or {})]


def scheduler_clients(cluster) -> dict[str, dict]:
    """The client QPS and burst each scheduler runs with (its /configz): proof of --scheduler-qps."""
    out = {}
    for name in running_schedulers(cluster):
        try:
            conn = client_connection(json.loads(component_get(cluster, name, "/configz")))
            out[name] = {"qps": conn.get("QPS"), "burst": conn.get("Burst")}
        except (OSError, ValueError, KeyError):
            pass
    controller = cosched_controller_client(cluster)
    if controller:
        out["scheduler-plugins-controller"] = controller
    return out


def cosched_controller_client(cluster) -> dict | None:
    """The scheduler-plugins controller's client QPS and burst, from its command line (it has no /configz)."""
    pid = (cluster.state.get("pids") or {}).get("scheduler-plugins-controller")
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0") if pid else []
    except OSError:
        return None
    flags = dict(zip(args, args[1:]))
    return {"qps": int(flags.get("--qps", 5)), "burst": int(flags.get("--burst", 10))} if args else None


def client_connection(configz: dict) -> dict:
    """The ClientConnection of a /configz answer (a scheduler's at its top, the controller manager's
    under Generic)."""
    for value in configz.values():
        if isinstance(value, dict):
            if "ClientConnection" in value:
                return value["ClientConnection"]
            found = client_connection(value)
            if found:
                return found
    return {}


def scheduler_throttle(cluster) -> dict[str, float]:
    """Seconds each scheduler's requests have waited so far for its client-side rate limiter."""
    out = {}
    for name in running_schedulers(cluster):
        try:
            text = component_get(cluster, name, "/metrics")
        except OSError:
            continue
        out[name] = metric_sum(text, "rest_client_rate_limiter_duration_seconds_sum{")
    return out


UPSTREAM_WEBHOOK = "validator.training-operator.kubeflow.org"
CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")  # hard-coded in its pkg/cert


class UpstreamProcess:
    """The Kubeflow training-operator v1.9 binary as a local process (admin kubeconfig).

    v1.9 has no flag to skip its webhook cert rotator, and it starts its
    controllers only once the rotator is ready; the rotator keeps a Secret in
    $MY_POD_NAMESPACE and injects its CA into the ValidatingWebhookConfiguration
    `validator.training-operator.kubeflow.org`. We create both: the Secret in the
    benchmark namespace (its cache is restricted to --namespace), and a webhook
    configuration whose one webhook matches no rules, so TFJob creation is not
    routed to a webhook in this row any more than in the others."""

    def __init__(self, cluster, namespace: str, gang: str | None, tuned: bool, log_dir: Path,
                 threads: int = 32, qps: int = 1000, burst: int = 2000):
        self.cluster, self.namespace, self.gang, self.tuned = cluster, namespace, gang, tuned
        self.threads, self.qps, self.burst = threads, qps, burst
        self.log_path = Path(log_dir) / f"upstream-{namespace}-{int(time.time() * 1000)}.log"
        self.process: subprocess.Popen | None = None

    def args(self) -> list[str]:
        from e2e import build

        args = [str(build.binary("training-operator")), "--enable-scheme=tfjob", f"--namespace={self.namespace}",
                f"--metrics-bind-address=127.0.0.1:{free_port()}",
                f"--health-probe-bind-address=127.0.0.1:{free_port()}",
                f"--webhook-server-port={free_port()}", "--leader-elect=false"]
        if self.gang:
            args.append(f"--gang-scheduler-name={self.gang}")
        if self.tuned:
            args += [f"--controller-threads={self.threads}", f"--kube-api-qps={self.qps}",
                     f"--kube-api-burst={self.burst}"]
        return args

    def prepare(self) -> None:
        self.cluster.apply([
            {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
             "metadata": {"name": UPSTREAM_WEBHOOK},
             "webhooks": [{"name": "unused.bench.training-operator.kubeflow.org",
                           "clientConfig": {"url": "https://127.0.0.1:9/unused"},
                           "rules": [], "sideEffects": "None", "admissionReviewVersions": ["v1"],
                           "failurePolicy": "Ignore"}]},
            {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
             "metadata": {"name": "training-operator-webhook-cert", "namespace": self.namespace}},
        ])

    def start(self, timeout: float = 90) -> "UpstreamProcess":
        self.prepare()
        self.log_path = self.log_path.with_name(f"upstream-{self.namespace}-{int(time.time() * 1000)}.log")
        env = {**os.environ, "KUBECONFIG": str(self.cluster.kubeconfig), "MY_POD_NAMESPACE": self.namespace}
        log = open(self.log_path, "ab")
        self.process = subprocess.Popen(self.args(), stdout=log, stderr=subprocess.STDOUT, env=env,
                                        stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        mounted = False
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"training-operator exited {self.process.returncode}:\n{self.log_tail()}")
            if not mounted:
                mounted = self.mount_certs()
            if re.search(r"Starting workers.*tfjob-controller", self.log_path.read_text(errors="replace")):
                return self
            time.sleep(0.2)
        raise RuntimeError(f"training-operator did not start its workers in {timeout}s:\n{self.log_tail()}")

    def mount_certs(self) -> bool:
        """In a pod the rotator's Secret is a volume at its cert dir; here we copy it there."""
        import base64

        got = self.cluster.kubectl("get", "secret", "-n", self.namespace, "training-operator-webhook-cert",
                                   "-o", "json", check=False)
        data = (json.loads(got.stdout).get("data") or {}) if got.returncode == 0 else {}
        if not {"tls.crt", "tls.key"} <= data.keys():
            return False
        CERT_DIR.mkdir(parents=True, exist_ok=True)
        for name in ("tls.crt", "tls.key", "ca.crt"):
            if name in data:
                (CERT_DIR / name).write_bytes(base64.b64decode(data[name]))
        return True

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
