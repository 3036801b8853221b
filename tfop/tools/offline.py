"""Offline views of a job: what the operator would create, and what is wrong with it."""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Iterable, Mapping

from tfop.api.constants import LABEL_TYPE
from tfop.api.normalize import is_tfjob, normalize
from tfop.api.validation import Problem
from tfop.children.templates import Templates
from tfop.core.context import Context, Observed
from tfop.core.reconcile import reconcile
from tfop.gang.shape import shape_problems


def with_namespace(obj: Mapping[str, Any], namespace: str | None) -> dict:
    meta = dict(obj.get("metadata") or {})
    if namespace or not meta.get("namespace"):
        meta["namespace"] = namespace or "default"
    return {**obj, "metadata": meta}


def first_start_objects(obj: Mapping[str, Any], ctx: Context,
                        priority_values: Mapping[str, int] | None = None) -> list[dict]:
    """Every object of the job's first start, group object first.

    A backend that waits for the scheduler to admit the group (Volcano) creates
    its pods one reconcile later; rendering shows that second step too.
    """
    normalized = normalize(obj)
    now = datetime.now(timezone.utc)
    observed = Observed(priority_values=priority_values or {})
    plan = reconcile(normalized.job, observed, now, ctx, normalized.problems)
    objects = ([plan.create_group] if plan.create_group else []) + plan.create
    if plan.create_group and not any(o["kind"] == "Pod" for o in plan.create):
        admitted = dict(plan.create_group, status={"phase": "Running"})
        services = [o for o in plan.create if o["kind"] == "Service"]
        again = reconcile(normalized.job, Observed(services=services, group=admitted,
                                                   priority_values=observed.priority_values),
                          now, ctx, normalized.problems)
        objects += [o for o in again.create if o["kind"] == "Pod"]
    # Pods before services reads better; the operator creates them together anyway.
    return sorted(objects, key=lambda o: {"Pod": 1, "Service": 2}.get(o["kind"], 0))


def job_problems(obj: Mapping[str, Any], ctx: Context) -> list[Problem]:
    """Everything the apiserver or the operator would refuse, each with field and fix.

    Once the spec itself is valid, the pods it becomes and the gang it forms are
    checked too; the gang's findings include warnings (Problem.blocking False).
    """
    from tfop.tools.crd import schema_problems

    problems = list(schema_problems(dict(obj)))
    try:
        normalized = normalize(obj)
    except (AttributeError, TypeError, ValueError):
        if not problems:
            raise
        return problems  # a mistyped object the schema already reported; normalize assumes the schema's types
    seen = {p.field for p in problems}
    problems += [p for p in normalized.problems if p.field not in seen]
    if not problems:
        problems = pod_problems(obj, ctx)
        if ctx.backend is not None:  # the gang's rules apply only to gangs, as in the operator
            # Offline the cluster's PriorityClasses are unknown (None): their checks are skipped.
            problems += shape_problems(normalized.job, None)
    return problems


def pod_problems(obj: Mapping[str, Any], ctx: Context) -> list[Problem]:
    """Check the pods the templates become against the Kubernetes schemas."""
    import kubernetes_validate

    out = []
    for child in first_start_objects(obj, ctx):
        if child["kind"] != "Pod":
            continue
        try:
            kubernetes_validate.validate(child, kubernetes_validate.latest_version(), strict=True)
        except kubernetes_validate.ValidationError as err:
            rtype = child["metadata"]["labels"].get(LABEL_TYPE, "?")
            parts = list(err.path)
            if parts[:1] == ["spec"]:
                parts = parts[1:]
            where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts)
            field = f"spec.tfReplicaSpecs.{_canonical(obj, rtype)}.template.spec{where}"
            out.append(Problem(field, err.message))
    return _unique(out)


def _canonical(obj, lower: str) -> str:
    for key in (obj.get("spec") or {}).get("tfReplicaSpecs") or {}:
        if key.lower() == lower:
            return key
    return lower


def _unique(problems: Iterable[Problem]) -> list[Problem]:
    seen, out = set(), []
    for p in problems:
        if (p.field, p.message) not in seen:
            seen.add((p.field, p.message))
            out.append(p)
    return out


def tfjobs_in(docs: Iterable[Any]) -> list[dict]:
    return [d for d in docs if isinstance(d, dict) and is_tfjob(d)]
