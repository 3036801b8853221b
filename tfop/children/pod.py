"""The pod of one replica: the user's template plus labels, gang markings (labels, annotations, spec fields),
the tfjob-port and TF_CONFIG."""
from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass

from tfop.api.constants import DEFAULT_CONTAINER, DEFAULT_PORT, DEFAULT_PORT_NAME
from tfop.api.model import ReplicaSpec, TFJob, pod_name
from tfop.children.labels import replica_labels
from tfop.children.templates import Templates
from tfop.children.tfconfig import ClusterConfig
from tfop.gang.base import PodMarkings


@dataclass(frozen=True)
class PodOptions:
    scheduler_name: str | None = None  # the gang backend's (or --scheduler-name), None = leave as is
    markings: PodMarkings = PodMarkings()
    cluster_domain: str = ""
    extra_annotations: Mapping[str, str] | None = None
    # The job's TF_CONFIG cluster part, built once for all the pods of a pass (None: for this pod alone).
    cluster_config: ClusterConfig | None = None


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
    pod = templates.fill(
        templates.pod, name=pod_name(job.name, replica.type, index), job=job, replica=replica,
        labels=labels, annotations=annotations, scheduler_name=scheduler,
    )
    spec = copy.deepcopy(dict(user_spec))
    spec.update(pod["spec"])
    spec.update(copy.deepcopy(dict(options.markings.spec)))
    pod["spec"] = spec
    cluster = options.cluster_config or ClusterConfig(job, options.cluster_domain)
    _prepare_tensorflow_container(spec, cluster.for_task(replica.type, index))
    return pod


def _prepare_tensorflow_container(spec: dict, config: str | None) -> None:
    for container in spec.get("containers") or []:
        if container.get("name") != DEFAULT_CONTAINER:
            continue
        ports = container.get("ports") or []  # `ports: null` in a file: the apiserver drops it
        container["ports"] = ports
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
