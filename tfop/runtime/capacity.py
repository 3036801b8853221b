"""What the cluster has room for, kept up to date for the sentences that explain a waiting gang.

Only with gang scheduling. Informers each keeping a few fields per object (tfop/runtime/trim.py):
nodes (allocatable, Ready, cordoned, taints, labels), the pods bound to a node and not finished (a
field selector, as kube-scheduler's own: their node and summed requests, never their spec), for
Volcano its Queues (state), and Kueue's Workloads and LocalQueues. tfop's own pods in the namespaces
it watches come from the controller's pod informer instead (counting_own_pods), so each pod is
watched once. Each node's requested total is kept as pods come and go, so a snapshot
(tfop.core.room.Capacity) is built at most every SNAPSHOT_SECONDS, only when a waiting gang asks,
anew only for the nodes that changed. A read the role does not grant leaves the sentence without
capacity (one log line), never the operator stopped.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from functools import partial
from sys import intern
from typing import Any

from tfop.api.constants import KUEUE_API, LABEL_OPERATOR, OPERATOR_NAME
from tfop.core.room import Capacity, NodeRoom, Taint
from tfop.gang.base import GangBackend
from tfop.gang.shape import pod_requests
from tfop.kube.client import KubeClient
from tfop.kube.informer import Informer, Name
from tfop.runtime.jobs import JobKey, owner_key
from tfop.runtime.trim import milli, trim_identity, trim_local_queue, trim_node, trim_queue, trim_workload

FINISHED = ("Succeeded", "Failed")
# Pods on a node that count against its allocatable: kube-scheduler's own selector for assigned pods.
BOUND_AND_RUNNING = "spec.nodeName!=" + "".join(f",status.phase!={phase}" for phase in FINISHED)
OURS, NOT_OURS = f"{LABEL_OPERATOR}={OPERATOR_NAME}", f"{LABEL_OPERATOR}!={OPERATOR_NAME}"
SNAPSHOT_SECONDS = 2.0  # a snapshot this old is rebuilt when something changed since
# Room freed (a bound pod gone, a node new or changed) wakes the waiting gangs this soon after, with a
# snapshot built anew for them: a scheduler that retries a rejected gang only when its group changes
# (tfop.core.gang_step._touch_group) is told then, not at its next periodic touch.
WAKE_SECONDS = 0.25
# And at most once per WAKE_GAP_SECONDS: pods ending one after another (a namespace deleted, another
# team's jobs finishing) would otherwise have every waiting gang pass four times a second.
WAKE_GAP_SECONDS = SNAPSHOT_SECONDS
MAX_SHARED_REQUESTS = 4096  # distinct request sets shared among bound pods


def requests_key(pod: Mapping[str, Any]) -> tuple:
    """What a pod's effective requests (gang.shape.pod_requests) are computed from, as the strings the
    API holds: pods of one template share it, and the requests are computed once for all of them."""
    spec = pod.get("spec") or {}

    def asked(container: Mapping[str, Any]) -> tuple:
        res = container.get("resources") or {}
        return tuple(sorted({**(res.get("limits") or {}), **(res.get("requests") or {})}.items()))
    return (tuple(asked(c) for c in spec.get("containers") or ()),
            tuple((c.get("restartPolicy"), asked(c)) for c in spec.get("initContainers") or ()),
            tuple(sorted((spec.get("overhead") or {}).items())))


def usage(pod: Mapping[str, Any], shared: dict[tuple, dict[str, int]]) -> dict:
    """{"nodeName", "requests"} of a bound pod, the requests in thousandths; pods of one template
    share one dict of requests, computed once (bounded; never mutated)."""
    key = requests_key(pod)
    requests = shared.get(key)
    if requests is None:
        if len(shared) >= MAX_SHARED_REQUESTS:
            shared.clear()
        requests = shared[key] = {intern(k): milli(v, up=True) for k, v in pod_requests(pod).items()}
    return {"nodeName": intern((pod.get("spec") or {}).get("nodeName") or ""), "requests": requests}


def wake_delay(now: float, woken_at: float) -> float:
    """Seconds from room freed `now` to the waiting gangs' wake, given the last wake's time."""
    return max(WAKE_SECONDS, woken_at + WAKE_GAP_SECONDS - now)


class ClusterRoom:
    def __init__(self, client: KubeClient, backend: GangBackend, namespaces: list[str | None] | None = None,
                 on_change: Callable[[JobKey], None] | None = None, clock: Callable[[], float] = time.monotonic,
                 on_room_grew: Callable[[], None] = lambda: None,
                 on_node: Callable[[str, Mapping[str, Any]], None] = lambda _event, _node: None):
        self.clock, self.on_room_grew, self.on_node = clock, on_room_grew, on_node
        namespaces = namespaces or [None]
        self.nodes = Informer(client, "v1", "nodes", "Node", on_event=self._node_event, trim=trim_node,
                              optional=True)
        bound = partial(Informer, client, "v1", "pods", "Pod", on_event=self._pod_event, trim=self._trim_pod,
                        optional=True, refusals=set())  # one refusal said for both
        self.pods = bound(label_selector=NOT_OURS, field_selector=BOUND_AND_RUNNING)
        self.bound_pods = [self.pods]
        if namespaces != [None]:  # tfop's pods in other namespaces (another tfop's jobs) take room too
            elsewhere = "".join(f",metadata.namespace!={ns}" for ns in namespaces)
            self.bound_pods.append(bound(label_selector=OURS, field_selector=BOUND_AND_RUNNING + elsewhere))
        self.informers = [self.nodes, *self.bound_pods]
        self.queues = None
        queue = backend.queue_resource
        if queue is not None:
            self.queues = Informer(client, queue.api_version, queue.plural, queue.kind, on_event=self._changed,
                                   trim=trim_queue, optional=True)
            self.informers.append(self.queues)
        # Kueue: a job's Workload (by its owner, the TFJob: a change wakes the job) and the LocalQueues.
        self.workloads = Informer(client, KUEUE_API, "workloads", "Workload", namespaces, key_of=owner_key,
                                  on_change=on_change, trim=trim_workload, optional=True)
        self.local_queues = Informer(client, KUEUE_API, "localqueues", "LocalQueue", namespaces,
                                     trim=trim_local_queue, optional=True)
        self.informers += [self.workloads, self.local_queues]
        # node name -> the summed requests of the pods bound to it; and what each pod added, to take it back
        self.requested: dict[str, dict[str, int]] = {}  # in thousandths, as NodeRoom
        self.counted: dict[Name, tuple[str, Mapping[str, int]]] = {}
        # Pods of one template ask the same: one dict of requests for all of them (bounded; never mutated).
        self._shared: dict[tuple, dict[str, int]] = {}
        self._rooms: dict[str, NodeRoom] = {}  # the last snapshot's nodes, reused unless stale
        self._stale: set[str] = set()  # nodes changed since (themselves, or the pods on them)
        self._snapshot: Capacity | None = None
        self._built_at = float("-inf")
        self._dirty = True
        self._grew_at: datetime | None = None  # wall clock: compared with the stamps in objects
        self._nodes_seen: dict[str, dict] = {}  # node name -> what of it makes room (to tell a change)
        self._wake: asyncio.TimerHandle | None = None
        self._woken_at = float("-inf")  # self.clock() at the last wake

    def start(self) -> dict[str, asyncio.Task]:
        """The informers' tasks, vital as the controller's own; a pass never waits for them to fill:
        until they do, a waiting gang's sentence does without capacity."""
        return {f"capacity informer {i.plural}": asyncio.create_task(i.run(), name=f"tfop-capacity-{i.plural}")
                for i in self.informers}

    def for_status(self, status: Mapping[str, Any]) -> tuple[Capacity | None, dict[str, str] | None]:
        """(snapshot, queue states) for a job whose gang may wait (not seen yet, or waiting), else nothing."""
        gang = status.get("gang")
        if gang is not None and "reason" not in gang:
            return None, None
        return self.snapshot(), self.queue_states()

    def observed(self, key: JobKey, status: Mapping[str, Any]) -> dict[str, Any]:
        """What tfop.core.context.Observed holds of this: capacity, queues, the Workload, its ClusterQueue."""
        capacity, queues = self.for_status(status)
        workloads = self.workloads.for_key(key)
        workload = workloads[0] if workloads else None
        local = self.local_queues.get(key[0], ((workload or {}).get("spec") or {}).get("queueName") or "")
        return {"capacity": capacity, "queues": queues, "workload": workload,
                "cluster_queue": ((local or {}).get("spec") or {}).get("clusterQueue") or ""}

    def _trim_pod(self, pod: Mapping[str, Any]) -> dict:
        """A bound pod as its node's usage: its identity, node and effective requests."""
        return {**trim_identity(pod), **usage(pod, self._shared)}

    def counting_own_pods(self, trim: Callable[[Mapping[str, Any]], dict]) -> dict[str, Callable]:
        """The options of the controller's pod informer (tfop's pods in its namespaces) that count them
        here: its trim, plus the node and requests of a pod bound and not finished; and its events."""
        def trimmed(pod: Mapping[str, Any]) -> dict:
            kept = trim(pod)
            if (pod.get("spec") or {}).get("nodeName") and (pod.get("status") or {}).get("phase") not in FINISHED:
                kept.update(usage(pod, self._shared))
            return kept
        return {"trim": trimmed, "on_event": self._pod_event}

    # -- keeping count -------------------------------------------------------------------------
    def _changed(self, _event: str, _obj: Mapping[str, Any]) -> None:
        self._dirty = True

    def _node_event(self, event: str, node: Mapping[str, Any]) -> None:
        self.on_node(event, node)  # the controller's too: a lost node loses its pods
        name = node["metadata"]["name"]
        self._stale.add(name)
        self._dirty = True
        if event == "DELETED":
            self._nodes_seen.pop(name, None)
            return
        seen = {k: v for k, v in node.items() if k != "metadata"}  # all trim_node keeps of its room
        if self._nodes_seen.get(name) != seen:  # not a heartbeat: what the node offers changed
            self._nodes_seen[name] = seen
            self._grew()

    def _pod_event(self, event: str, pod: Mapping[str, Any]) -> None:
        meta = pod["metadata"]
        name = (meta.get("namespace", ""), meta["name"])
        node = pod.get("nodeName") if event != "DELETED" else None
        requests = pod.get("requests") or {}
        if node and self.counted.get(name) == (node, requests):
            return  # most events of a running pod (its status): its node's total and snapshot stay
        was = self._count(name, -1)
        if node:
            self.counted[name] = (node, requests)
            self._count(name, 1)
        elif was:  # gone, or finished (out of the selector): its requests are free
            self._grew()

    def _count(self, name: Name, sign: int) -> bool:
        entry = self.counted.pop(name, None) if sign < 0 else self.counted.get(name)
        if entry is None:
            return False
        node, requests = entry
        total = self.requested.setdefault(node, {})
        for resource, value in requests.items():
            total[resource] = total.get(resource, 0) + sign * value
            if not total[resource]:
                del total[resource]
        if not total:
            del self.requested[node]
        self._stale.add(node)
        self._dirty = True
        return True

    def _grew(self) -> None:
        """Tell the waiting gangs once however many pods end together (wake_delay)."""
        self._grew_at = datetime.now(UTC)
        self._dirty = True
        if self._wake is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # fed outside an event loop (tests): at once
            self._wake_now()
            return
        self._wake = loop.call_later(wake_delay(self.clock(), self._woken_at), self._wake_now)

    def _wake_now(self) -> None:
        self._wake, self._woken_at = None, self.clock()
        self._built_at = float("-inf")  # the gangs woken read the room as it is now
        self.on_room_grew()

    # -- reading -----------------------------------------------------------------------------
    def known(self) -> bool:
        return all(i.synced.is_set() and i.denied is None for i in (self.nodes, *self.bound_pods))

    def snapshot(self) -> Capacity | None:
        """The nodes' room now (at most SNAPSHOT_SECONDS old), or None while it is unknown. Only the
        nodes that changed since the last one are built anew."""
        if not self.known():
            return None
        now = self.clock()
        if self._snapshot is None or (self._dirty and now - self._built_at >= SNAPSHOT_SECONDS):
            self._dirty, self._built_at = False, now
            stale, self._stale = self._stale, set()
            rooms = {}
            for (_ns, name), node in self.nodes.objects.items():
                room = self._rooms.get(name)
                rooms[name] = room if room is not None and name not in stale else self._room(name, node)
            self._rooms = rooms
            self._snapshot = Capacity(tuple(rooms.values()), grew_at=self._grew_at)
        return self._snapshot

    def _room(self, name: str, node: Mapping[str, Any]) -> NodeRoom:
        return NodeRoom(name=name, allocatable=node.get("allocatable") or {},
                        requested=dict(self.requested.get(name) or {}), ready=bool(node.get("ready")),
                        unschedulable=bool(node.get("unschedulable")),
                        taints=tuple(Taint(*t) for t in node.get("taints") or ()), labels=node.get("labels") or {})

    def queue_states(self) -> dict[str, str] | None:
        """Queue name -> state, for a backend with queues; None when unknown (or no queues)."""
        q = self.queues
        if q is None or not q.synced.is_set() or q.denied is not None:
            return None
        return {name: obj.get("state") or "" for (_ns, name), obj in q.objects.items()}
