"""Offline views of a job: what the operator would create, and what is wrong with it.

Files are read as kubectl reads them (a time stays a string) and within bounds
(MAX_DEPTH, MAX_VALUES), so whatever a file holds ends as a problem naming a
field or one line about the file, never as an exception.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import IO, Any

import yaml

from tfop.api.constants import LABEL_TYPE
from tfop.api.normalize import is_tfjob, normalize
from tfop.api.rules import MAX_JOB_REPLICAS
from tfop.api.validation import SHOWN_MAX, WARNING, Problem, shown
from tfop.core.context import Context, Observed
from tfop.core.reconcile import reconcile
from tfop.core.replicas import MAX_CREATES_PER_PASS
from tfop.gang.shape import shape_problems


def with_namespace(obj: Mapping[str, Any], namespace: str | None) -> dict:
    if not isinstance(obj.get("metadata") or {}, Mapping):
        return dict(obj)  # mistyped: the checks say so (tfop.api.wellformed), naming the field
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
    now = datetime.now(UTC)
    # What the job becomes, whatever --max-pods-per-job the operator runs with (job_problems warns).
    ctx = replace(ctx, settings=replace(ctx.settings, max_pods_per_job=MAX_JOB_REPLICAS))
    group: dict | None = None
    children: list[dict] = []
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
    problems = spec_problems(obj)
    if not problems:
        job = normalize(obj).job
        problems = pod_problems(obj, ctx) + _size_problems(job.total_replicas, ctx)
        if ctx.backend is not None:  # the gang's rules apply only to gangs, as in the operator
            # Offline the cluster's PriorityClasses are unknown (None): their checks are skipped.
            problems += shape_problems(job, None)
    return problems


def spec_problems(obj: Mapping[str, Any]) -> list[Problem]:
    """What the apiserver refuses (the CRD's schema and rules) and then what the operator fails the
    job for (normalize), one problem a field: a job with any of them gets no pods."""
    from tfop.tools.offline.crd import schema_problems

    problems = list(schema_problems(dict(obj)))
    seen = {p.field for p in problems}
    return problems + [p for p in normalize(obj).problems if p.field not in seen]


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
    # TF_CONFIG, which the schemas do not check, and a check takes ~20 ms (thousands would take minutes).
    last = {(c["metadata"].get("labels") or {}).get(LABEL_TYPE, "?"): c
            for c in first_start_objects(obj, ctx) if c["kind"] == "Pod"}
    out = []
    for rtype, child in last.items():
        try:
            kubernetes_validate.validate(child, kubernetes_validate.latest_version(), strict=True)
        except kubernetes_validate.ValidationError as err:
            out.append(Problem(_job_field(obj, rtype, list(err.path)), err.message))
    return _unique(out)


def _job_field(obj: Mapping[str, Any], rtype: str, pod_path: list) -> str:
    """The job's field a pod's field comes from: its template's, or the job's own name and namespace."""
    def dotted(parts: list) -> str:
        return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts)

    template = f"spec.tfReplicaSpecs.{_canonical(obj, rtype)}.template"
    if pod_path[:1] == ["metadata"] and pod_path[1:2] not in (["labels"], ["annotations"]):
        return f"metadata{dotted(pod_path[1:])}"  # name and namespace come from the job's
    return f"{template}{dotted(pod_path)}"


def _canonical(obj, lower: str) -> str:
    for key in (obj.get("spec") or {}).get("tfReplicaSpecs") or {}:
        if isinstance(key, str) and key.lower() == lower:
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


# A TFJob nests ~15 levels deep and holds a few thousand values; the apiserver takes 3 MB at most.
MAX_DEPTH = 100
MAX_VALUES = 250_000
TIMESTAMP_TAG = "tag:yaml.org,2002:timestamp"


class KubectlYamlLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """YAML as kubectl reads it: an unquoted time (2024-05-01T12:00:00Z) stays a string."""


KubectlYamlLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != TIMESTAMP_TAG]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_OPEN = (yaml.MappingStartEvent, yaml.SequenceStartEvent)
_CLOSE = (yaml.MappingEndEvent, yaml.SequenceEndEvent)


def documents(stream: IO[str] | str) -> list[Any]:
    """Every YAML document in the stream, keys as kubectl reads them (string_keys); ValueError, one
    line, for what is not YAML, has a key JSON cannot have, or is beyond MAX_DEPTH / MAX_VALUES
    (e.g. YAML aliases that repeat each other a billion times)."""
    from tfop.kube.kubeconfig import yaml_error

    try:
        text = stream if isinstance(stream, str) else stream.read()
        # libyaml builds nested collections by recursion in C, which a deep enough document
        # crashes: its events (no recursion) are counted first.
        _check_depth(yaml.parse(text, Loader=KubectlYamlLoader))
        docs = list(yaml.load_all(text, Loader=KubectlYamlLoader))
    except yaml.YAMLError as err:
        # libyaml bundled with PyYAML >= 6.0.4 has a bound of its own (1000 levels), met before ours
        if "maximum nesting depth" in str(getattr(err, "problem", "")):
            raise ValueError(f"nested more than {MAX_DEPTH} levels deep") from None
        raise ValueError(f"not YAML: {printable(yaml_error(err))}") from None
    except TooDeep as err:
        raise ValueError(str(err)) from None
    except (ValueError, RecursionError) as err:  # not UTF-8, an integer of 5000 digits
        raise ValueError(f"not YAML: {printable(' '.join(str(err).split()))[:200]}") from None
    out = []
    for n, doc in enumerate(docs, 1):
        beyond = beyond_bounds(doc)
        if beyond:
            raise ValueError(f"document {n}: {beyond}")
        try:
            out.append(string_keys(doc, ""))
        except KeyError as err:
            raise ValueError(f"document {n}: {err.args[0]}") from None
    return out


def string_keys(value: Any, field: str) -> Any:
    """The document as kubectl turns YAML into JSON: a number or true/false as a key becomes its
    text; KeyError (naming the field) for a key JSON cannot have (null, a time) or one given twice."""
    if isinstance(value, list):
        return [string_keys(item, f"{field}[{i}]") for i, item in enumerate(value)]
    if not isinstance(value, dict):
        return value
    out: dict[str, Any] = {}
    for key, item in value.items():
        text = _key_text(key)
        where = f"{field}.{text}" if field else str(text)
        if text is None:
            raise KeyError(f"{field or 'the document'}: a key must be a string, not {shown(key)}")
        if text in out:
            raise KeyError(f"{where}: the key is given twice")
        out[text] = string_keys(item, where)
    return out


def _key_text(key: Any) -> str | None:
    if isinstance(key, str):
        return key
    if isinstance(key, bool):
        return "true" if key else "false"
    if isinstance(key, (int, float)):
        return str(key)
    return None


class TooDeep(ValueError):
    pass


def _check_depth(events: Iterable[yaml.Event]) -> None:
    depth = 0
    for event in events:
        if isinstance(event, _OPEN):
            depth += 1
            if depth > MAX_DEPTH:
                raise TooDeep(f"nested more than {MAX_DEPTH} levels deep")
        elif isinstance(event, _CLOSE):
            depth -= 1


def beyond_bounds(doc: Any) -> str | None:
    """Why a parsed document is too big to check, or None. Iterative: depth is what is measured."""
    stack, values = [(doc, 0)], 0
    while stack:
        value, depth = stack.pop()
        values += 1
        if values > MAX_VALUES:
            return f"more than {MAX_VALUES} values (YAML aliases repeating each other?)"
        if depth > MAX_DEPTH:
            return f"nested more than {MAX_DEPTH} levels deep (or a YAML alias inside itself)"
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, (list, set)):
            stack.extend((v, depth + 1) for v in value)
    return None


def job_label(job: Mapping[str, Any]) -> str:
    """The job's name as output names it: as written when it is a printable string, quoted otherwise."""
    meta = job.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    if name is None:
        return "?"
    return name if isinstance(name, str) and name.isprintable() and len(name) <= SHOWN_MAX else shown(name)


def printable(text: str) -> str:
    """Text with control and invisible characters escaped, so one line of output stays one line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)
