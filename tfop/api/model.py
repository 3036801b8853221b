"""The internal model of a TFJob: one shape for every served API version.

`normalize.py` builds these from raw objects; everything downstream (reconcile,
gang backends, render) reads only this model, never the raw dict.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tfop.api.constants import (
    CHIEF_TYPES,
    DEFAULT_CONTAINER,
    DEFAULT_PORT,
    DEFAULT_PORT_NAME,
    GROUP,
    KIND,
    STORAGE_VERSION,
)


@dataclass(frozen=True)
class SchedulingPolicy:
    min_available: int | None = None
    queue: str | None = None
    min_resources: Mapping[str, Any] | None = None
    priority_class: str | None = None
    schedule_timeout_seconds: int | None = None


@dataclass(frozen=True)
class RunPolicy:
    clean_pod_policy: str = "None"
    ttl_seconds_after_finished: int | None = None
    active_deadline_seconds: int | None = None
    backoff_limit: int | None = None
    suspend: bool = False
    managed_by: str | None = None
    scheduling: SchedulingPolicy = field(default_factory=SchedulingPolicy)


@dataclass(frozen=True)
class ReplicaSpec:
    type: str  # canonical, e.g. "Worker"
    replicas: int
    restart_policy: str
    template: Mapping[str, Any]  # the user's PodTemplateSpec; never mutated

    @property
    def lower(self) -> str:
        return self.type.lower()

    @property
    def pod_restart_policy(self) -> str:
        # ExitCode is implemented by the operator, so the kubelet must never restart.
        return "Never" if self.restart_policy == "ExitCode" else self.restart_policy

    def port(self) -> int:
        for container in self.template.get("spec", {}).get("containers", []) or []:
            if container.get("name") == DEFAULT_CONTAINER:
                for p in container.get("ports", []) or []:
                    if p.get("name") == DEFAULT_PORT_NAME and p.get("containerPort"):
                        return int(p["containerPort"])
        return DEFAULT_PORT


@dataclass(frozen=True)
class TFJob:
    name: str
    namespace: str
    uid: str
    api_version: str
    replicas: tuple[ReplicaSpec, ...]
    run_policy: RunPolicy = field(default_factory=RunPolicy)
    success_policy: str = ""
    dynamic_worker: bool = False
    generation: int = 0
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    creation_timestamp: str | None = None
    status: Mapping[str, Any] = field(default_factory=dict)
    # What is computed from the spec alone, kept with it (tfop.gang.shape.gang_of): a pass runs for every
    # event of the job's pods, and the spec rarely changes. The copies with_status makes share it.
    derived: dict = field(default_factory=dict, compare=False, repr=False)

    def replica(self, rtype: str) -> ReplicaSpec | None:
        for spec in self.replicas:
            if spec.type == rtype:
                return spec
        return None

    @property
    def total_replicas(self) -> int:
        return sum(r.replicas for r in self.replicas)

    @property
    def chief(self) -> ReplicaSpec | None:
        for spec in self.replicas:
            if spec.type in CHIEF_TYPES:
                return spec
        return None

    def owner_reference(self) -> dict:
        return {
            "apiVersion": f"{GROUP}/{STORAGE_VERSION}",
            "kind": KIND,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }


def pod_name(job_name: str, rtype: str, index: int) -> str:
    return f"{job_name}-{rtype.lower()}-{index}"
