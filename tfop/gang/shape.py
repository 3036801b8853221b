"""What a job's gang needs: members, per-type members, resources, queue, priority.

Computed from the job alone plus the cluster's PriorityClass values, so the
result is the same on every reconcile (upstream sorts replica types by a
PriorityClass lookup that never succeeds, so its minResources order is random).
"""
from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from tfop.api.constants import REPLICA_TYPES
from tfop.api.model import ReplicaSpec, TFJob
from tfop.api.quantity import add_resources, format_quantity, format_resources, parse_quantity
from tfop.api.validation import WARNING, Problem, quantity_problems, template_quantity_problems
from tfop.gang.base import GangShape

POLICY_FIELD = "spec.runPolicy.schedulingPolicy"


def _priority_field(rtype: str) -> str:
    return f"spec.tfReplicaSpecs.{rtype}.template.spec.priorityClassName"


def _pod_spec(replica: ReplicaSpec) -> Mapping[str, Any]:
    return replica.template.get("spec", {}) or {}


def priority_class_name(replica: ReplicaSpec) -> str | None:
    return _pod_spec(replica).get("priorityClassName") or None


def _parsed(values: Mapping[str, Any]) -> dict[str, Fraction]:
    """The entries that are quantities; shape_problems reports the rest, and the apiserver refuses them."""
    out = {}
    for name, value in values.items():
        try:
            out[name] = parse_quantity(value)
        except ValueError:
            pass
    return out


def _container_requests(container: Mapping[str, Any]) -> dict[str, Fraction]:
    # The apiserver defaults a missing request to the limit, per resource.
    res = container.get("resources", {}) or {}
    return _parsed({**(res.get("limits") or {}), **(res.get("requests") or {})})


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
    overhead = _parsed(spec.get("overhead") or {})
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


def gang_of(job: TFJob, priority_values: Mapping[str, int]) -> tuple[tuple[Problem, ...], GangShape | None]:
    """(shape_problems, compute_shape or None when a problem blocks the gang) of the job, computed once
    for its spec and the PriorityClass values (kept in job.derived, reused while the replicas, runPolicy,
    name and values it was made from are the same: the same objects, between passes)."""
    source = (job.replicas, job.run_policy, job.name, tuple(sorted(priority_values.items())))
    kept = job.derived.get("gang")
    if kept is not None and all(a is b or a == b for a, b in zip(kept[0], source)):
        return kept[1]
    problems = tuple(shape_problems(job, priority_values))
    made = problems, None if any(p.blocking for p in problems) else compute_shape(job, priority_values)
    job.derived["gang"] = (source, made)
    return made


def _bad_quantities(job: TFJob) -> list[Problem]:
    out = []
    for r in job.replicas:
        out += template_quantity_problems(f"spec.tfReplicaSpecs.{r.type}.template", r.template)
    return out + quantity_problems(f"{POLICY_FIELD}.minResources", job.run_policy.scheduling.min_resources)


def _unreachable_min_available(job: TFJob) -> list[Problem]:
    wanted, total = job.run_policy.scheduling.min_available, job.total_replicas
    if wanted is None or wanted <= total:
        return []
    return [Problem(f"{POLICY_FIELD}.minAvailable",
                    f"minAvailable {wanted} exceeds the job's {total} replicas, so the gang could "
                    f"never start; set it to at most {total} or remove it", WARNING)]


def _missing_priority_classes(job: TFJob, priority_values: Mapping[str, int]) -> list[Problem]:
    named = [(_priority_field(r.type), priority_class_name(r)) for r in _active(job)]
    named.append((f"{POLICY_FIELD}.priorityClass", job.run_policy.scheduling.priority_class))
    return [Problem(field, f"PriorityClass {name} not found; create it or remove it", WARNING)
            for field, name in named if name and name not in priority_values]


def _mixed_priorities(job: TFJob, priority_values: Mapping[str, int]) -> list[Problem]:
    # Gang schedulers order and preempt a gang as one unit; members of unequal
    # priority get split by preemption (Coscheduling requires one priority outright).
    active = _active(job)
    if len({priority_class_name(r) for r in active}) <= 1:
        return []
    first = active[0]
    ref = priority_class_name(first)

    def describe(name: str | None) -> str:
        if not name:
            return "none"
        value = priority_values.get(name)
        return f"{name!r} ({value})" if value is not None else repr(name)

    return [Problem(_priority_field(r.type),
                    f"pods of one gang must share one priority, but {r.type} uses "
                    f"{describe(priority_class_name(r))} and {first.type} uses {describe(ref)}; "
                    "give every replica type the same priorityClassName, or none")
            for r in active[1:] if priority_class_name(r) != ref]


def shape_problems(job: TFJob, priority_values: Mapping[str, int] | None) -> list[Problem]:
    """What would keep the gang from ever starting, or make it behave oddly.

    Warnings: minAvailable above the replica count (the job waits, as upstream's
    does, until the user lowers it), a missing PriorityClass (the apiserver
    refuses the pods until it exists). Errors: quantities that are not
    quantities, and mixed priorities: members of one gang with unequal
    priorities get split by preemption (ACK's rule; upstream accepts them).
    priority_values None means the cluster's PriorityClasses are unknown
    (offline): the checks that need them are skipped.
    """
    problems = _unreachable_min_available(job)
    if priority_values is not None:
        problems += _missing_priority_classes(job, priority_values)
    return problems + _mixed_priorities(job, priority_values or {}) + _bad_quantities(job)
