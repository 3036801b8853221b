"""Does the Kueue on the cluster queue TFJobs? Kueue v0.19+ leaves its kubeflow.org/tfjob integration
out by default; without it a TFJob labelled kueue.x-k8s.io/queue-name is neither suspended nor given
a Workload, so tfop runs it at once, outside the quota, and nothing says so."""
from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

from tfop.api import conditions
from tfop.core.admission import QUEUE_LABEL
from tfop.tools.doctor.cluster import Cluster
from tfop.tools.doctor.report import Check, parse_time

TFJOB_FRAMEWORK = "kubeflow.org/tfjob"
# Where Kueue's release manifests and Helm chart keep its Configuration.
CONFIG_MAP = ("kueue-system", "kueue-manager-config")
CONFIG_KEY = "controller_manager_config.yaml"
# Kueue makes a labelled job's Workload within a second; a job this old without one is not queued.
WORKLOAD_GRACE_SECONDS = 60
MOST_NAMED = 5
MOST_NAMESPACES = 20  # the namespaces whose Workloads are listed
TITLE = f"Kueue queues TFJobs ({TFJOB_FRAMEWORK} in its integrations)"
FIX = (f"add {TFJOB_FRAMEWORK} to integrations.frameworks in Kueue's Configuration ({'/'.join(CONFIG_MAP)}, "
       f"key {CONFIG_KEY}) and restart Kueue's controller manager (Kueue v0.19+ leaves it out by default)")


def frameworks_listed(config_text: str | None) -> bool | None:
    """Whether Kueue's Configuration lists kubeflow.org/tfjob; None when it does not say (no such
    key: Kueue's default list, which depends on its release) or cannot be read."""
    try:
        config = yaml.safe_load(config_text or "")
    except yaml.YAMLError:
        return None
    integrations = config.get("integrations") if isinstance(config, dict) else None
    frameworks = integrations.get("frameworks") if isinstance(integrations, dict) else None
    return TFJOB_FRAMEWORK in frameworks if isinstance(frameworks, list) else None


def awaiting_workloads(jobs: Iterable[Mapping[str, Any]], now: dt.datetime,
                       grace: float = WORKLOAD_GRACE_SECONDS) -> list[Mapping[str, Any]]:
    """The unfinished TFJobs labelled with a queue, created at least `grace` s ago: each should have
    its Workload by now."""
    out = []
    for job in jobs:
        meta, status = job.get("metadata") or {}, job.get("status") or {}
        if not (meta.get("labels") or {}).get(QUEUE_LABEL):
            continue
        if conditions.is_finished(list(status.get("conditions") or [])):
            continue
        try:
            created = parse_time(meta.get("creationTimestamp"))
        except ValueError:
            continue
        if created is not None and (now - created).total_seconds() >= grace:
            out.append(job)
    return out


def without_workload(jobs: Iterable[Mapping[str, Any]], workloads: Iterable[Mapping[str, Any]]) -> list[str]:
    """namespace/name of each job no Workload names as its owner."""
    owners = {ref.get("uid") for w in workloads for ref in (w.get("metadata") or {}).get("ownerReferences") or []}
    return [f"{j['metadata'].get('namespace')}/{j['metadata'].get('name')}" for j in jobs
            if j["metadata"].get("uid") not in owners]


def verdict(listed: bool | None, labelled: int, unqueued: list[str]) -> list[Check]:
    """The check from the Configuration (when it says) and from the labelled jobs (when there are any)."""
    if unqueued:
        named = ", ".join(unqueued[:MOST_NAMED]) + (f" and {len(unqueued) - MOST_NAMED} more"
                                                    if len(unqueued) > MOST_NAMED else "")
        return [Check(TITLE, False, f"{len(unqueued)} TFJob(s) labelled {QUEUE_LABEL} have no Workload after "
                      f"{WORKLOAD_GRACE_SECONDS} s, so Kueue does not hold them to its quota: {named}", FIX)]
    if listed is False:
        return [Check(TITLE, False, f"{'/'.join(CONFIG_MAP)}: integrations.frameworks lacks {TFJOB_FRAMEWORK}, so "
                      f"TFJobs labelled {QUEUE_LABEL} are not queued: they run at once, outside the quota", FIX)]
    if listed or labelled:
        said = [f"{'/'.join(CONFIG_MAP)} lists it"] if listed else []
        said += [f"each of {labelled} labelled TFJob(s) has its Workload"] if labelled else []
        return [Check(TITLE, True, "; ".join(said))]
    return []


def kueue_checks(cluster: Cluster, now: dt.datetime) -> list[Check]:
    """No check when Kueue's API is not served; else the verdict of its Configuration and labelled jobs."""
    try:
        if not cluster.serves_workloads():
            return []
        listed = frameworks_listed(cluster.kueue_config(*CONFIG_MAP, CONFIG_KEY))
        jobs = awaiting_workloads(cluster.tfjobs(), now)
        namespaces = sorted({j["metadata"].get("namespace") for j in jobs})[:MOST_NAMESPACES]
        jobs = [j for j in jobs if j["metadata"].get("namespace") in namespaces]
        workloads = [w for ns in namespaces for w in cluster.workloads(ns)]
    except Exception as err:  # noqa: BLE001 - doctor's user may not read them; the other checks still stand
        return [Check(TITLE, None, f"could not read Kueue's Workloads or the TFJobs: {err}")]
    return verdict(listed, len(jobs), without_workload(jobs, workloads))
