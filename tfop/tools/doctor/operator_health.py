"""`tfop doctor` on the installed operator: are its Deployment's replicas all Ready, none of them
killed for memory, and does exactly one of them hold the leader-election Lease?

Pure: the Deployment, its pods and the Lease as the API returns them (plain dicts) in, checks out.
"""
from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from tfop.api.pods import is_ready, terminating
from tfop.tools.deploy.operator_args import flag_value, leader_election, operator_container_index
from tfop.tools.doctor.report import Check, lease_age, lease_is_live

LEADER_ELECT_NAMESPACE = "--leader-elect-namespace"
# At most this many problems are listed: the replicas of a crash-looping Deployment all say the same.
PROBLEMS_SHOWN = 4


def operator_container(deployment: Mapping[str, Any]) -> Mapping[str, Any]:
    """The container running `tfop run`: the one named like the Deployment, else the first."""
    meta, spec = deployment["metadata"], deployment["spec"]["template"]["spec"]
    containers = spec.get("containers") or [{}]
    names = [c.get("name", "") for c in containers]
    return containers[operator_container_index(names, meta.get("namespace", ""), meta["name"])]


def operator_args(deployment: Mapping[str, Any]) -> list[str]:
    return list(operator_container(deployment).get("args") or [])


def selector(deployment: Mapping[str, Any]) -> str:
    """The Deployment's pods as a label selector (matchLabels; tfop's manifests use nothing else)."""
    labels = ((deployment.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def lease_namespace(deployment: Mapping[str, Any]) -> str:
    """Where its replicas take the Lease: --leader-elect-namespace, else their own namespace."""
    return flag_value(operator_args(deployment), LEADER_ELECT_NAMESPACE) or deployment["metadata"]["namespace"]


def _why_not_ready(pod: Mapping[str, Any]) -> str:
    """The most telling reason a pod is not Ready: a waiting container's, else unschedulable, else phase."""
    status = pod.get("status") or {}
    for c in status.get("containerStatuses") or []:
        waiting = (c.get("state") or {}).get("waiting")
        if waiting:
            return f"{waiting.get('reason', 'Waiting')}: {waiting.get('message', '')}".rstrip(": ")
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return f"{cond.get('reason', 'Unschedulable')}: {cond.get('message', '')}".rstrip(": ")
    return f"phase {status.get('phase', 'Unknown')}, readiness probe not passing (caches not synced yet?)"


def _oom_killed(pod: Mapping[str, Any]) -> int:
    """Restarts of a container whose last run ended OOMKilled (0 when its last end was not that)."""
    for c in (pod.get("status") or {}).get("containerStatuses") or []:
        if ((c.get("lastState") or {}).get("terminated") or {}).get("reason") == "OOMKilled":
            return int(c.get("restartCount") or 0)
    return 0


def replicas_check(namespace: str, name: str, deployment: Mapping[str, Any] | None,
                   pods: Sequence[Mapping[str, Any]]) -> Check:
    """Every wanted replica is Ready and of the current template; no pod was killed for memory."""
    title = f"Deployment {namespace}/{name} has every replica Ready"
    if deployment is None:
        return Check(title, None, f"no Deployment {namespace}/{name}: the operator is not installed here "
                                  "(or give --namespace and --deployment)")
    spec, status = deployment.get("spec") or {}, deployment.get("status") or {}
    wanted = spec.get("replicas", 1)
    ready, updated = status.get("readyReplicas") or 0, status.get("updatedReplicas") or 0
    current = (status.get("observedGeneration") or 0) >= (deployment["metadata"].get("generation") or 0)
    live = [p for p in pods if not terminating(p)]
    names = ", ".join(sorted(p["metadata"]["name"] for p in live)) or "none"
    problems = []
    if wanted == 0:
        return Check(title, False, "scaled to 0 replicas: no operator runs",
                     f"kubectl -n {namespace} scale deployment/{name} --replicas 2")
    if not current or updated < wanted:
        problems.append(f"rolling out: {updated} of {wanted} replicas run the current template")
    for pod in sorted(live, key=lambda p: p["metadata"]["name"]):
        if not is_ready(pod):
            problems.append(f"pod {pod['metadata']['name']} is not Ready: {_why_not_ready(pod)}")
        if restarts := _oom_killed(pod):
            limit = ((operator_container(deployment).get("resources") or {}).get("limits") or {}).get("memory")
            problems.append(f"pod {pod['metadata']['name']} restarted {restarts} time(s), last killed for "
                            f"memory (OOMKilled): raise resources.limits.memory (now {limit or 'unset'})")
    if ready >= wanted and not problems:
        return Check(title, True, f"{ready} of {wanted} Ready (pods: {names})")
    shown = problems[:PROBLEMS_SHOWN]
    fix = (f"kubectl -n {namespace} describe pods -l {selector(deployment)}; "
           f"kubectl -n {namespace} logs -l {selector(deployment)} --tail 50")
    return Check(title, False, f"{ready} of {wanted} Ready (pods: {names})\n" + "\n".join(shown), fix)


def leader_check(namespace: str, name: str, deployment: Mapping[str, Any] | None,
                 pods: Sequence[Mapping[str, Any]], lease: Mapping[str, Any] | None, lease_name: str,
                 now: dt.datetime) -> Check | None:
    """Exactly one replica leads: the Lease is held, renewed in time, by one of this Deployment's pods.

    None when there is no Deployment (the replicas check says so already).
    """
    if deployment is None:
        return None
    where = f"{lease_namespace(deployment)}/{lease_name}"
    title = f"one replica of {namespace}/{name} leads (Lease {where})"
    wanted = (deployment.get("spec") or {}).get("replicas", 1)
    if not leader_election(operator_args(deployment)):
        if wanted > 1:
            return Check(title, False, f"{wanted} replicas run without --leader-elect: each reconciles every job",
                         "add --leader-elect to the container's args, or scale to 1 replica")
        return Check(title, True, "one replica, leader election off")
    if lease is None:
        return Check(title, False, f"no Lease {where}: no replica has led yet",
                     f"kubectl -n {namespace} logs -l {selector(deployment)} --tail 50")
    identity = (lease.get("spec") or {}).get("holderIdentity") or ""
    age = lease_age(lease, now)
    if age is None:
        return Check(title, False, f"Lease {where} is held by nobody: the last leader stopped and no "
                                   "replica has taken over", f"kubectl -n {namespace} logs -l {selector(deployment)}")
    renewed = f"renewed {int(age.total_seconds())}s ago"
    if not lease_is_live(lease, now):
        return Check(title, False, f"Lease {where} is held by {identity}, {renewed}, longer than its "
                                   f"{lease['spec'].get('leaseDurationSeconds')}s: its holder stopped renewing",
                     f"kubectl -n {namespace} logs -l {selector(deployment)}")
    holder = identity.rpartition("_")[0]  # `<hostname>_<random>`, and a pod's hostname is its name
    ours = {p["metadata"]["name"] for p in pods}
    if holder not in ours:
        return Check(title, False, (
            f"Lease {where} is held by {identity}, not by a pod of Deployment {namespace}/{name} "
            f"({', '.join(sorted(ours)) or 'none'}): another tfop uses this Lease (a `tfop run` "
            "outside the cluster, or a second install), and these replicas stand by"),
            "stop the other operator; two installs need different namespaces or --leader-elect-namespace")
    return Check(title, True, f"held by pod {holder}, {renewed}")
