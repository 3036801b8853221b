"""TF_CONFIG: the cluster spec TensorFlow reads to find its peers.

Byte-for-byte what upstream's clients parse: Go's struct order at the top
level (cluster, task, environment), sorted replica-type keys, no spaces.
"""
from __future__ import annotations

import json

from tfop.api.model import TFJob, pod_name


def host(job: TFJob, rtype: str, index: int, port: int, cluster_domain: str = "") -> str:
    fqdn = f"{pod_name(job.name, rtype, index)}.{job.namespace}.svc"
    if cluster_domain:
        fqdn += f".{cluster_domain}"
    return f"{fqdn}:{port}"


def cluster_spec(job: TFJob, cluster_domain: str = "") -> dict[str, list[str]]:
    spec: dict[str, list[str]] = {}
    for replica in job.replicas:
        port = replica.port()
        spec[replica.lower] = [host(job, replica.type, i, port, cluster_domain) for i in range(replica.replicas)]
    return spec


def tf_config(job: TFJob, rtype: str, index: int, cluster_domain: str = "") -> str | None:
    """The TF_CONFIG value for one pod, or None when the whole job is one pod."""
    if job.total_replicas == 1:
        return None
    full = cluster_spec(job, cluster_domain)
    cluster: dict
    if job.dynamic_worker:
        # Sparse form: workers may come and go, so each sees every PS and only itself.
        cluster = {"ps": full.get("ps", [])}
        if rtype.lower() == "worker":
            cluster["worker"] = {str(index): full["worker"][index]}
    else:
        cluster = full
    body = {
        "cluster": dict(sorted(cluster.items())),
        "task": {"type": rtype.lower(), "index": index},
        "environment": "cloud",
    }
    return json.dumps(body, separators=(",", ":"))
