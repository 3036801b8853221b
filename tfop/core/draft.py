"""The decisions of one pass so far: the job's new status and the Plan.

Phases read the JobView (what is) and add decisions here (what to do); this
is the only state a pass writes, and its methods are the only way to write it.
"""
from __future__ import annotations

from tfop.api import conditions, pods
from tfop.core.plan import POD, SERVICE, Event, Plan, Ref
from tfop.core.view import JobView


class Draft:
    def __init__(self, view: JobView):
        self.view = view
        self.plan = Plan()
        # A pass sets the status's fields whole, never changes one inside: the job's values are shared.
        self.status = dict(view.job.status)
        self.conditions: list[dict] = list(self.status.get("conditions") or [])
        self.deleting: set[str] = set()  # pods deleted in this pass

    @property
    def finished(self) -> bool:
        return conditions.is_finished(self.conditions)

    def is_true(self, ctype: str) -> bool:
        return conditions.is_true(self.conditions, ctype)

    def condition(self, ctype: str, value: bool, reason: str, message: str) -> None:
        message = conditions.capped(message, conditions.MAX_CONDITION_MESSAGE)
        self.conditions = conditions.set_condition(self.conditions, ctype, value, reason, message, self.view.now)

    def clear_condition(self, ctype: str) -> None:
        self.conditions = [c for c in self.conditions if c.get("type") != ctype]

    def event(self, etype: str, reason: str, message: str) -> None:
        self.plan.events.append(Event(etype, reason, conditions.capped(message, conditions.MAX_EVENT_MESSAGE)))

    def fail(self, message: str, reason: str = "") -> None:
        failed, running = conditions.FAILED, conditions.RUNNING
        if self.view.running and not any(conditions.find(self.conditions, c) for c in (running, conditions.RESTARTING)):
            # Its pods ran, though no pass said so yet (they ran and failed between two): as upstream,
            # whose pass records Running before the failure that turns it False.
            self.condition(running, True, conditions.REASON[running], f"TFJob {self.view.id} is running.")
        self.condition(failed, True, conditions.REASON[failed], message)
        self.status.setdefault("completionTime", conditions.timestamp(self.view.now))
        self.event("Warning", reason or conditions.REASON[failed], message)

    def delete_pod(self, name: str, with_service: bool = False) -> None:
        pod = self.view.pods.get(name)
        if pod is not None and not pods.terminating(pod) and name not in self.deleting:
            self.deleting.add(name)
            self.plan.delete.append(Ref(*POD, self.view.job.namespace, name))
        if with_service and name in self.view.services:
            self.plan.delete.append(Ref(*SERVICE, self.view.job.namespace, name))

    def delete_pods(self, which=pods.is_active, with_services: bool = False) -> None:
        for pod in self.view.all_pods:
            if which(pod):
                self.delete_pod(pods.name(pod), with_service=with_services)

    def delete_object(self, obj, plural: str) -> None:
        """Any object, e.g. an earlier job's orphan (the pod helpers above know only the job's own)."""
        if not obj["metadata"].get("deletionTimestamp"):
            self.plan.delete.append(Ref.of(obj, plural))

    def delete_group(self, plural: str) -> None:
        self.plan.create_group = None  # planned earlier in this pass (the gang that timed out): not made at all
        group = self.view.group
        if group is not None and not group["metadata"].get("deletionTimestamp"):
            self.plan.delete.append(Ref.of(group, plural))
