"""Offline views of a job: what the operator would create, and what is wrong with it."""
from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone
from typing import Any, Iterable, Mapping

from tfop.api.constants import LABEL_TYPE
from tfop.api.normalize import is_tfjob, normalize
from tfop.api.rules import MAX_JOB_REPLICAS
from tfop.api.validation import WARNING, Problem
from tfop.core.context import Context, Observed
from tfop.core.reconcile import reconcile
from tfop.core.replicas import MAX_CREATES_PER_PASS
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
    its pods one reconcile later, and a job bigger than one pass's batch
    (tfop.core.replicas.MAX_CREATES_PER_PASS) the rest in the passes after:
    rendering shows every step, each pass seeing what the earlier ones created.
    """
    normalized = normalize(obj)
    now = datetime.now(timezone.utc)
    # What the job becomes, whatever --max-pods-per-job the operator runs with (job_problems warns).
    ctx = replace(ctx, settings=replace(ctx.settings, max_pods_per_job=MAX_JOB_REPLICAS))
    group, children = None, []
    for _ in range(normalized.job.total_replicas // MAX_CREATES_PER_PASS + 3):  # + the group's pass and the last
        admitted = dict(group, status={"phase": "Running"}) if group else None
        observed = Observed(pods=[o for o in children if o["kind"] == "Pod"],
                            services=[o for o in children if o["kind"] == "Service"], group=admitted,
                            priority_values=priority_values or {})
        plan = reconcile(normalized.job, observed, now, ctx, normalized.problems)
        group = group or plan.create_group
        children += plan.create
        if not plan.create and (plan.create_group is None or admitted is not None):
            break
    # Pods before services reads better; the operator creates them together anyway.
    return sorted(([group] if group else []) + children, key=lambda o: {"Pod": 1, "Service": 2}.get(o["kind"], 0))


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
        problems = pod_problems(obj, ctx) + _size_problems(normalized.job.total_replicas, ctx)
        if ctx.backend is not None:  # the gang's rules apply only to gangs, as in the operator
            # Offline the cluster's PriorityClasses are unknown (None): their checks are skipped.
            problems += shape_problems(normalized.job, None)
    return problems


def _size_problems(pods: int, ctx: Context) -> list[Problem]:
    """A job an operator with these settings fails for its size: a warning, as the flags it runs with
    are not known offline."""
    limit = ctx.settings.max_pods_per_job
    if pods <= limit:
        return []
    return [Problem("spec.tfReplicaSpecs", f"the job asks for {pods} pods: an operator run with "
                    f"--max-pods-per-job={limit} fails it; lower the replicas or split the job, "
                    "unless the operator runs with a higher --max-pods-per-job", WARNING)]


def pod_problems(obj: Mapping[str, Any], ctx: Context) -> list[Problem]:
    """Check the pods the templates become against the Kubernetes schemas."""
    import kubernetes_validate

    # One pod a type (its last, the longest name): a type's pods differ only in name, index and
    # TF_CONFIG, which the schemas do not check, and a check takes ~20 ms (thousands took minutes).
    last = {(c["metadata"].get("labels") or {}).get(LABEL_TYPE, "?"): c
            for c in first_start_objects(obj, ctx) if c["kind"] == "Pod"}
    out = []
    for rtype, child in last.items():
        try:
            kubernetes_validate.validate(child, kubernetes_validate.latest_version(), strict=True)
        except kubernetes_validate.ValidationError as err:
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
