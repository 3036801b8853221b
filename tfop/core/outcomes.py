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
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from tfop.api import conditions
from tfop.api.conditions import FAILED, GANG_GROUP_REFUSED, REASON
from tfop.api.constants import LABEL_TYPE
from tfop.api.model import TFJob
from tfop.api.normalize import canonical_type
from tfop.core.ownership import controller_of
from tfop.core.pending import with_headline
from tfop.core.plan import Event, Plan
from tfop.core.summary import summary_event, written_labels

GROUP_RETRY_SECONDS = 30.0  # a refused group object is tried again this often (a missing queue may appear)
ADMISSION_RETRY_SECONDS = 5.0  # pods refused until their group is admitted (its watch event usually comes first)
INVALID = (400, 422)  # the apiserver refuses the object itself: sending it again cannot help
NAMED = 3  # refused objects named in a message; the rest are counted
NOT_ATTEMPTED = -1  # FailedWrite.code of a create left for later: an earlier batch of the pass failed

REFUSED_TEMPLATE, GROUP_REFUSED, WAITS_FOR_ADMISSION, FORBIDDEN, OTHER, SKIPPED = (
    "refused-template", "group-refused", "waits-for-admission", "forbidden", "other", "skipped")
# Refusals that block the job until something outside it changes (tfop/core/blockers.py says which).
POD_SECURITY, QUOTA, NAMESPACE_TERMINATING, WEBHOOK_DENIED, NAME_TAKEN = (
    "pod-security", "quota", "namespace-terminating", "webhook-denied", "name-taken")
# What the apiserver's 403s say, by who refused (its admission plugins' own wording).
FORBIDDEN_BY = (("violates PodSecurity", POD_SECURITY), ("exceeded quota", QUOTA),
                ("because it is being terminated", NAMESPACE_TERMINATING), ("admission webhook", WEBHOOK_DENIED))


@dataclass(frozen=True)
class FailedWrite:
    verb: str  # create | delete | patch
    kind: str
    name: str
    code: int  # the HTTP status; 0 when no answer came
    message: str  # the apiserver's own words
    request: str = ""  # e.g. "POST /api/v1/namespaces/ml/pods", for people reading the Event
    # For a name already taken (409): the object holding it, as read back (None: gone meanwhile).
    holder: Mapping | None = None

    @property
    def label(self) -> str:
        return f"{self.kind.lower()} {self.name}"


def classify(failure: FailedWrite, plan: Plan) -> str:
    if failure.code == NOT_ATTEMPTED:
        return SKIPPED
    if _is_group(failure, plan):
        if failure.code == 409:
            return NAME_TAKEN  # another controller's group holds the name: wait, on a backoff
        return GROUP_REFUSED if failure.code in INVALID else OTHER
    text = failure.message.lower()
    # Webhooks say "denied the request", admission policies "denied request".
    if failure.verb == "create" and failure.kind == "Pod" and "denied" in text and "podgroup" in text:
        return WAITS_FOR_ADMISSION
    if failure.verb == "create" and failure.code in INVALID:
        return REFUSED_TEMPLATE
    if failure.verb == "create" and failure.code == 409:
        return NAME_TAKEN
    if failure.code != 403:
        return OTHER
    return next((kind for words, kind in FORBIDDEN_BY if words in failure.message), FORBIDDEN)


def conclude(job: TFJob, plan: Plan, failures: Sequence[FailedWrite], now: datetime) -> Plan:
    """The plan's status, Events and requeue once its writes are done (`job.status` is the current one)."""
    failures = [f for f in failures if not held_by_job(job, f)]
    if not failures:
        return plan
    kinds = [classify(f, plan) for f in failures]
    of_kind = {kind: [f for f, k in zip(failures, kinds) if k == kind] for kind in kinds}
    if GROUP_REFUSED in of_kind:
        return _with_headline(_group_refused(job, plan, of_kind[GROUP_REFUSED][0]))
    done = replace(plan, events=[e for e in plan.events if e != summary_event(plan)])
    if done.requeue_after == 0 and any(f.verb == "create" for f in failures):
        done.requeue_after = None  # more batches next pass, but not before the failure's own retry
    summary = summary_event(plan, _not_written(plan, failures))
    if summary is not None:
        done.events.insert(0, summary)
    if WAITS_FOR_ADMISSION in of_kind:
        done.pods_wait_for_admission = True
        done.requeue(ADMISSION_RETRY_SECONDS)
    if REFUSED_TEMPLATE in of_kind:
        _fail(job, done, of_kind[REFUSED_TEMPLATE], now, "InvalidPodTemplate",
              "the apiserver rejected objects built from the pod template; fix ")
    elif POD_SECURITY in of_kind:  # retrying cannot help: the namespace's policy refuses the template
        _fail(job, done, of_kind[POD_SECURITY], now, "PodSecurity",
              "the namespace's Pod Security admission refuses the pods; fix the pod template or the "
              "namespace's pod-security labels: ")
    if FORBIDDEN in of_kind:  # usually RBAC: say so on the job itself, not only in the operator's log
        done.events.append(Event("Warning", "Forbidden", forbidden_message(of_kind[FORBIDDEN][0])))
    return _with_headline(done)


def _with_headline(plan: Plan) -> Plan:
    with_headline(plan.status)  # status.message follows what the failures changed
    return plan


def held_by_job(job: TFJob, failure: FailedWrite) -> bool:
    """A 409 for an object that is the job's own (its cache had not seen it yet): written after all."""
    owner = controller_of(failure.holder) if failure.code == 409 and failure.holder else None
    return owner is not None and owner.get("uid") == job.uid


RBAC_DENIAL = re.compile(r'cannot (\S+) resource "([^"]+)" in API group "([^"]*)"')


def forbidden_message(failure: FailedWrite) -> str:
    """The request, the apiserver's words and, for RBAC, the exact rule the ClusterRole lacks."""
    text = f"{failure.request}: {failure.code} {failure.message}"
    match = RBAC_DENIAL.search(failure.message)
    if match is None:
        return text + "; run `tfop doctor` for the missing ClusterRole rule"
    verb, resource, group = match.groups()
    return (f"{text}; add to the operator's ClusterRole: {{apiGroups: [\"{group}\"], resources: [{resource}], "
            f"verbs: [{verb}]}} (`tfop doctor` checks every rule)")


def _not_written(plan: Plan, failures: Sequence[FailedWrite]) -> set[str]:
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


def _fail(job: TFJob, done: Plan, refused: Sequence[FailedWrite], now: datetime, reason: str, intro: str) -> None:
    """Fail the job for objects its template makes that the apiserver refuses: the first few named."""
    objects = {(o["kind"], o["metadata"]["name"]): o for o in done.create}
    why = [f"spec.tfReplicaSpecs.{_replica_type(objects.get((f.kind, f.name)))}.template: "
           f"{f.kind} {f.name}: {f.message}" for f in refused[:NAMED]]
    more = f"; and {len(refused) - NAMED} more" if len(refused) > NAMED else ""
    message = conditions.capped(intro + "; ".join(why) + more, conditions.MAX_CONDITION_MESSAGE)
    status = copy.deepcopy(dict(done.status if done.status is not None else job.status))
    status["conditions"] = conditions.set_condition(list(status.get("conditions") or []), FAILED, True,
                                                    REASON[FAILED], message, now)
    status.setdefault("completionTime", conditions.timestamp(now))
    done.status = status
    done.events.append(Event("Warning", reason, conditions.capped(message, conditions.MAX_EVENT_MESSAGE)))


def _replica_type(obj: Mapping | None) -> str:
    labels = ((obj or {}).get("metadata") or {}).get("labels") or {}
    return canonical_type(labels.get(LABEL_TYPE, "")) or "<type>"


def _group_refused(job: TFJob, plan: Plan, failure: FailedWrite) -> Plan:
    """No pods without their group: the job says why, and the group is tried again later."""
    group = plan.create_group
    assert group is not None  # the failure is its create's
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


def blocking(failures: Sequence[FailedWrite], job: TFJob) -> list[tuple[str, FailedWrite]]:
    """(kind, failure) of the refusals that block the job until something outside it changes."""
    kinds = (QUOTA, NAMESPACE_TERMINATING, WEBHOOK_DENIED, NAME_TAKEN, FORBIDDEN)
    found = [(classify(f, Plan()), f) for f in failures if not held_by_job(job, f)]
    return [(kind, f) for kind, f in found if kind in kinds]
