"""What one pass knows about a job, computed once and read by every phase."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tfop.api import conditions, pods
from tfop.api.constants import LABEL_INDEX, LABEL_TYPE
from tfop.api.model import ReplicaSpec, TFJob, pod_name
from tfop.core.context import Observed
from tfop.core.indexes import parse_indexes
from tfop.core.nodes import LostPod, lost_pods
from tfop.core.ownership import claim

KUBELET_RESTARTS = ("Always", "OnFailure")  # restart policies the kubelet carries out in place
PHASE_COUNTERS = {"Running": "active", "Succeeded": "succeeded", "Failed": "failed"}
SUCCEEDED_INDEXES = "succeededIndexes"  # status: per replica type, the indices that succeeded ("0-3,7")


@dataclass(frozen=True)
class JobView:
    job: TFJob
    obs: Observed
    now: datetime
    id: str  # namespace/name, for messages
    all_pods: tuple[Mapping[str, Any], ...]  # the job's own (tfop/core/ownership.py), terminating included
    pods: Mapping[str, Mapping[str, Any]]  # the same, by name
    services: Mapping[str, Mapping[str, Any]]  # the job's own
    group: Mapping[str, Any] | None  # the job's own group object
    members: tuple[Mapping[str, Any], ...]  # pods not being deleted
    adopt: tuple[Mapping[str, Any], ...]  # orphans to adopt (already counted as the job's)
    stale: tuple[Mapping[str, Any], ...]  # an earlier job's orphans, to delete
    foreign: Mapping[tuple[str, str], Mapping[str, Any]]  # by (kind, name): controlled by someone else
    expected: tuple[tuple[ReplicaSpec, int], ...]  # (replica, index) of every pod the spec asks for
    counts: Mapping[str, Mapping[str, int]]  # replica type -> active/succeeded/failed
    # replica type -> indices that succeeded: the pods now, else the status's memory (a succeeded
    # pod deleted since stays succeeded: never created again, never a lost gang member)
    done: Mapping[str, frozenset[int]]
    succeeded: bool  # as the chief, else the workers, tell
    running: bool
    kubelet_restarts: int  # container restarts the kubelet made, counted against backoffLimit
    lost: tuple[LostPod, ...] = ()  # unfinished pods on nodes Kubernetes says are gone (tfop/core/nodes.py)

    @classmethod
    def of(cls, job: TFJob, obs: Observed, now: datetime) -> JobView:
        claimed = [claim(job, objects) for objects in (obs.pods, obs.services, [obs.group] if obs.group else [])]
        own_pods, own_services, own_group = (c.ours for c in claimed)
        by_name = {pods.name(p): p for p in own_pods}
        members = tuple(p for p in own_pods if not pods.terminating(p))
        done, remembered = _succeeded_indexes(job, members)
        counts = _counts(job, members, remembered)
        succeeded, running = _outcome(job, by_name, counts, done)
        return cls(job=job, obs=obs, now=now, id=f"{job.namespace}/{job.name}", all_pods=own_pods, pods=by_name,
                   services={s["metadata"]["name"]: s for s in own_services},
                   group=own_group[0] if own_group else None, members=members,
                   adopt=tuple(o for c in claimed for o in c.adopt), stale=tuple(o for c in claimed for o in c.stale),
                   foreign={(o["kind"], o["metadata"]["name"]): o for c in claimed for o in c.foreign},
                   expected=tuple((r, i) for r in job.replicas for i in range(r.replicas)),
                   counts=counts, done=done, succeeded=succeeded, running=running,
                   kubelet_restarts=_kubelet_restarts(job, own_pods), lost=lost_pods(own_pods, obs.nodes, now))

    def expected_names(self) -> list[str]:
        return [pod_name(self.job.name, r.type, i) for r, i in self.expected]

    def replica_of(self, pod: Mapping[str, Any]) -> ReplicaSpec | None:
        return replica_of(self.job, pod)

    def is_done(self, replica: ReplicaSpec, index: int) -> bool:
        """This replica's pod succeeded (it may have been deleted since)."""
        return index in self.done.get(replica.type, ())

    def succeeded_total(self) -> int:
        return sum(c["succeeded"] for c in self.counts.values())

    def elapsed_since(self, stamp: str | None) -> float | None:
        start = conditions.parse_time(stamp)
        return None if start is None else (self.now - start).total_seconds()

    def ready(self) -> int:
        return sum(pods.is_ready(p) for p in self.members)


def replica_of(job: TFJob, pod: Mapping[str, Any]) -> ReplicaSpec | None:
    rtype = (pod["metadata"].get("labels") or {}).get(LABEL_TYPE)
    for replica in job.replicas:
        if replica.lower == rtype:
            return replica
    return None


def _kubelet_restarts(job: TFJob, all_pods) -> int:
    total = 0
    for pod in all_pods:
        replica = replica_of(job, pod)
        if replica is not None and replica.restart_policy in KUBELET_RESTARTS:
            total += pods.restarts(pod)
    return total


def _index(pod: Mapping[str, Any]) -> int | None:
    text = (pod["metadata"].get("labels") or {}).get(LABEL_INDEX, "")
    return int(text) if text.isdigit() else None


def _succeeded_indexes(job: TFJob, members) -> tuple[dict[str, frozenset[int]], dict[str, int]]:
    """(replica type -> indices that succeeded, replica type -> how many of them have no pod now).

    A pod present decides its index; an index without one is succeeded when the status remembers
    it. Terminating pods are not read: a whole-gang restart deletes succeeded pods too, and they
    must not be remembered again while they go."""
    recorded = job.status.get(SUCCEEDED_INDEXES)
    recorded = recorded if isinstance(recorded, Mapping) else {}
    present: dict[str, dict[int, str]] = {r.type: {} for r in job.replicas}
    for pod in members:
        replica, index = replica_of(job, pod), _index(pod)
        if replica is not None and index is not None:
            present[replica.type][index] = pods.phase(pod)
    done, remembered = {}, {}
    for replica in job.replicas:
        now = present[replica.type]
        kept = {i for i in parse_indexes(recorded.get(replica.type), replica.replicas) if i not in now}
        succeeded_now = {i for i, phase in now.items() if phase == "Succeeded" and i < replica.replicas}
        done[replica.type] = frozenset(kept | succeeded_now)
        remembered[replica.type] = len(kept)
    return done, remembered


def _counts(job: TFJob, members, remembered: Mapping[str, int]) -> dict[str, dict[str, int]]:
    counts = {r.type: {"active": 0, "succeeded": remembered[r.type], "failed": 0} for r in job.replicas}
    for pod in members:
        replica = replica_of(job, pod)
        key = PHASE_COUNTERS.get(pods.phase(pod))
        if replica is not None and key:
            counts[replica.type][key] += 1
    return counts


def _outcome(job: TFJob, by_name, counts, done) -> tuple[bool, bool]:
    """(succeeded, running): the chief decides; without one, the workers (worker 0 is enough
    unless successPolicy is AllWorkers)."""
    chief = job.chief
    if chief is not None:
        done = chief.replicas > 0 and counts[chief.type]["succeeded"] >= chief.replicas
        return done, counts[chief.type]["active"] > 0
    workers = job.replica("Worker")
    if workers is None:
        return False, False
    worker0 = by_name.get(pod_name(job.name, "Worker", 0))
    all_done = workers.replicas > 0 and counts["Worker"]["succeeded"] >= workers.replicas
    first_done = 0 in done["Worker"] or (worker0 is not None and pods.phase(worker0) == "Succeeded")
    return all_done or (first_done and job.success_policy != "AllWorkers"), counts["Worker"]["active"] > 0
