"""What a job's gang needs: members, per-type members, resources, queue, priority.

Computed from the job alone plus the cluster's PriorityClass values, so the
result is the same on every reconcile (upstream sorts replica types by a
PriorityClass lookup that never succeeds, so its minResources order is random).
"""
from __future__ import annotations

from fractions import Fraction
from typing import Any, Mapping

from tfop.api.constants import REPLICA_TYPES
from tfop.api.model import ReplicaSpec, TFJob
from tfop.api.quantity import add_resources, format_quantity, format_resources, parse_quantity
from tfop.api.validation import Problem
from tfop.gang.base import GangShape

POLICY_FIELD = "spec.runPolicy.schedulingPolicy"
# Problems the user can fix while the job waits (the reconciler reports them and
# carries on) start with this; the rest make the gang impossible to form.
WARNING = "warning: "


def _priority_field(rtype: str) -> str:
    return f"spec.tfReplicaSpecs.{rtype}.template.spec.priorityClassName"


def _pod_spec(replica: ReplicaSpec) -> Mapping[str, Any]:
    return replica.template.get("spec", {}) or {}


def priority_class_name(replica: ReplicaSpec) -> str | None:
    return _pod_spec(replica).get("priorityClassName") or None


def _container_requests(container: Mapping[str, Any]) -> dict[str, Fraction]:
    # The apiserver defaults a missing request to the limit, per resource.
    res = container.get("resources", {}) or {}
    merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
    out = {}
    for name, value in merged.items():
        try:
            out[name] = parse_quantity(value)
        except ValueError:
            pass  # reported by shape_problems; the apiserver rejects the pod anyway
    return out


def _max(a: Mapping[str, Fraction], b: Mapping[str, Fraction]) -> dict[str, Fraction]:
    return {k: max(a.get(k, Fraction(0)), b.get(k, Fraction(0))) for k in {*a, *b}}


def pod_requests(template: Mapping[str, Any]) -> dict[str, Fraction]:
    """Effective requests of one pod, computed the way kube-scheduler does.

    App containers add up; a regular init container runs alone (next to the
    sidecars started before it), so the pod needs the larger of the two;
    sidecars (init containers with restartPolicy Always) keep running and add
    to the app total; pod overhead is added last.
    """
    spec = template.get("spec", {}) or {}
    apps = add_resources(_container_requests(c) for c in spec.get("containers") or [])
    sidecars: dict[str, Fraction] = {}
    init_peak: dict[str, Fraction] = {}
    for c in spec.get("initContainers") or []:
        req = _container_requests(c)
        if c.get("restartPolicy") == "Always":
            sidecars = add_resources([sidecars, req])
            init_peak = _max(init_peak, sidecars)
        else:
            init_peak = _max(init_peak, add_resources([sidecars, req]))
    total = _max(add_resources([apps, sidecars]), init_peak)
    overhead = {}
    for name, value in (spec.get("overhead") or {}).items():
        try:
            overhead[name] = parse_quantity(value)
        except ValueError:
            pass
    return {k: v for k, v in add_resources([total, overhead]).items() if v}


def _rank(rtype: str) -> int:
    return REPLICA_TYPES.index(rtype) if rtype in REPLICA_TYPES else len(REPLICA_TYPES)


def _active(job: TFJob) -> list[ReplicaSpec]:
    """Replica types with pods, in REPLICA_TYPES order (the model keeps the user's order)."""
    return sorted((r for r in job.replicas if r.replicas > 0), key=lambda r: (_rank(r.type), r.type))


def priority_order(job: TFJob, priority_values: Mapping[str, int]) -> list[ReplicaSpec]:
    """Replica types by PriorityClass value, highest first; ties in REPLICA_TYPES order."""

    def key(r: ReplicaSpec):
        value = priority_values.get(priority_class_name(r) or "", 0)
        return (-value, _rank(r.type), r.type)

    return sorted(_active(job), key=key)


def _min_member(job: TFJob) -> int:
    wanted = job.run_policy.scheduling.min_available
    return wanted if wanted is not None and wanted > 0 else job.total_replicas


def _shared_priority_class(job: TFJob) -> str | None:
    names = {priority_class_name(r) for r in _active(job)}
    return names.pop() if len(names) == 1 else None


def compute_shape(job: TFJob, priority_values: Mapping[str, int]) -> GangShape:
    policy = job.run_policy.scheduling
    min_member = _min_member(job)
    ordered = priority_order(job, priority_values)

    # Fill the gang type by type in priority order: the pods that must come up
    # together are the most important ones.
    min_task_member: dict[str, int] = {}
    left = min_member
    for r in ordered:
        take = min(r.replicas, left)
        if take > 0:
            min_task_member[r.type] = take
        left -= take

    per_pod = {r.type: pod_requests(r.template) for r in ordered}
    if policy.min_resources:
        min_resources = {}
        for name in sorted(policy.min_resources):
            value = policy.min_resources[name]
            try:
                min_resources[name] = format_quantity(parse_quantity(value), name)
            except ValueError:
                min_resources[name] = str(value)  # passed through; shape_problems reports it
    else:
        min_resources = format_resources(
            add_resources(per_pod[t] for t, n in min_task_member.items() for _ in range(n))
        )

    return GangShape(
        group_name=job.name,
        min_member=min_member,
        min_task_member=min_task_member,
        min_resources=min_resources,
        pod_resources={t: format_resources(per_pod[t]) for t in per_pod},
        queue=policy.queue or None,
        priority_class=policy.priority_class or _shared_priority_class(job),
        schedule_timeout_seconds=policy.schedule_timeout_seconds,
    )


def _bad_quantities(job: TFJob) -> list[Problem]:
    out = []
    for r in job.replicas:
        spec = _pod_spec(r)
        for kind in ("initContainers", "containers"):
            for i, c in enumerate(spec.get(kind) or []):
                res = c.get("resources", {}) or {}
                for section in ("requests", "limits"):
                    for name, value in (res.get(section) or {}).items():
                        try:
                            parse_quantity(value)
                        except ValueError:
                            out.append(Problem(
                                f"spec.tfReplicaSpecs.{r.type}.template.spec.{kind}[{i}]"
                                f".resources.{section}.{name}",
                                f"{value!r} is not a Kubernetes quantity",
                            ))
    for name, value in (job.run_policy.scheduling.min_resources or {}).items():
        try:
            parse_quantity(value)
        except ValueError:
            out.append(Problem(f"{POLICY_FIELD}.minResources.{name}",
                               f"{value!r} is not a Kubernetes quantity"))
    return out


def shape_problems(job: TFJob, priority_values: Mapping[str, int]) -> list[Problem]:
    """What would keep the gang from ever starting, or make it behave oddly.

    Warnings: minAvailable above the replica count (the job waits, as upstream's
    does, until the user lowers it), a missing PriorityClass (the apiserver
    refuses the pods until it exists). Blocking: quantities that are not
    quantities, and mixed priorities: members of one gang with unequal
    priorities get split by preemption (ACK's rule; upstream accepts them).
    """
    problems: list[Problem] = []
    policy = job.run_policy.scheduling
    total = job.total_replicas
    if policy.min_available is not None and policy.min_available > total:
        problems.append(Problem(
            f"{POLICY_FIELD}.minAvailable",
            f"{WARNING}minAvailable {policy.min_available} exceeds the job's {total} replicas, "
            f"so the gang could never start; set it to at most {total} or remove it",
        ))

    for r in _active(job):
        name = priority_class_name(r)
        if name and name not in priority_values:
            problems.append(Problem(
                _priority_field(r.type),
                f"{WARNING}PriorityClass {name} not found; create it or remove it"))
    if policy.priority_class and policy.priority_class not in priority_values:
        problems.append(Problem(
            f"{POLICY_FIELD}.priorityClass",
            f"{WARNING}PriorityClass {policy.priority_class} not found; create it or remove it"))

    # Gang schedulers order and preempt a gang as one unit; members of unequal
    # priority get split by preemption (Coscheduling requires one priority outright).
    active = _active(job)
    if len({priority_class_name(r) for r in active}) > 1:
        first = active[0]
        ref = priority_class_name(first)

        def describe(name: str | None) -> str:
            if not name:
                return "none"
            value = priority_values.get(name)
            return f"{name!r} ({value})" if value is not None else repr(name)

        for r in active[1:]:
            if priority_class_name(r) != ref:
                problems.append(Problem(
                    _priority_field(r.type),
                    f"pods of one gang must share one priority, but {r.type} uses "
                    f"{describe(priority_class_name(r))} and {first.type} uses {describe(ref)}; "
                    "give every replica type the same priorityClassName, or none",
                ))
    return problems + _bad_quantities(job)
