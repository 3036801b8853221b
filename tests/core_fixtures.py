"""Builders for the pure-core tables: raw TFJob dicts, observed pods and services, a fixed now.

Everything here is plain data; the tests feed it to normalize / reconcile /
render and compare exact values.
"""
from __future__ import annotations

import copy
import dataclasses
from datetime import datetime, timedelta, timezone

from tfop.api import conditions as S
from tfop.children.pod import PodOptions, build_pod
from tfop.children.service import build_service
from tfop.children.templates import Templates
from tfop.api.model import TFJob, pod_name
from tfop.api.normalize import normalize
from tfop.core.context import Context, Observed
from tfop.core.reconcile import reconcile
from tfop.core.settings import Settings

NOW = datetime(2024, 5, 1, 12, 0, 0, tzinfo=timezone.utc)
NOW_S = "2024-05-01T12:00:00Z"
UID = "11111111-2222-3333-4444-555555555555"
IMAGE = "tf:2.15"
TEMPLATES = Templates()


def ago(seconds: float) -> str:
    return S.timestamp(NOW - timedelta(seconds=seconds))


def container(name="tensorflow", image=IMAGE, ports=None, env=None, **extra) -> dict:
    c = {"name": name, "image": image, **extra}
    if ports is not None:
        c["ports"] = ports
    if env is not None:
        c["env"] = env
    return c


def pod_template(*containers, labels=None, annotations=None, **spec) -> dict:
    meta = {}
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    tmpl = {"spec": {"containers": list(containers) or [container()], **spec}}
    if meta:
        tmpl["metadata"] = meta
    return tmpl


def rspec(replicas=1, restart_policy=None, template=None, **extra) -> dict:
    out = {}
    if replicas is not None:
        out["replicas"] = replicas
    if restart_policy is not None:
        out["restartPolicy"] = restart_policy
    out["template"] = template if template is not None else pod_template()
    out.update(extra)
    return out


def tfjob(replicas=None, version="v1", name="tf-job", namespace="ml", run_policy=None,
          annotations=None, status=None, uid=UID, generation=None, managed_fields=None, **spec) -> dict:
    """A raw TFJob. `replicas` maps type -> rspec dict, or type -> int (Never policy)."""
    replicas = replicas if replicas is not None else {"Worker": 1}
    specs = {k: (rspec(v) if isinstance(v, int) else v) for k, v in replicas.items()}
    meta = {"name": name, "namespace": namespace, "uid": uid}
    if annotations:
        meta["annotations"] = annotations
    if generation is not None:
        meta["generation"] = generation
    if managed_fields is not None:
        meta["managedFields"] = managed_fields
    body = {"tfReplicaSpecs": specs, **spec}
    if run_policy is not None:
        body["runPolicy"] = run_policy
    obj = {"apiVersion": f"kubeflow.org/{version}", "kind": "TFJob", "metadata": meta, "spec": body}
    if status is not None:
        obj["status"] = status
    return obj


def model(obj: dict) -> TFJob:
    n = normalize(obj)
    assert not n.problems, n.problems
    return n.job


def with_status(job: TFJob, **status) -> TFJob:
    return dataclasses.replace(job, status=status)


def cond(ctype: str, status: str = "True", reason: str | None = None, message: str = "m",
         at: str = "2024-05-01T11:00:00Z") -> dict:
    return {"type": ctype, "status": status, "reason": reason or S.REASON.get(ctype, ctype),
            "message": message, "lastUpdateTime": at, "lastTransitionTime": at}


def running_status(start: str = "2024-05-01T11:00:00Z", *extra, **fields) -> dict:
    """A status of a job that has been Created and Running since `start`."""
    return {"conditions": [cond(S.CREATED, at=start), cond(S.RUNNING, at=start), *extra],
            "startTime": start, **fields}


# -- observed children ------------------------------------------------------------------------
def pod(job: TFJob, rtype: str, index: int, phase: str = "Running", exit_code: int | None = None,
        restarts: int = 0, ready: bool | None = None, deleting: bool = False, reason: str | None = None,
        unschedulable: str | None = None, options: PodOptions | None = None) -> dict:
    """A pod as the operator would have created it, with the status the kubelet reports."""
    replica = job.replica(rtype)
    p = build_pod(TEMPLATES, job, replica, index, options or PodOptions())
    p["metadata"]["uid"] = f"uid-{p['metadata']['name']}"
    if deleting:
        p["metadata"]["deletionTimestamp"] = ago(1)
    cs = {"name": "tensorflow", "restartCount": restarts, "ready": bool(ready)}
    if exit_code is not None:
        cs["state"] = {"terminated": {"exitCode": exit_code, "reason": "Error" if exit_code else "Completed"}}
    elif phase == "Running":
        cs["state"] = {"running": {"startedAt": ago(60)}}
    status = {"phase": phase, "containerStatuses": [cs], "conditions": []}
    if ready is None:
        ready = phase == "Running"
    status["conditions"].append({"type": "Ready", "status": "True" if ready else "False"})
    if unschedulable:
        status["conditions"].append({"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                     "message": unschedulable})
    if reason:
        status["reason"] = reason
    p["status"] = status
    return p


def service(job: TFJob, rtype: str, index: int) -> dict:
    s = build_service(TEMPLATES, job, job.replica(rtype), index)
    s["metadata"]["uid"] = f"uid-svc-{s['metadata']['name']}"
    return s


def all_pods(job: TFJob, phase: str = "Running", make=None, **overrides) -> list[dict]:
    """One pod per expected replica; overrides map 'worker_0' -> dict of pod() kwargs (or None: absent).

    `make(job, rtype, index, **kwargs)` builds each pod (default: pod()).
    """
    make = make or pod
    out = []
    for r in job.replicas:
        for i in range(r.replicas):
            key = f"{r.lower}_{i}"
            if key in overrides and overrides[key] is None:
                continue
            kwargs = {"phase": phase, **overrides.get(key, {})}
            out.append(make(job, r.type, i, **kwargs))
    return out


def all_services(job: TFJob) -> list[dict]:
    return [service(job, r.type, i) for r in job.replicas for i in range(r.replicas)]


def observed(job: TFJob, phase: str | None = "Running", services: bool = True, group=None,
             priority_values=None, **overrides) -> Observed:
    pods = all_pods(job, phase, **overrides) if phase is not None else []
    return Observed(pods=pods, services=all_services(job) if services else [], group=group,
                    priority_values=priority_values or {})


def context(backend=None, **settings) -> Context:
    return Context(settings=Settings(**settings), templates=TEMPLATES, backend=backend)


def run(job: TFJob, obs: Observed | None = None, now: datetime = NOW, ctx: Context | None = None,
        problems=(), notes=()):
    seen = copy.deepcopy(job.status)
    plan = reconcile(job, obs or Observed(), now, ctx or context(), problems, notes)
    assert job.status == seen, "a pass changed the status it was given"
    assert_settles(job, plan, obs, now, ctx, problems)
    return plan


def assert_settles(job, plan, obs, now, ctx, problems):
    """A pass that changed only the status, or created children or the gang's group too, leaves nothing for
    the next pass on what it wrote: the runtime does not look again when its own status write comes back
    (JobRecord.take_event), nor for the answers of its own creates (Applier). A pass that had more to
    create than it may at once asks for the next pass itself (requeue_after 0)."""
    if plan.delete or plan.force_delete or plan.patch or plan.delete_job or plan.requeue_after == 0:
        return
    if plan.status is None and not plan.create and plan.create_group is None:
        return
    obs = obs or Observed()
    made = [dict(o, metadata={**o["metadata"], "uid": f"uid-{o['metadata']['name']}"},
                 **({"status": {"phase": "Pending"}} if o["kind"] == "Pod" else {}))
            for o in [*plan.create, *([plan.create_group] if plan.create_group else [])]]
    obs = dataclasses.replace(obs, pods=[*obs.pods, *(o for o in made if o["kind"] == "Pod")],
                              services=[*obs.services, *(o for o in made if o["kind"] == "Service")],
                              group=next((o for o in made if o["kind"] not in ("Pod", "Service")), obs.group))
    status = plan.status if plan.status is not None else job.status
    again = reconcile(with_status(job, **status), obs, now + timedelta(seconds=0.5), ctx or context(), problems, ())
    assert (again.status, again.writes, again.events) == (None, 0, []), (plan.status, again)


def names(objs) -> list[str]:
    return [f"{o['kind']}/{o['metadata']['name']}" for o in objs]


def refs(plan) -> list[str]:
    return [f"{r.kind}/{r.name}" for r in plan.delete]


def ctypes(status: dict) -> list[tuple[str, str]]:
    return [(c["type"], c["status"]) for c in status["conditions"]]


def last_condition(status: dict) -> dict:
    return status["conditions"][-1]


def deep(obj):
    return copy.deepcopy(obj)


def pn(job: TFJob | str, rtype: str, index: int) -> str:
    return pod_name(job if isinstance(job, str) else job.name, rtype, index)
