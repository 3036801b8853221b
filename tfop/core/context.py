"""The inputs of a pass besides the job: what was observed, and the operator's fixed context."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tfop.children.templates import Templates
from tfop.core.outcomes import FailedWrite
from tfop.core.room import Capacity
from tfop.core.settings import Settings
from tfop.gang.base import GangBackend


@dataclass(frozen=True)
class Observed:
    pods: Sequence[Mapping[str, Any]] = ()
    services: Sequence[Mapping[str, Any]] = ()
    group: Mapping[str, Any] | None = None
    priority_values: Mapping[str, int] = field(default_factory=dict)
    # Pods seen deleted by someone else (not the operator) since the last reconcile, and of them those
    # last seen with a DisruptionTarget condition (the cluster ended them: tfop/api/nodes.py).
    vanished: frozenset[str] = frozenset()
    disrupted: Mapping[str, str] = field(default_factory=dict)  # name -> the DisruptionTarget reason
    # The nodes the job's pods are on, as the node informer keeps them (None: the node is deleted);
    # None as a whole while nodes cannot be read (no informer yet, or the role does not grant it).
    nodes: Mapping[str, Mapping[str, Any] | None] | None = None
    # The refusals that blocked the last pass that tried to create something, and when it tried
    # (tfop/core/blockers.py): an outcome of earlier writes, so this pass can say why and wait.
    refusals: tuple[FailedWrite, ...] = ()
    refused_at: datetime | None = None
    # What explains a waiting gang (tfop/core/pending.py), None where unknown: the nodes' room, and
    # the state of each of the scheduler's queues (Volcano's).
    capacity: Capacity | None = None
    queues: Mapping[str, str] | None = None
    # Kueue: the job's Workload (tfop/runtime/trim.py trim_workload) and its LocalQueue's ClusterQueue.
    workload: Mapping[str, Any] | None = None
    cluster_queue: str = ""


@dataclass(frozen=True)
class Context:
    settings: Settings
    templates: Templates
    backend: GangBackend | None = None  # None: gang scheduling is off
    # Create pods while the group still waits for admission (no webhook refuses them): the scheduler
    # then admits and binds the gang in one cycle instead of two. Settled from
    # Settings.pods_before_admission_mode by the runtime's probe at start.
    pods_before_admission: bool = False
