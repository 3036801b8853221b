"""Build the pod and service of one replica (pure; rendered from templates/)."""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Mapping

import jinja2
import yaml

from tfop.gang.base import PodMarkings
from tfop.api.constants import (
    CHIEF_TYPES,
    DEFAULT_CONTAINER,
    DEFAULT_PORT,
    DEFAULT_PORT_NAME,
    LABEL_INDEX,
    LABEL_JOB,
    LABEL_OPERATOR,
    LABEL_ROLE,
    LABEL_TYPE,
    LEGACY_GROUP_LABEL,
    LEGACY_LABELS,
    OPERATOR_NAME,
)
from tfop.api.model import ReplicaSpec, TFJob, pod_name
from tfop.build.resources import resource_path
from tfop.build.tfconfig import tf_config

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class Templates:
    """Compiled templates of what the operator creates; built once at start-up."""

    def __init__(self, directory=None):
        loader = jinja2.FileSystemLoader(str(directory or resource_path("templates")))
        self.env = jinja2.Environment(loader=loader, undefined=jinja2.StrictUndefined, autoescape=False)
        self.pod = self.env.get_template("pod.yaml.j2")
        self.service = self.env.get_template("service.yaml.j2")

    def render(self, template: jinja2.Template, **values) -> dict:
        return yaml.load(template.render(**values), Loader=_Loader)


@dataclass(frozen=True)
class PodOptions:
    scheduler_name: str | None = None  # the gang backend's (or --scheduler-name), None = leave as is
    markings: PodMarkings = PodMarkings()
    cluster_domain: str = ""
    extra_annotations: Mapping[str, str] | None = None


def job_selector(job_name: str) -> dict[str, str]:
    return {LABEL_OPERATOR: OPERATOR_NAME, LABEL_JOB: job_name}


def replica_labels(job: TFJob, replica: ReplicaSpec, index: int) -> dict[str, str]:
    """The selector labels of one replica, current and legacy keys."""
    labels = {
        **job_selector(job.name),
        LABEL_TYPE: replica.lower,
        LABEL_INDEX: str(index),
        LEGACY_GROUP_LABEL: "kubeflow.org",
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
    return templates.render(
        templates.service, name=pod_name(job.name, replica.type, index), job=job,
        labels=labels, selector=selector, ports=tensorflow_ports(replica),
    )


def build_pod(templates: Templates, job: TFJob, replica: ReplicaSpec, index: int, options: PodOptions) -> dict:
    template = replica.template
    user_meta = template.get("metadata") or {}
    labels = {**(user_meta.get("labels") or {}), **options.markings.labels, **replica_labels(job, replica, index)}
    annotations = {
        **(user_meta.get("annotations") or {}),
        **options.markings.annotations,
        **(options.extra_annotations or {}),
    }
    user_spec = template.get("spec") or {}
    # A schedulerName the user chose wins (the caller warns when it differs from the gang's).
    scheduler = user_spec.get("schedulerName") or options.scheduler_name
    pod = templates.render(
        templates.pod, name=pod_name(job.name, replica.type, index), job=job, replica=replica,
        labels=labels, annotations=annotations, scheduler_name=scheduler,
    )
    spec = copy.deepcopy(dict(user_spec))
    spec.update(pod["spec"])
    pod["spec"] = spec
    _prepare_tensorflow_container(spec, tf_config(job, replica.type, index, options.cluster_domain))
    return pod


def _prepare_tensorflow_container(spec: dict, config: str | None) -> None:
    for container in spec.get("containers") or []:
        if container.get("name") != DEFAULT_CONTAINER:
            continue
        ports = container.setdefault("ports", [])
        if not any(p.get("name") == DEFAULT_PORT_NAME for p in ports):
            same = [p for p in ports if p.get("containerPort") == DEFAULT_PORT]
            if not same:
                ports.append({"name": DEFAULT_PORT_NAME, "containerPort": DEFAULT_PORT})
            elif not same[0].get("name"):
                same[0]["name"] = DEFAULT_PORT_NAME  # the user's unnamed 2222 is the tfjob-port
        if config is not None:
            env = [e for e in container.get("env") or [] if e.get("name") != "TF_CONFIG"]
            env.append({"name": "TF_CONFIG", "value": config})
            container["env"] = env
