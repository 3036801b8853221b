"""`tfop doctor`: is this cluster ready for the operator and its gang scheduler?

Checks the CRDs, asks the apiserver (SubjectAccessReview) whether the
operator's ServiceAccount may do each thing it needs, whether the installed
operator runs (operator_health: replicas Ready, one leading), looks for a running
scheduler answering to the pods' schedulerName, and whether that scheduler's
own ServiceAccount may list the gang's group objects, and which TFJobs wait on lost nodes (with the
command that ends each wait). Every RBAC failure comes
with the minimal rule to add, never a wildcard. The pure half (rule
suggestions, scheduler evidence, report text) is separate from the API calls.
"""
from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import yaml

from tfop.api import conditions
from tfop.core.settings import DEFAULT_DEPLOYMENT, DEFAULT_NAMESPACE, LEADER_ELECTION_LEASE
from tfop.gang import registry
from tfop.gang.base import GangBackend
from tfop.kube.client import ApiError
from tfop.tools.deploy import operator_args
from tfop.tools.deploy.rbac import cluster_role, cluster_role_binding, operator_rules, permissions
from tfop.tools.doctor import kueue, operator_health
from tfop.tools.doctor.cluster import SCHEDULER_REASONS, Cluster
from tfop.tools.doctor.report import LEASE_GRACE, Check, exit_code, format_report, lease_is_live, parse_time  # noqa: F401  the report, as `doctor.` callers know it

TFJOB_CRD = "tfjobs.kubeflow.org"
DEFAULT_SCHEDULER = "default-scheduler"
# Verbs a scheduler's informer needs on the group objects it reads.
SCHEDULER_VERBS = ("list", "watch")
# Names a scheduler's pods and leader-election Lease carry, beyond the schedulerName itself.
# kube-scheduler: Lease kube-system/kube-scheduler, static pod kube-scheduler-<node>
# (label component=kube-scheduler). Volcano: Lease vc-scheduler, Deployment volcano-scheduler.
KNOWN_NAMES: dict[str, tuple[str, ...]] = {
    DEFAULT_SCHEDULER: ("kube-scheduler",),
    "volcano": ("vc-scheduler", "volcano-scheduler"),
    "kube-batchd": ("kube-batch", "kube-arbitrator"),
    "kube-batch": ("kube-batch",),
    "yunikorn": ("yunikorn-scheduler",),
    "koord-scheduler": ("koord-scheduler",),
}
POD_NAME_LABELS = ("component", "app", "app.kubernetes.io/name", "app.kubernetes.io/component",
                   "k8s-app", "name")
# kube-scheduler-based schedulers report Scheduled/FailedScheduling events as their
# profile's schedulerName; one this recent means that scheduler was running just now.
EVENT_WINDOW = dt.timedelta(minutes=15)


# ------------------------------------------------------------------ rules
def missing_rules(denied: Iterable[tuple[str, str, str]]) -> list[dict]:
    """The fewest rules granting exactly the denied (group, resource, verb) triples.

    Resources of one group that lack the same verbs share a rule.
    """
    verbs: dict[tuple[str, str], set[str]] = {}
    for group, resource, verb in denied:
        verbs.setdefault((group, resource), set()).add(verb)
    merged: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for (group, resource), vs in verbs.items():
        merged.setdefault((group, tuple(sorted(vs))), []).append(resource)
    return [{"apiGroups": [group], "resources": resources, "verbs": list(vs)}
            for (group, vs), resources in merged.items()]


def rules_yaml(rules: list[dict]) -> str:
    """YAML to paste under a ClusterRole's `rules:`."""
    return yaml.safe_dump(rules, sort_keys=False, default_flow_style=None).rstrip("\n")


def rbac_fix(denied: Iterable[tuple[str, str, str]], user: str, roles: list[str] | None) -> str:
    """What to paste: the rules for a role already bound to `user`, else a role and its binding.

    roles None: the bindings could not be listed, so which role is unknown.
    """
    rules = missing_rules(denied)
    if roles is None:
        return f"add to the rules of a ClusterRole bound to {user}:\n{rules_yaml(rules)}"
    if roles:
        return f"add to the rules of ClusterRole {roles[0]} (bound to {user}):\n{rules_yaml(rules)}"
    _, ns, name = user.rsplit(":", 2)
    role = f"{name}-extra"
    objs = [cluster_role(rules, name=role),
            cluster_role_binding(namespace=ns, name=role, role=role, service_account_name=name)]
    return (f"no ClusterRole is bound to {user}; kubectl apply -f this:\n"
            + yaml.safe_dump_all(objs, sort_keys=False, default_flow_style=None).rstrip("\n"))


def describe_denied(denied: Iterable[tuple[str, str, str]]) -> str:
    """'denied: list, watch podgroups.scheduling.volcano.sh; create pods'."""
    verbs: dict[str, list[str]] = {}
    for group, resource, verb in denied:
        verbs.setdefault(f"{resource}.{group}" if group else resource, []).append(verb)
    return "denied: " + "; ".join(f"{', '.join(vs)} {res}" for res, vs in verbs.items())


# ------------------------------------------------------------------ scheduler
def expected_scheduler(backend: GangBackend | None, scheduler_name: str | None = None) -> str:
    if scheduler_name:
        return scheduler_name
    if backend is not None and backend.scheduler_name:
        return backend.scheduler_name
    return DEFAULT_SCHEDULER


def scheduler_names(scheduler_name: str) -> tuple[str, ...]:
    return (scheduler_name,) + tuple(n for n in KNOWN_NAMES.get(scheduler_name, ())
                                     if n != scheduler_name)


def _pod_matches(pod: Mapping[str, Any], names: tuple[str, ...]) -> bool:
    meta = pod.get("metadata") or {}
    name = meta.get("name", "")
    labels = meta.get("labels") or {}
    return (any(name == n or name.startswith(n + "-") for n in names)
            or any(labels.get(k) in names for k in POD_NAME_LABELS))


def event_time(event: Mapping[str, Any]) -> dt.datetime | None:
    """When an event (core/v1 view, either API's writer) was last seen."""
    series = event.get("series") or {}
    return parse_time(series.get("lastObservedTime") or event.get("lastTimestamp")
                      or event.get("eventTime") or event.get("firstTimestamp"))


def _reporter(event: Mapping[str, Any]) -> str:
    return event.get("reportingComponent") or (event.get("source") or {}).get("component") or ""


@dataclass(frozen=True)
class SchedulerEvidence:
    found: bool
    detail: str
    service_account: tuple[str, str] | None = None  # (namespace, name) of the scheduler's pod


def find_scheduler(scheduler_name: str, leases: Sequence[Mapping[str, Any]],
                   pods: Sequence[Mapping[str, Any]], now: dt.datetime,
                   events: Sequence[Mapping[str, Any]] = ()) -> SchedulerEvidence:
    """Is a scheduler answering to `scheduler_name` running, judging by Leases, pods, events?

    A live leader-election Lease proves a process is running even when it is not
    a pod (our process-based test cluster, or a control plane outside the
    cluster); a Running pod also yields the scheduler's ServiceAccount; a recent
    (Failed)Scheduling event reported under the exact schedulerName covers
    schedulers whose Lease has another name (leader election off, or
    kube-scheduler's default resourceName) and that run outside any pod.
    """
    names = scheduler_names(scheduler_name)
    pod = next((p for p in pods if (p.get("status") or {}).get("phase") == "Running"
                and _pod_matches(p, names)), None)
    lease = next((le for le in leases if (le.get("metadata") or {}).get("name") in names
                  and lease_is_live(le, now)), None)
    sa = None
    parts = []
    if pod is not None:
        meta = pod["metadata"]
        sa = (meta.get("namespace", "default"),
              (pod.get("spec") or {}).get("serviceAccountName") or "default")
        parts.append(f"pod {meta.get('namespace')}/{meta['name']} is Running")
    if lease is not None:
        meta = lease["metadata"]
        parts.append(f"Lease {meta.get('namespace')}/{meta['name']} is held by "
                     f"{lease['spec']['holderIdentity']}")
    recent = [(t, e) for e in events if _reporter(e) == scheduler_name
              and e.get("reason") in SCHEDULER_REASONS
              and (t := event_time(e)) is not None and now - t <= EVENT_WINDOW]
    if recent:
        when, e = max(recent, key=lambda timed: timed[0])
        obj = e.get("involvedObject") or e.get("regarding") or {}
        parts.append(f"it reported {e['reason']} for pod {obj.get('namespace')}/{obj.get('name')} "
                     f"{int((now - when).total_seconds())}s ago")
    if parts:
        return SchedulerEvidence(True, "; ".join(parts), sa)
    alts = " or ".join(names)
    return SchedulerEvidence(False, (
        f"no scheduler answering to schedulerName {scheduler_name!r} found: looked for a "
        f"Lease named {alts} (any namespace) renewed within its leaseDurationSeconds + "
        f"{int(LEASE_GRACE.total_seconds())}s, and for a Running pod (any namespace) named "
        f"{alts} (or <name>-...), or labelled {'/'.join(POD_NAME_LABELS)}={alts}, and for "
        f"{'/'.join(SCHEDULER_REASONS)} events reported by {scheduler_name!r} in the last "
        f"{int(EVENT_WINDOW.total_seconds() // 60)} min"))


def sa_user(namespace: str, name: str) -> tuple[str, list[str]]:
    """The user and groups a ServiceAccount's token authenticates as."""
    return (f"system:serviceaccount:{namespace}:{name}",
            ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"])


def _forbidden(err: Exception) -> str:
    """An API refusal as its code and the apiserver's words; anything else as its text."""
    if isinstance(err, ApiError):
        return f"{err.status} {err.message}".strip()
    return str(err)


def crd_checks(installed: set[str], backend: GangBackend | None) -> list[Check]:
    """One check per CRD the operator and its gang backend need."""
    checks = []
    for crd in [TFJOB_CRD, *(backend.crds if backend else ())]:
        title = f"CRD {crd} exists"
        if crd in installed:
            checks.append(Check(title, True))
        elif crd == TFJOB_CRD:
            checks.append(Check(title, False, "the TFJob CRD is not installed",
                                "tfop manifests > tfop.yaml && kubectl apply --server-side -f tfop.yaml"))
        else:
            assert backend is not None  # only a backend names CRDs beyond the TFJob's
            checks.append(Check(title, False,
                                f"gang backend {backend.name} needs it; is {backend.name} installed?",
                                _other_backend_hint(installed)))
    return checks


def builtin_api_checks(cluster: Cluster, backend: GangBackend | None, namespace: str) -> list[Check]:
    """For a gang scheduler built into Kubernetes: its API served, and the apiserver keeping the pods'
    reference to their group (both need the feature gate; without it the field is dropped silently)."""
    if backend is None or not backend.builtin_api or backend.group_resource is None:
        return []
    resource = backend.group_resource
    fix = ("Kubernetes 1.37+: kube-apiserver --runtime-config=scheduling.k8s.io/v1beta1=true "
           "--feature-gates=GenericWorkload=true, and --feature-gates=GenericWorkload=true on "
           "kube-scheduler and kube-controller-manager")
    title = f"the apiserver serves {resource.plural} in {resource.api_version}"
    try:
        serves = cluster.served(resource.api_version, resource.plural)
    except Exception as err:  # noqa: BLE001 - a check that cannot ask says why; the others still run
        return [Check(title, False, f"discovery failed: {_forbidden(err)}", fix)]
    if not serves:
        return [Check(title, False, f"gang backend {backend.name} creates them; the API is not enabled", fix)]
    checks = [Check(title, True)]
    kept = "pods keep spec.schedulingGroup (feature gate GenericWorkload on)"
    try:
        checks.append(Check(kept, True) if cluster.keeps_scheduling_group(namespace) else Check(
            kept, False, "a dry-run pod lost its spec.schedulingGroup: the apiserver's GenericWorkload gate is off, "
            "so kube-scheduler sees no gang", fix))
    except Exception as err:  # noqa: BLE001 - a check that cannot ask says why; the others still run
        checks.append(Check(kept, None, f"cannot dry-run a pod in {namespace}: {_forbidden(err)}"))
    return checks


def permission_check(cluster: Cluster, title: str, account: tuple[str, str],
                     wanted: Iterable[tuple[str, str, str]]) -> Check:
    """Does ServiceAccount `account` (namespace, name) hold every wanted permission? If not, the fix."""
    user, groups = sa_user(*account)
    denied = [p for p in wanted if not cluster.allowed(user, groups, *p)]
    if not denied:
        return Check(title, True)
    try:
        roles = cluster.roles_bound_to(*account)
    except Exception:  # noqa: BLE001 - doctor's own user may not list bindings; the fix text still works
        roles = None
    return Check(title, False, describe_denied(denied), rbac_fix(denied, user, roles))


def scheduler_check(cluster: Cluster, sched: str, now: dt.datetime) -> tuple[Check, SchedulerEvidence]:
    title = f"scheduler {sched!r} is running"
    try:
        try:
            events = cluster.scheduler_events()
        except Exception:  # noqa: BLE001 - the weakest evidence; Leases and pods still decide
            events = []
        evidence = find_scheduler(sched, cluster.leases(), cluster.running_pods(), now, events)
    except Exception as err:  # noqa: BLE001 - e.g. doctor's user may not list leases or pods
        return (Check(title, None, f"could not list Leases/pods: {_forbidden(err)}"),
                SchedulerEvidence(False, ""))
    fix = "" if evidence.found else "start the scheduler, or point pods at a running one with --scheduler-name"
    return Check(title, evidence.found, evidence.detail, fix), evidence


def scheduler_rbac_check(cluster: Cluster, backend: GangBackend | None,
                         account: tuple[str, str] | None) -> list[Check]:
    """May the scheduler's ServiceAccount read the gang's group objects? (none for label backends)"""
    group = backend.group_resource if backend else None
    if group is None:
        return []  # label/annotation backends: the scheduler reads only pods
    if account is None:
        return [Check("scheduler's ServiceAccount may list the gang's group objects", None,
                      "scheduler's ServiceAccount unknown (no scheduler pod found); "
                      "pass --scheduler-service-account NS:NAME")]
    title = (f"ServiceAccount {account[0]}/{account[1]} (the scheduler's) may list "
             f"{group.plural}.{group.group or 'core'}")
    return [permission_check(cluster, title, account,
                             [(group.group, group.plural, v) for v in SCHEDULER_VERBS])]


def installed_operator_checks(cluster: Cluster, namespace: str, deployment: str,
                              now: dt.datetime) -> list[Check]:
    """The installed operator's replicas, and its leader (operator_health)."""
    try:
        dep = cluster.deployment(namespace, deployment)
        pods = cluster.pods(namespace, operator_health.selector(dep)) if dep else []
        lease = (cluster.lease(operator_health.lease_namespace(dep), LEADER_ELECTION_LEASE)
                 if dep and operator_args.leader_election(operator_health.operator_args(dep)) else None)
    except Exception as err:  # noqa: BLE001 - doctor's user may not read them; the other checks still stand
        return [Check(f"Deployment {namespace}/{deployment} has every replica Ready", None,
                      f"could not read it, its pods or its Lease: {_forbidden(err)}")]
    leader = operator_health.leader_check(namespace, deployment, dep, pods, lease, LEADER_ELECTION_LEASE, now)
    return [operator_health.replicas_check(namespace, deployment, dep, pods)] + ([leader] if leader else [])


def run_checks(cluster: Cluster, backend: GangBackend | None, namespace: str = DEFAULT_NAMESPACE,
               service_account: str = DEFAULT_DEPLOYMENT, scheduler_name: str | None = None,
               scheduler_service_account: tuple[str, str] | None = None,
               now: dt.datetime | None = None, deployment: str = DEFAULT_DEPLOYMENT) -> list[Check]:
    """CRDs, the operator's permissions, the installed operator, the scheduler, the scheduler's
    permissions, jobs on lost nodes, Kueue's queueing of TFJobs: in that order."""
    now = now or dt.datetime.now(dt.UTC)
    checks = crd_checks(cluster.crd_names(), backend)
    checks += builtin_api_checks(cluster, backend, namespace)
    checks.append(permission_check(
        cluster, f"ServiceAccount {namespace}/{service_account} has every permission the operator uses",
        (namespace, service_account), permissions(operator_rules(backend))))
    checks += installed_operator_checks(cluster, namespace, deployment, now)
    running, evidence = scheduler_check(cluster, expected_scheduler(backend, scheduler_name), now)
    checks.append(running)
    checks += scheduler_rbac_check(cluster, backend, scheduler_service_account or evidence.service_account)
    return checks + lost_node_checks(cluster) + kueue.kueue_checks(cluster, now)


def lost_node_checks(cluster: Cluster) -> list[Check]:
    """One failing check per TFJob whose pods are on a lost node (status.nodeLoss), with the operator's
    sentence of what ends the wait; none when no job waits."""
    try:
        jobs = cluster.tfjobs()
    except Exception as err:  # noqa: BLE001 - doctor's user may not list TFJobs; the other checks still stand
        return [Check("no TFJob waits on a lost node", None, f"could not list TFJobs: {_forbidden(err)}")]
    return waiting_on_lost_nodes(jobs)


def waiting_on_lost_nodes(jobs: Iterable[Mapping[str, Any]], most: int = 20) -> list[Check]:
    checks = []
    for job in jobs:
        status, meta = job.get("status") or {}, job.get("metadata") or {}
        loss = status.get("nodeLoss") or {}
        if not loss or conditions.is_finished(list(status.get("conditions") or [])):
            continue
        pods = ", ".join(loss.get("pods") or [])
        checks.append(Check(f"TFJob {meta.get('namespace')}/{meta.get('name')} waits on lost node {loss.get('node')}",
                            False, f"{loss.get('reason')}: pods {pods} (since {loss.get('since')})",
                            loss.get("message") or ""))
    return checks[:most]


def _other_backend_hint(crds: set[str]) -> str:
    try:
        name, _ = registry.detect_backend(crds)
    except ValueError:
        return "install the scheduler (its release ships the CRD)"
    return (f"install the scheduler (its release ships the CRD), or use the one installed: "
            f"tfop gang enable --gang-scheduler-name {name}")


class GangTarget(NamedTuple):
    """What doctor checks the cluster for: the gang backend, and why."""
    backend: GangBackend | None
    scheduler_name: str | None  # --scheduler-name, from the flags or the Deployment's args
    why: str
    warning: str | None  # the flags are valid but probably not what was meant (registry.flag_warning)


def backend_to_check(cluster: Cluster, gang_scheduler_name: str | None, scheduler_name: str | None,
                     namespace: str, deployment: str) -> GangTarget:
    """The backend, scheduler name override, why and any warning: from the flags, else from the
    running operator's args.

    A --gang-scheduler-name given here means gang scheduling, as in every
    command. ValueError when the flags select no backend (e.g. `auto` with no
    scheduler CRD installed).
    """
    enable, source = True, ""
    if gang_scheduler_name is None:
        try:
            dep = cluster.deployment(namespace, deployment)
        except Exception as err:  # noqa: BLE001 - a check that cannot ask says why; the others still run
            dep, unread = None, f"unreadable ({_forbidden(err)})"
        else:
            unread = "not found"
        if dep is None:
            return GangTarget(None, scheduler_name, (
                f"Deployment {namespace}/{deployment} {unread}; checking "
                "without gang scheduling (pass --gang-scheduler-name)"), None)
        args = operator_health.operator_args(dep)
        enable, gang_scheduler_name = operator_args.gang_flags(args)
        scheduler_name = scheduler_name or operator_args.flag_value(args, operator_args.SCHEDULER_NAME)
        source = f"Deployment {namespace}/{deployment} args: "
    backend, why = registry.backend_from_flags(enable, gang_scheduler_name, scheduler_name,
                                               installed_crds=cluster.gang_apis)
    warning = registry.flag_warning(gang_scheduler_name, scheduler_name) if backend is not None else None
    return GangTarget(backend, scheduler_name, source + why, warning and source + warning)
