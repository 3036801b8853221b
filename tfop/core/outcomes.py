"""What became of a Plan's writes, turned into the job's conditions and Events (pure).

The runtime applies a Plan and reports each write that did not succeed as a
FailedWrite: the apiserver's status code and its own message, never parsed
there. conclude() decides what each means for the job: a pod template the
apiserver refuses fails the job; a refused group object is explained and tried
again later; a pod refused until its group is admitted waits; a 403 names the
fix. The summary Event never claims an object that was not written.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Mapping, Sequence

from tfop.api import conditions
from tfop.api.conditions import FAILED, GANG_GROUP_REFUSED, REASON
from tfop.api.constants import LABEL_TYPE
from tfop.api.model import TFJob
from tfop.api.normalize import canonical_type
from tfop.core.plan import Event, Plan
from tfop.core.summary import summary_event, written_labels

GROUP_RETRY_SECONDS = 30.0  # a refused group object is tried again this often (a missing queue may appear)
ADMISSION_RETRY_SECONDS = 5.0  # pods refused until their group is admitted (its watch event usually comes first)
INVALID = (400, 422)  # the apiserver refuses the object itself: sending it again cannot help

REFUSED_TEMPLATE, GROUP_REFUSED, WAITS_FOR_ADMISSION, FORBIDDEN, OTHER = (
    "refused-template", "group-refused", "waits-for-admission", "forbidden", "other")


@dataclass(frozen=True)
class FailedWrite:
    verb: str  # create | delete | patch
    kind: str
    name: str
    code: int  # the HTTP status; 0 when no answer came
    message: str  # the apiserver's own words
    request: str = ""  # e.g. "POST /api/v1/namespaces/ml/pods", for people reading the Event

    @property
    def label(self) -> str:
        return f"{self.kind.lower()} {self.name}"


def classify(failure: FailedWrite, plan: Plan) -> str:
    if _is_group(failure, plan):
        return GROUP_REFUSED if failure.code in INVALID else OTHER
    text = failure.message.lower()
    # Webhooks say "denied the request", admission policies "denied request".
    if failure.verb == "create" and failure.kind == "Pod" and "denied" in text and "podgroup" in text:
        return WAITS_FOR_ADMISSION
    if failure.verb == "create" and failure.code in INVALID:
        return REFUSED_TEMPLATE
    return FORBIDDEN if failure.code == 403 else OTHER


def conclude(job: TFJob, plan: Plan, failures: Sequence[FailedWrite], now: datetime) -> Plan:
    """The plan's status, Events and requeue once its writes are done (`job.status` is the current one)."""
    if not failures:
        return plan
    kinds = {f: classify(f, plan) for f in failures}
    refused_group = [f for f in failures if kinds[f] == GROUP_REFUSED]
    if refused_group:
        return _group_refused(job, plan, refused_group[0])
    done = replace(plan, events=[e for e in plan.events if e != summary_event(plan)])
    summary = summary_event(plan, _not_written(plan, failures, kinds))
    if summary is not None:
        done.events.insert(0, summary)
    if any(kinds[f] == WAITS_FOR_ADMISSION for f in failures):
        done.pods_wait_for_admission = True
        done.requeue(ADMISSION_RETRY_SECONDS)
    refused = [f for f in failures if kinds[f] == REFUSED_TEMPLATE]
    if refused:
        _fail_for_template(job, done, refused, now)
    forbidden = [f for f in failures if kinds[f] == FORBIDDEN]
    if forbidden:  # usually RBAC: say so on the job itself, not only in the operator's log
        first = forbidden[0]
        done.events.append(Event("Warning", "Forbidden", f"{first.request}: {first.code} {first.message}; "
                                 "run `tfop doctor` for the missing ClusterRole rule"))
    return done


def _not_written(plan: Plan, failures: Sequence[FailedWrite], kinds: Mapping[FailedWrite, str]) -> set[str]:
    """Labels of the writes that did not happen: the failed ones, or every one when the group failed
    (no child is written without its group)."""
    if any(_is_group(f, plan) for f in failures):
        created, deleted = written_labels(plan)
        return {*created, *deleted}
    return {f.label for f in failures}


def _is_group(failure: FailedWrite, plan: Plan) -> bool:
    group = plan.create_group
    return failure.verb == "create" and group is not None and failure.kind == group["kind"] \
        and failure.name == group["metadata"]["name"]


def _fail_for_template(job: TFJob, done: Plan, refused: Sequence[FailedWrite], now: datetime) -> None:
    objects = {(o["kind"], o["metadata"]["name"]): o for o in done.create}
    why = [f"spec.tfReplicaSpecs.{_replica_type(objects.get((f.kind, f.name)))}.template: "
           f"{f.kind} {f.name}: {f.message}" for f in refused]
    message = "the apiserver rejected objects built from the pod template; fix " + "; ".join(why)
    status = copy.deepcopy(dict(done.status if done.status is not None else job.status))
    status["conditions"] = conditions.set_condition(list(status.get("conditions") or []), FAILED, True,
                                                    REASON[FAILED], message, now)
    status.setdefault("completionTime", conditions.timestamp(now))
    done.status = status
    done.events.append(Event("Warning", "InvalidPodTemplate", message))


def _replica_type(obj: Mapping | None) -> str:
    labels = ((obj or {}).get("metadata") or {}).get("labels") or {}
    return canonical_type(labels.get(LABEL_TYPE, "")) or "<type>"


def _group_refused(job: TFJob, plan: Plan, failure: FailedWrite) -> Plan:
    """No pods without their group: the job says why, and the group is tried again later."""
    group = plan.create_group
    message = (f"the apiserver refused {group['kind']} {group['metadata']['name']}: {failure.message}; fix the job "
               f"(e.g. runPolicy.schedulingPolicy.queue) or the cluster; tfop tries again every "
               f"{GROUP_RETRY_SECONDS:.0f} s")
    status = copy.deepcopy(dict(plan.status if plan.status is not None else job.status))
    status["gang"] = {**(status.get("gang") or {}), "reason": GANG_GROUP_REFUSED, "message": message}
    events = [e for e in plan.events if e != summary_event(plan)]
    if (job.status.get("gang") or {}).get("message") != message:
        events.append(Event("Warning", "GangGroupRefused", message))
    done = Plan(status=status if status != job.status else None, events=events)
    done.requeue(GROUP_RETRY_SECONDS)
    return done


def needs_retry(failures: Sequence[FailedWrite], plan: Plan) -> list[FailedWrite]:
    """The failures a later pass may not meet (no answer, a 5xx, a 403 being fixed): retried with backoff."""
    return [f for f in failures if classify(f, plan) in (FORBIDDEN, OTHER)]
