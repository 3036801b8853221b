"""Everything the runtime keeps about one job, in one record dropped whole when the job goes; and how
an object is told to belong to a job (the informers' keys)."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tfop.api.constants import GROUP, KIND, LABEL_JOB
from tfop.api.normalize import Normalized, Unstated, normalize_unstated, with_status
from tfop.core.gang_step import only_progress
from tfop.gang.base import GangBackend
from tfop.kube.informer import same_but
from tfop.kube.versions import later, newer, version_of

JobKey = tuple[str, str]  # (namespace, job name)


def label_key(obj: Mapping[str, Any]) -> JobKey | None:
    """The job a child belongs to, by the job-name label tfop stamps on it."""
    meta = obj["metadata"]
    job = (meta.get("labels") or {}).get(LABEL_JOB)
    return (meta.get("namespace", ""), job) if job else None


def owner_key(obj: Mapping[str, Any]) -> JobKey | None:
    """By the job-name label tfop stamps, else by the controlling TFJob: the upstream operator creates
    its PodGroups without any label, and a job it started must still find its group under tfop."""
    key = label_key(obj)
    if key is not None:
        return key
    meta = obj["metadata"]
    for ref in meta.get("ownerReferences") or []:
        owner_api = str(ref.get("apiVersion", ""))
        if ref.get("controller") and ref.get("kind") == KIND and owner_api.startswith(f"{GROUP}/"):
            return (meta.get("namespace", ""), ref.get("name"))
    return None


@dataclass
class JobRecord:
    body: dict  # the job as last seen or written (trimmed: tfop/runtime/trim.py)
    # A status the core decided but the runtime holds back (holding.py); the next pass reads it as
    # the job's status, since it is what the operator last decided.
    held: dict | None = None
    held_first: float = 0.0  # loop time of the first held change
    held_last: float = 0.0  # and of the latest
    # Pods this operator deleted and has not yet seen gone, so their disappearance is not taken
    # for a lost gang member; and pods seen gone that it did not delete, until a pass reads them.
    deleting: set[str] = field(default_factory=set)
    vanished: set[str] = field(default_factory=set)
    disrupted: dict[str, str] = field(default_factory=dict)  # of them, last seen with a DisruptionTarget: its reason
    # The resourceVersion our last status write answered with, until its watch event comes back.
    written_version: str = ""
    # The refusals that blocked the last pass that tried to create something, and when (Observed).
    refusals: tuple = ()
    refused_at: datetime | None = None
    # The last pass's Plan.reads_group_status; until a pass says otherwise, every change is looked at.
    reads_group_status: bool = True
    reads_group_progress: bool = True  # and Plan.reads_group_progress
    # The last pass's normalized job and what it was made of: a pass runs for every event of the
    # job's pods, and the job itself changes far less often than its status (nearly every pass).
    _unstated: tuple[dict, Unstated] | None = field(default=None, repr=False)
    _normalized: tuple[Unstated, dict, Normalized] | None = field(default=None, repr=False)

    def take_event(self, body: dict) -> bool:
        """The job as its watch saw it; whether a pass should look at it: not when it is our own status
        write coming back (the pass that wrote it saw everything else, and the core settles after its
        own status: tests/core_fixtures.assert_settles)."""
        if not newer(body, self.body):
            return True  # older than our status write's answer, which the pass will read
        self.body = body  # the informer's copy, shared: the write's answer is dropped
        if version_of(body) != self.written_version:  # a version newer() accepts is never ""
            return True
        self.written_version = ""
        return False

    def take_written(self, updated: dict) -> None:
        """Our status write's answer (trimmed), unless its watch event came first."""
        if later(updated, self.body):
            self.body, self.written_version = updated, version_of(updated)

    def status(self) -> dict:
        """The job's status as the operator knows it: the held one, else the written one."""
        return self.held or self.body.get("status") or {}

    def normalized(self) -> Normalized:
        """The job normalized with its status(): all but the status made anew only when it changed (not for
        a new resourceVersion alone: each status write brings one), the status added only when it changed."""
        source = self._normalizing_source()
        if self._unstated is None or self._unstated[0] != source:
            self._unstated = (source, normalize_unstated(source))  # it reads no resourceVersion
        unstated, status, made = self._unstated[1], self.status(), self._normalized
        if made is None or made[0] is not unstated or made[1] != status:
            made = self._normalized = (unstated, status, with_status(unstated, status))
        return made[2]

    def _normalizing_source(self) -> dict[str, Any]:
        meta = self.body.get("metadata") or {}
        return {k: v for k, v in self.body.items() if k != "status"} | {"metadata": {**meta, "resourceVersion": ""}}

    def hold(self, status: dict, now: float) -> None:
        if self.held is None:
            self.held_first = now
        self.held, self.held_last = status, now

    def release(self) -> dict | None:
        held, self.held = self.held, None
        return held

    def pod_gone(self, name: str, disruption: str | None = None) -> None:
        if name in self.deleting:
            self.deleting.discard(name)
        else:
            self.vanished.add(name)
            if disruption:
                self.disrupted[name] = disruption

    def take_vanished(self) -> tuple[frozenset[str], dict[str, str]]:
        """(the pods seen gone that this operator did not delete, those of them the cluster ended: the
        reason of their DisruptionTarget)."""
        taken = frozenset(self.vanished), self.disrupted
        self.vanished, self.disrupted = set(), {}
        return taken


def group_news_unread(jobs: Mapping[JobKey, JobRecord], backend: GangBackend, group: dict, before: dict | None) -> bool:
    """A change to a gang's group that no pass would read (the group informer's `quiet`): its version
    alone; or its status alone, while its job's last pass said the gang is whole (Plan.reads_group_status;
    a scheduler counts members as they start, pod by pod), or said the gang waits an ordinary step and the
    group tells only that it moves on (Plan.reads_group_progress)."""
    key = owner_key(group)
    record = jobs.get(key) if key is not None else None
    if record is None:
        unread = False
    elif not record.reads_group_status:
        unread = True
    else:
        unread = not record.reads_group_progress and only_progress(backend, group)
    return same_but(group, before, ("status",) if unread else ())
