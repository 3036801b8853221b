"""TF_CONFIG: the cluster spec TensorFlow reads to find its peers.

Byte-for-byte what upstream v1.9 writes: Go's struct order at the top
level (cluster, task, environment), sorted replica-type keys, no spaces; with
enableDynamicWorker its sparse form (no environment).
The cluster part lists every pod of the job, so it is written once per job
(ClusterConfig) and each pod only appends its task: built per pod, it would
make a job of N pods cost N^2.
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


def _json(value) -> str:
    return json.dumps(value, separators=(",", ":"))


class ClusterConfig:
    """The job's part of every TF_CONFIG, as JSON text written once; for_task() adds one pod's task."""

    def __init__(self, job: TFJob, cluster_domain: str = ""):
        self.job, self.cluster_domain = job, cluster_domain
        self.single = job.total_replicas == 1  # one pod needs no peers: no TF_CONFIG at all
        self._cluster = ""
        if self.single:
            return
        if job.dynamic_worker:
            # The PS list a worker sees. Upstream copies its cluster map's PS entry, which a job
            # without a PS type lacks: Go writes that missing list as null.
            ps = job.replica("PS")
            self._cluster = _json([host(job, "PS", i, ps.port(), cluster_domain) for i in range(ps.replicas)]
                                  if ps is not None else None)
        else:
            self._cluster = _json(dict(sorted(cluster_spec(job, cluster_domain).items())))

    def for_task(self, rtype: str, index: int) -> str | None:
        """The TF_CONFIG value for one pod, or None when the whole job is one pod."""
        if self.single:
            return None
        task = f'"task":{{"type":{_json(rtype.lower())},"index":{_json(index)}}}'
        if self.job.dynamic_worker:
            return f'{{"cluster":{self._sparse(rtype, index)},{task}}}'
        return f'{{"cluster":{self._cluster},{task},"environment":"cloud"}}'

    def _sparse(self, rtype: str, index: int) -> str:
        """Upstream's sparse form (Go's field order: worker, then ps): a worker sees itself and every
        PS, a PS only itself, any other type neither."""
        if rtype not in ("Worker", "PS"):
            return '{"worker":{},"ps":[]}'
        spec = self.job.replica(rtype)
        assert spec is not None  # the pod is one of the job's replicas
        address = host(self.job, rtype, index, spec.port(), self.cluster_domain)
        if rtype == "Worker":
            return f'{{"worker":{{{_json(str(index))}:{_json(address)}}},"ps":{self._cluster}}}'
        return f'{{"worker":{{}},"ps":[{_json(address)}]}}'


def tf_config(job: TFJob, rtype: str, index: int, cluster_domain: str = "") -> str | None:
    """The TF_CONFIG value for one pod (a pass builds its ClusterConfig once for all its pods)."""
    return ClusterConfig(job, cluster_domain).for_task(rtype, index)
