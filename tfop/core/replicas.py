"""The job's pods and services: create what is missing, remove what the spec no longer asks for."""
from __future__ import annotations

from tfop.api import pods
from tfop.api.constants import ANNOTATION_GANG_GENERATION
from tfop.api.model import ReplicaSpec, pod_name
from tfop.children.pod import PodOptions, build_pod
from tfop.children.service import build_service
from tfop.core.context import Context
from tfop.core.draft import Draft
from tfop.gang.base import GangShape


def ensure_services(draft: Draft, ctx: Context) -> None:
    view = draft.view
    if view.succeeded:
        return  # finishing in this pass: nothing new (cleanPodPolicy would never see it)
    for replica, index in view.expected:
        if pod_name(view.job.name, replica.type, index) not in view.services:
            draft.plan.create.append(build_service(ctx.templates, view.job, replica, index))


def create_missing_pods(draft: Draft, ctx: Context, shape: GangShape | None) -> None:
    view = draft.view
    if draft.deleting:
        return  # never recreate in the same pass that deletes: names must be free first
    if view.succeeded:
        return  # finishing in this pass: a pod created now would outlive the job (cleanPodPolicy None)
    if shape is not None and any(pods.terminating(p) for p in view.obs.pods):
        return  # a gang restarts as a unit: wait until every old member is gone
    warned: set[str] = set()
    for replica, index in view.expected:
        if pod_name(view.job.name, replica.type, index) in view.pods:
            continue
        options = _pod_options(draft, ctx, replica, index, shape)
        draft.plan.create.append(build_pod(ctx.templates, view.job, replica, index, options))
        if replica.type not in warned and _warn_scheduler_kept(draft, ctx, replica, options.scheduler_name):
            warned.add(replica.type)


def _pod_options(draft: Draft, ctx: Context, replica: ReplicaSpec, index: int, shape: GangShape | None) -> PodOptions:
    backend, settings = ctx.backend, ctx.settings
    if backend is None:
        return PodOptions(scheduler_name=settings.scheduler_name, cluster_domain=settings.cluster_domain)
    # Which incarnation of the gang a pod belongs to, for people reading pods after a gang restart.
    generation = {ANNOTATION_GANG_GENERATION: str(draft.status.get("restartCount") or 0)}
    markings = backend.pod_markings(draft.view.job, replica, index, shape)
    return PodOptions(scheduler_name=settings.scheduler_name or backend.scheduler_name,
                      cluster_domain=settings.cluster_domain, extra_annotations=generation,
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
