"""Offline views of a job: what the operator would create, and what is wrong with it."""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Iterable, Mapping

from tfop.api.normalize import is_tfjob, normalize
from tfop.api.validation import Problem
from tfop.build.children import Templates
from tfop.core.reconcile import Context, Observed, reconcile


def with_namespace(obj: Mapping[str, Any], namespace: str | None) -> dict:
    meta = dict(obj.get("metadata") or {})
    if namespace or not meta.get("namespace"):
        meta["namespace"] = namespace or "default"
    return {**obj, "metadata": meta}


def render_job(obj: Mapping[str, Any], ctx: Context, priority_values: Mapping[str, int] | None = None) -> list[dict]:
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
    """Everything the apiserver or the operator would refuse, each with field and fix."""
    from tfop.tools.crd import schema_problems

    problems = list(schema_problems(dict(obj)))
    seen = {(p.field, p.message) for p in problems}
    try:
        extra = normalize(obj).problems
    except (AttributeError, TypeError, ValueError):
        if not problems:
            raise
        extra = ()  # a mistyped object the schema already reported; normalize assumes the schema's types
    for problem in extra:
        if not any(problem.field == f for f, _ in seen):
            problems.append(problem)
    if not problems:
        problems.extend(pod_problems(obj, ctx))
    return problems


def pod_problems(obj: Mapping[str, Any], ctx: Context) -> list[Problem]:
    """Check the pods the templates become against the Kubernetes schemas."""
    import kubernetes_validate

    out = []
    for child in render_job(obj, ctx):
        if child["kind"] != "Pod":
            continue
        try:
            kubernetes_validate.validate(child, kubernetes_validate.latest_version(), strict=True)
        except kubernetes_validate.ValidationError as err:
            rtype = child["metadata"]["labels"].get("training.kubeflow.org/replica-type", "?")
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
