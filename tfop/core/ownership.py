"""Which observed children are this job's: claimed by the controller reference to its UID.

A child carries the job's labels, but labels are not ownership: a job deleted
and created again under the same name finds the old job's pods (still being
garbage-collected, or orphaned by `--cascade=orphan`) with the same labels and
names. Like upstream's ControllerRefManager, a child counts only when its
controller reference is this job's UID. An orphan (no controller) created since
the job is adopted; one older than the job is a leftover of an earlier job of
that name and is deleted, so the job runs its own pods. A child controlled by
anyone else is never touched: if it holds a name the job needs, the job waits
and says whose it is.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tfop.api import conditions
from tfop.api.constants import KIND
from tfop.api.model import TFJob

Obj = Mapping[str, Any]


@dataclass(frozen=True)
class Claim:
    ours: tuple[Obj, ...]  # controlled by the job, and orphans it adopts
    adopt: tuple[Obj, ...]  # orphans created since the job: patched to name it their controller
    stale: tuple[Obj, ...]  # orphans older than the job: an earlier job's, deleted
    foreign: tuple[Obj, ...]  # controlled by someone else: left alone


def controller_of(obj: Obj) -> Mapping[str, Any] | None:
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return ref
    return None


def claim(job: TFJob, objects: Iterable[Obj]) -> Claim:
    ours: list[Obj] = []
    adopt: list[Obj] = []
    stale: list[Obj] = []
    foreign: list[Obj] = []
    created = conditions.parse_time(job.creation_timestamp) if job.creation_timestamp else None
    for obj in objects:
        owner = controller_of(obj)
        if owner is not None:
            (ours if owner.get("uid") == job.uid else foreign).append(obj)
            continue
        born = conditions.parse_time(obj["metadata"].get("creationTimestamp"))
        if created is not None and born is not None and born < created:
            stale.append(obj)
        elif not obj["metadata"].get("deletionTimestamp"):
            ours.append(obj)
            adopt.append(obj)
    return Claim(tuple(ours), tuple(adopt), tuple(stale), tuple(foreign))


def adoption_patch(job: TFJob, obj: Obj) -> dict:
    """Names the job the object's controller; the uid makes it apply only to this very object."""
    return {"metadata": {"uid": obj["metadata"].get("uid"),
                         "ownerReferences": [*(obj["metadata"].get("ownerReferences") or []), job.owner_reference()]}}


def earlier_incarnation(job: TFJob, obj: Obj) -> bool:
    """Controlled by an earlier TFJob of the same name: the garbage collector is removing it."""
    owner = controller_of(obj) or {}
    return owner.get("kind") == KIND and owner.get("name") == job.name and owner.get("uid") != job.uid


def describe_holder(obj: Obj) -> str:
    owner = controller_of(obj)
    who = f"{owner.get('kind')} {owner.get('name')} (uid {owner.get('uid')})" if owner else "no controller"
    return f"{obj.get('kind', 'object').lower()} {obj['metadata']['name']} belongs to {who}"
