"""The submitters: TFJobs all at once, and the raw rows, a client creating what an operator would."""
from __future__ import annotations

import asyncio
import copy
import time
from pathlib import Path
from typing import Any, Awaitable, Callable

from tfop.api.constants import LABEL_JOB
from tfop.kube.client import KubeClient
from tfop.kube.credentials import load_credentials


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
            async with KubeClient(load_credentials(str(kubeconfig)), max_connections=connections) as client:
                cpu = time.thread_time()
                if jobs is None:
                    sent = await submit_raw(client, rendered)
                else:
                    async with KubeClient(load_credentials(str(submitter)), max_connections=connections) as sub:
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
