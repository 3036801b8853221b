"""The labels every child of a job carries: how selectors, services and clients find a replica."""
from __future__ import annotations

from tfop.api.constants import (
    CHIEF_TYPES,
    GROUP,
    LABEL_INDEX,
    LABEL_JOB,
    LABEL_OPERATOR,
    LABEL_ROLE,
    LABEL_TYPE,
    LEGACY_GROUP_LABEL,
    LEGACY_LABELS,
    OPERATOR_NAME,
)
from tfop.api.model import ReplicaSpec, TFJob


def job_selector(job_name: str) -> dict[str, str]:
    return {LABEL_OPERATOR: OPERATOR_NAME, LABEL_JOB: job_name}


def replica_selector(job_name: str, replica: ReplicaSpec) -> dict[str, str]:
    return {**job_selector(job_name), LABEL_TYPE: replica.lower}


def replica_labels(job: TFJob, replica: ReplicaSpec, index: int) -> dict[str, str]:
    """The selector labels of one replica, current and legacy keys."""
    labels = {
        **replica_selector(job.name, replica),
        LABEL_INDEX: str(index),
        LEGACY_GROUP_LABEL: GROUP,
    }
    for key in LEGACY_LABELS["job"]:
        labels[key] = job.name.replace("/", "-")
    for key in LEGACY_LABELS["type"]:
        labels[key] = replica.lower
    for key in LEGACY_LABELS["index"]:
        labels[key] = str(index)
    if is_master_role(job, replica, index):
        labels[LABEL_ROLE] = "master"
    return labels


def is_master_role(job: TFJob, replica: ReplicaSpec, index: int) -> bool:
    if replica.type in CHIEF_TYPES:
        return True
    return job.chief is None and replica.type == "Worker" and index == 0
