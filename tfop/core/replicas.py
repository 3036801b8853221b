"""The job's pods and services: create what is missing, remove what the spec no longer asks for."""
from __future__ import annotations

from collections.abc import Iterable, Iterator

from tfop.api import pods
from tfop.api.constants import ANNOTATION_GANG_GENERATION
from tfop.api.model import ReplicaSpec, pod_name
from tfop.children.pod import PodOptions, build_pod
from tfop.children.service import build_service
from tfop.children.tfconfig import ClusterConfig
from tfop.core.context import Context
from tfop.core.draft import Draft
from tfop.core.failures import gang_generation
from tfop.core.ownership import adoption_patch
from tfop.core.plan import Ref
from tfop.gang.base import GangShape

PLURALS = {"Pod": "pods", "Service": "services"}
# Pods, and services, built in one pass; a bigger job gets the rest in the passes that follow at once.
# A pass runs on the event loop, which every job shares. Building a pod or a service takes ~0.08 ms of
# CPU on this 2-core machine (a template filled and parsed as JSON each), and the pass over a job of
# 1000 pods (the default --max-pods-per-job) costs ~10-25 ms besides: 128 of each keep a pass near
# 50 ms at most, where building a job of 4000 pods in one pass would hold the loop over half a second.
# More passes cost little: each created pod's watch events bring the job's next pass anyway.
MAX_CREATES_PER_PASS = 128


def claim_children(draft: Draft, ctx: Context) -> None:
    """Adopt the orphans created since the job; delete an earlier job's orphans (tfop/core/ownership.py)."""
    view = draft.view
    for obj in view.adopt:
        draft.plan.patch.append((Ref.of(obj, plural_of(obj, ctx)), adoption_patch(view.job, obj)))
    for obj in view.stale:
        draft.delete_object(obj, plural_of(obj, ctx))


def plural_of(obj, ctx: Context) -> str:
    kind = obj["kind"]
    if kind in PLURALS:
        return PLURALS[kind]
    assert ctx.backend is not None  # only a backend's objects have no plural in PLURALS
    return ctx.backend.group_plural()


def name_taken(draft: Draft, kind: str, name: str) -> bool:
    """Held by an object that is not the job's: created once that is gone (no 409s meanwhile)."""
    view = draft.view
    return (kind, name) in view.foreign or any(o["kind"] == kind and o["metadata"]["name"] == name
                                               for o in view.stale)


def ensure_services(draft: Draft, ctx: Context) -> None:
    view = draft.view
    if view.succeeded:
        return  # finishing in this pass: nothing new (cleanPodPolicy would never see it)
    missing = ((replica, index) for replica, index in view.expected
               if _missing(draft, "Service", pod_name(view.job.name, replica.type, index), view.services))
    for replica, index in _batch(draft, missing):
        draft.plan.create.append(build_service(ctx.templates, view.job, replica, index))


def create_missing_pods(draft: Draft, ctx: Context, shape: GangShape | None) -> None:
    view = draft.view
    if draft.deleting:
        return  # never recreate in the same pass that deletes: names must be free first
    if view.succeeded:
        return  # finishing in this pass: a pod created now would outlive the job (cleanPodPolicy None)
    if shape is not None and any(pods.terminating(p) for p in view.all_pods):
        return  # a gang restarts as a unit: wait until every old member is gone
    warned: set[str] = set()
    cluster: ClusterConfig | None = None  # TF_CONFIG's cluster part: built once, and only if a pod is missing
    missing = ((replica, index) for replica, index in view.expected
               if not view.is_done(replica, index)  # succeeded, then deleted: finished is finished (upstream #1186)
               and _missing(draft, "Pod", pod_name(view.job.name, replica.type, index), view.pods))
    for replica, index in _batch(draft, missing):
        cluster = cluster or ClusterConfig(view.job, ctx.settings.cluster_domain)
        options = _pod_options(draft, ctx, replica, index, shape, cluster)
        draft.plan.create.append(build_pod(ctx.templates, view.job, replica, index, options))
        if replica.type not in warned and _warn_scheduler_kept(draft, ctx, replica, options.scheduler_name):
            warned.add(replica.type)


def _missing(draft: Draft, kind: str, name: str, existing) -> bool:
    return name not in existing and not name_taken(draft, kind, name)


def _batch(draft: Draft, missing: Iterable[tuple[ReplicaSpec, int]]) -> Iterator[tuple[ReplicaSpec, int]]:
    """The first MAX_CREATES_PER_PASS of `missing`; when more are missing, the next pass comes at once
    (level-triggered: it creates what it then sees missing)."""
    for made, item in enumerate(missing):
        if made == MAX_CREATES_PER_PASS:
            draft.plan.requeue(0)
            return
        yield item


def _pod_options(draft: Draft, ctx: Context, replica: ReplicaSpec, index: int, shape: GangShape | None,
                 cluster: ClusterConfig) -> PodOptions:
    backend, settings = ctx.backend, ctx.settings
    if backend is None:
        return PodOptions(scheduler_name=settings.scheduler_name, cluster_domain=settings.cluster_domain,
                          cluster_config=cluster)
    # Which incarnation of the gang a pod belongs to, for people reading pods after a gang restart.
    generation = {ANNOTATION_GANG_GENERATION: str(gang_generation(draft.status))}
    assert shape is not None  # a backend's job has a gang shape
    markings = backend.pod_markings(draft.view.job, replica, index, shape)
    return PodOptions(scheduler_name=settings.scheduler_name or backend.scheduler_name,
                      cluster_domain=settings.cluster_domain, extra_annotations=generation, cluster_config=cluster,
                      **({"markings": markings} if markings else {}))


def _warn_scheduler_kept(draft: Draft, ctx: Context, replica: ReplicaSpec, scheduler: str | None) -> bool:
    """A schedulerName in the template wins over the gang scheduler's: say so, once per type."""
    own = (replica.template.get("spec") or {}).get("schedulerName")
    if ctx.backend is None or not scheduler or not own or own == scheduler:
        return False
    draft.event("Warning", "SchedulerNameKept",
                f"{replica.type} pods keep the template's schedulerName {own!r}, not the gang "
                f"scheduler's {scheduler!r}: the gang may not be scheduled together")
    return True


def scale_down(draft: Draft) -> None:
    view = draft.view
    wanted = set(view.expected_names())
    for name in dict.fromkeys([*view.pods, *view.services]):  # a pod and its service share a name
        if name not in wanted:
            draft.delete_pod(name, with_service=True)
