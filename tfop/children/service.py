"""The headless service of one replica: the stable DNS name TF_CONFIG points at."""
from __future__ import annotations

from typing import Any

from tfop.api.constants import (
    DEFAULT_CONTAINER,
    DEFAULT_PORT,
    DEFAULT_PORT_NAME,
    LABEL_INDEX,
    LABEL_JOB,
    LABEL_OPERATOR,
    LABEL_TYPE,
)
from tfop.api.model import ReplicaSpec, TFJob, pod_name
from tfop.children.labels import replica_labels
from tfop.children.templates import Templates


def tensorflow_ports(replica: ReplicaSpec) -> list[dict[str, Any]]:
    """Service ports: the tensorflow container's named ports, tfjob-port always among them."""
    ports = []
    for container in (replica.template.get("spec") or {}).get("containers") or []:
        if container.get("name") == DEFAULT_CONTAINER:
            ports = [
                {"name": p["name"], "port": p["containerPort"], "targetPort": p["containerPort"]}
                for p in container.get("ports") or [] if p.get("name") and p.get("containerPort")
            ]
    # A port the user already exposes as 2222 under another name must not appear twice: the
    # apiserver refuses a Service with a duplicate port.
    if not any(p["name"] == DEFAULT_PORT_NAME or p["port"] == DEFAULT_PORT for p in ports):
        ports.append({"name": DEFAULT_PORT_NAME, "port": DEFAULT_PORT, "targetPort": DEFAULT_PORT})
    return ports


def build_service(templates: Templates, job: TFJob, replica: ReplicaSpec, index: int) -> dict:
    labels = replica_labels(job, replica, index)
    selector = {k: labels[k] for k in (LABEL_OPERATOR, LABEL_JOB, LABEL_TYPE, LABEL_INDEX)}
    return templates.fill(
        templates.service, name=pod_name(job.name, replica.type, index), job=job,
        labels=labels, selector=selector, ports=tensorflow_ports(replica),
    )
