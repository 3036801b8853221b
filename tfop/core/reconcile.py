"""The pure core: (job, what was observed, now) -> Plan.

Level-triggered: every call looks at the whole job and computes the whole
difference, so it does not matter which event (or crash) came before.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Mapping, Sequence

from tfop.api import conditions as S
from tfop.api import pods as P
from tfop.api.constants import (
    ANNOTATION_GANG_GENERATION,
    ANNOTATION_GANG_RESTART,
    ANNOTATION_GANG_RETRY,
    ANNOTATION_ON_SCHEDULE_TIMEOUT,
    LABEL_INDEX,
    LABEL_TYPE,
)
from tfop.api.model import ReplicaSpec, TFJob, pod_name
from tfop.api.validation import Problem
from tfop.build.children import PodOptions, Templates, build_pod, build_service, job_selector
from tfop.core.plan import POD, SERVICE, Event, Plan, Ref
from tfop.core.settings import Settings
from tfop.gang.base import GangBackend, GangShape, GangState

# Exit codes >= 128 are signals (OOM kill 137, SIGTERM 143, Ctrl-C 130): worth a retry.
RETRYABLE_EXIT_CODE = 128


@dataclass(frozen=True)
class Observed:
    pods: Sequence[Mapping[str, Any]] = ()
    services: Sequence[Mapping[str, Any]] = ()
    group: Mapping[str, Any] | None = None
    priority_values: Mapping[str, int] = field(default_factory=dict)
    # Pods seen deleted by someone else (not the operator) since the last reconcile.
    vanished: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Context:
    settings: Settings
    templates: Templates
    backend: GangBackend | None = None  # None: gang scheduling is off
    # Create pods while the group still waits for admission (no webhook refuses them): the scheduler
    # then admits and binds the gang in one cycle instead of two.
    pods_before_admission: bool = False


def reconcile(job: TFJob, obs: Observed, now: datetime, ctx: Context,
              problems: Sequence[Problem] = (), notes: Sequence[str] = ()) -> Plan:
    return _Reconcile(job, obs, now, ctx).run(problems, notes)


class _Reconcile:
    """One pass over one job; holds the working copy of its status."""

    def __init__(self, job: TFJob, obs: Observed, now: datetime, ctx: Context):
        self.job, self.obs, self.now, self.ctx = job, obs, now, ctx
        self.plan = Plan()
        self.old_status = dict(job.status)
        self.status = copy.deepcopy(dict(job.status))
        self.conditions: list[dict] = list(self.status.get("conditions") or [])
        self.pods = {P.name(p): p for p in obs.pods}
        self.services = {s["metadata"]["name"]: s for s in obs.services}
        self.deleting: set[str] = set()
        self.created: list[str] = []
        self.id = f"{job.namespace}/{job.name}"

    # -- entry -----------------------------------------------------------------
    def run(self, problems: Sequence[Problem], notes: Sequence[str]) -> Plan:
        if not S.find(self.conditions, S.CREATED):
            self.condition(S.CREATED, True, S.REASON[S.CREATED], f"TFJob {self.id} is created.")
            if notes:  # one Event for all of them: Events cost API writes too
                self.event("Normal", "SpecInterpreted", "; ".join(notes))
        if problems and not S.is_finished(self.conditions):
            message = "invalid spec: " + "; ".join(str(p) for p in problems)
            self.fail(message, reason="InvalidSpec")
        if S.is_finished(self.conditions):
            self.finish()
        elif self.job.run_policy.suspend:
            self.suspend()
        else:
            self.run_active()
        self.write_status()
        return self.plan

    # -- helpers ---------------------------------------------------------------
    def condition(self, ctype: str, value: bool, reason: str, message: str) -> None:
        self.conditions = S.set_condition(self.conditions, ctype, value, reason, message, self.now)

    def event(self, etype: str, reason: str, message: str) -> None:
        self.plan.events.append(Event(etype, reason, message))

    def fail(self, message: str, reason: str = "") -> None:
        self.condition(S.FAILED, True, S.REASON[S.FAILED], message)
        self.status.setdefault("completionTime", S.timestamp(self.now))
        self.event("Warning", reason or S.REASON[S.FAILED], message)

    def delete_pod(self, pod_or_name, with_service: bool = False) -> None:
        name = pod_or_name if isinstance(pod_or_name, str) else P.name(pod_or_name)
        pod = self.pods.get(name)
        if pod is not None and not P.terminating(pod) and name not in self.deleting:
            self.deleting.add(name)
            self.plan.delete.append(Ref(*POD, self.job.namespace, name))
        if with_service and name in self.services:
            self.plan.delete.append(Ref(*SERVICE, self.job.namespace, name))

    def expected(self) -> list[tuple[ReplicaSpec, int]]:
        return [(r, i) for r in self.job.replicas for i in range(r.replicas)]

    def elapsed_since(self, stamp: str | None) -> float | None:
        start = S.parse_time(stamp)
        return None if start is None else (self.now - start).total_seconds()

    # -- finished --------------------------------------------------------------
    def finish(self) -> None:
        group = self.obs.group
        if group is not None and not group["metadata"].get("deletionTimestamp") and self.ctx.backend:
            self.plan.delete.append(Ref.of(group, self.ctx.backend.group_resource.plural))
        policy = self.job.run_policy.clean_pod_policy
        for pod in self.obs.pods:
            if policy == "All" or (policy == "Running" and P.is_active(pod)):
                self.delete_pod(pod, with_service=True)
        self.status.pop("gang", None)
        ttl = self.job.run_policy.ttl_seconds_after_finished
        done = self.elapsed_since(self.status.get("completionTime"))
        if ttl is not None and done is not None:
            if done >= ttl:
                self.plan.delete_job = True
            else:
                self.plan.requeue(ttl - done)

    # -- suspended -------------------------------------------------------------
    def suspend(self) -> None:
        for pod in self.obs.pods:
            self.delete_pod(pod, with_service=True)
        group = self.obs.group
        if group is not None and not group["metadata"].get("deletionTimestamp") and self.ctx.backend:
            self.plan.delete.append(Ref.of(group, self.ctx.backend.group_resource.plural))
        if not S.is_true(self.conditions, S.SUSPENDED):
            self.condition(S.RUNNING, False, S.REASON[S.SUSPENDED], f"TFJob {self.id} is suspended.")
            self.condition(S.SUSPENDED, True, S.REASON[S.SUSPENDED], f"TFJob {self.id} is suspended.")
            self.event("Normal", S.REASON[S.SUSPENDED], f"TFJob {self.id} is suspended; its pods are deleted.")
        self.status.pop("gang", None)

    # -- active ----------------------------------------------------------------
    def run_active(self) -> None:
        if S.is_true(self.conditions, S.SUSPENDED):
            self.condition(S.SUSPENDED, False, S.RESUMED, f"TFJob {self.id} is resumed.")
            self.status["startTime"] = S.timestamp(self.now)
            self.event("Normal", S.RESUMED, f"TFJob {self.id} is resumed.")
        self.status.setdefault("startTime", S.timestamp(self.now))
        if self.past_deadline():
            return self.finish()
        gang = self.gang_step()
        if gang is None:  # the gang itself failed (invalid shape or schedule timeout)
            return self.finish()
        shape, state = gang
        if not self.handle_failures(shape):
            return self.finish()
        self.ensure_services()
        if state.admitted or self.ctx.pods_before_admission:
            self.create_missing_pods(shape)
        self.scale_down()
        if self.update_outcome():
            self.finish()

    def past_deadline(self) -> bool:
        deadline = self.job.run_policy.active_deadline_seconds
        ran = self.elapsed_since(self.status.get("startTime"))
        if deadline is None or ran is None:
            return False
        if ran < deadline:
            self.plan.requeue(deadline - ran)
            return False
        self.fail(f"TFJob {self.id} has run longer than activeDeadlineSeconds={deadline}; its pods are stopped.",
                  reason="DeadlineExceeded")
        self.stop_active_pods()
        return True

    def stop_active_pods(self) -> None:
        # A job failed by deadline or backoff must release its GPUs whatever cleanPodPolicy says.
        for pod in self.obs.pods:
            if P.is_active(pod):
                self.delete_pod(pod)

    # -- gang ------------------------------------------------------------------
    def gang_step(self) -> tuple[GangShape | None, GangState] | None:
        backend = self.ctx.backend
        if backend is None:
            return None, GangState(admitted=True)
        from tfop.gang.shape import compute_shape, shape_problems

        problems = shape_problems(self.job, self.obs.priority_values)
        blocking = [p for p in problems if p.blocking and not p.message.startswith("warning:")]
        if blocking:
            self.fail("the gang cannot be formed: " + "; ".join(str(p) for p in blocking), reason="InvalidGang")
            return None
        shape = compute_shape(self.job, self.obs.priority_values)
        desired = backend.group_object(self.job, shape)
        if desired is not None:
            if self.obs.group is None:
                self.plan.create_group = desired
                self.created.insert(0, f"{desired['kind'].lower()} {desired['metadata']['name']}")
            else:
                change = backend.group_changes(self.obs.group, desired)
                if change:
                    self.plan.patch.append((Ref.of(self.obs.group, backend.group_resource.plural), change))
        state = backend.state(self.obs.group, list(self.obs.pods))
        if not self.gang_status(shape, state):
            return None
        return shape, state

    def gang_status(self, shape: GangShape, state: GangState) -> bool:
        """Record why the gang waits; enforce scheduleTimeoutSeconds. False when the job failed."""
        members = [p for p in self.obs.pods if not P.terminating(p)]
        running = sum(P.phase(p) in ("Running", "Succeeded") for p in members)
        waiting = running < shape.min_member
        previous = self.status.get("gang") or {}
        gang = {"backend": self.ctx.backend.name, "group": shape.group_name}
        if state.phase:
            gang["phase"] = state.phase
        if waiting:
            gang["reason"] = state.reason or ("Pending" if state.admitted else "NotAdmitted")
            gang["message"] = state.message or f"{running}/{shape.min_member} gang members running"
            same = all(previous.get(k) == gang.get(k) for k in ("reason", "phase"))
            if not state.explained and same and previous.get("message"):
                gang["message"] = previous["message"]  # the scheduler's reason, not the echo after it
            gang["since"] = previous.get("since") or S.timestamp_ceil(self.now)
        self.status["gang"] = gang
        if waiting and gang["reason"] == "Unschedulable":
            self.touch_group(gang["since"])
        timeout = shape.schedule_timeout_seconds
        waited = self.elapsed_since(gang.get("since"))
        if not waiting or not timeout or waited is None:
            return True
        if waited < timeout:
            self.plan.requeue(timeout - waited)
            return True
        why = f"the gang was not scheduled within scheduleTimeoutSeconds={timeout}: {gang['message']}"
        if self.job.annotations.get(ANNOTATION_ON_SCHEDULE_TIMEOUT, "Fail").lower() == "requeue":
            for pod in members:
                self.delete_pod(pod)
            gang["since"] = S.timestamp_ceil(self.now)
            self.event("Warning", "GangRequeued", why + "; its pods are recreated to queue again.")
            self.plan.requeue(timeout)
            return True
        self.fail(f"TFJob {self.id} failed: {why}", reason="GangScheduleTimeout")
        self.stop_active_pods()
        return False

    def touch_group(self, since: str) -> None:
        """Annotate the group of an unschedulable gang every retry_touch_seconds, for
        schedulers that look at a rejected gang again only when its group changes."""
        backend, group = self.ctx.backend, self.obs.group
        every = backend.retry_touch_seconds
        if not every or group is None or group["metadata"].get("deletionTimestamp"):
            return
        last = (group["metadata"].get("annotations") or {}).get(ANNOTATION_GANG_RETRY)
        try:
            waited = self.elapsed_since(last or since)
        except ValueError:  # someone wrote a malformed stamp: touch again
            waited = None
        if waited is not None and waited < every:
            self.plan.requeue(every - waited)
            return
        self.plan.patch.append((Ref.of(group, backend.group_resource.plural),
                                {"metadata": {"annotations": {ANNOTATION_GANG_RETRY: S.timestamp(self.now)}}}))
        self.plan.requeue(every)

    # -- children --------------------------------------------------------------
    def ensure_services(self) -> None:
        if self.outcome()[0]:
            return  # finishing in this pass: nothing new (cleanPodPolicy would never see it)
        for replica, index in self.expected():
            name = pod_name(self.job.name, replica.type, index)
            if name not in self.services:
                self.plan.create.append(build_service(self.ctx.templates, self.job, replica, index))
                self.created.append(f"service {name}")

    def restart_budget_left(self, wanted: int) -> bool:
        limit = self.job.run_policy.backoff_limit
        if limit is None:
            return True
        used = int(self.status.get("restartCount") or 0) + self.kubelet_restarts()
        return used + wanted <= limit

    def kubelet_restarts(self) -> int:
        return sum(P.restarts(p) for p in self.obs.pods if self._replica_of(p) and
                   self._replica_of(p).restart_policy in ("Always", "OnFailure"))

    def _replica_of(self, pod) -> ReplicaSpec | None:
        labels = pod["metadata"].get("labels") or {}
        for replica in self.job.replicas:
            if replica.lower == labels.get(LABEL_TYPE):
                return replica
        return None

    def handle_failures(self, shape: GangShape | None) -> bool:
        """Restart what may be restarted; False when the job failed."""
        if self.outcome()[0]:
            return True  # the deciding replica succeeded: later failures of the others do not count
        restartable, fatal = [], []
        for pod in self.obs.pods:
            replica = self._replica_of(pod)
            if replica is None or P.terminating(pod) or P.phase(pod) != "Failed":
                continue
            if self.job.dynamic_worker and replica.type == "Worker":
                continue  # elastic workers may come and go
            code = P.exit_code(pod)
            if replica.restart_policy in ("Always", "OnFailure") or (
                    replica.restart_policy == "ExitCode" and (code is None or code >= RETRYABLE_EXIT_CODE)):
                restartable.append(pod)
            else:
                fatal.append((replica, pod))
        if fatal:
            kinds = sorted({r.type for r, _ in fatal})
            detail = ", ".join(P.failure_summary(p) for _, p in fatal)
            self.fail(f"TFJob {self.id} has failed because {len(fatal)} {'/'.join(kinds)} replica(s) failed: {detail}.")
            return False
        limit = self.job.run_policy.backoff_limit
        if limit is not None and self.kubelet_restarts() > limit:
            return self.out_of_budget("its containers restarted")
        lost = self.lost_members() if shape is not None else []
        if not restartable and not lost:
            return True
        gang_restart = shape is not None and self.ctx.settings.gang_restart and \
            self.job.annotations.get(ANNOTATION_GANG_RESTART, "true").lower() != "false"
        if not self.restart_budget_left(1 if gang_restart else len(restartable)):
            return self.out_of_budget("a replica failed again")
        why = ", ".join([P.failure_summary(p) for p in restartable] + [f"{n} disappeared" for n in lost])
        if gang_restart:
            for pod in self.obs.pods:
                self.delete_pod(pod)
            self.status["restartCount"] = int(self.status.get("restartCount") or 0) + 1
            message = f"TFJob {self.id} restarts its whole gang because {why}."
            self.event("Warning", "GangRestart", message)
        else:
            for pod in restartable:
                self.delete_pod(pod)
            self.status["restartCount"] = int(self.status.get("restartCount") or 0) + len(restartable)
            message = f"TFJob {self.id} is restarting because {why}."
            self.event("Warning", S.REASON[S.RESTARTING], message)
        self.condition(S.RESTARTING, True, S.REASON[S.RESTARTING], message)
        return True

    def out_of_budget(self, what: str) -> bool:
        limit = self.job.run_policy.backoff_limit
        self.fail(f"TFJob {self.id} has failed because {what} after reaching backoffLimit={limit}.",
                  reason="BackoffLimitExceeded")
        self.stop_active_pods()
        return False

    def lost_members(self) -> list[str]:
        """Pods of a running gang deleted by someone else (a user, an eviction, a lost node).

        Only pods seen vanishing count: a pod that was never created (quota, a
        create error) must not restart the whole gang again and again.
        """
        if not S.is_true(self.conditions, S.RUNNING):
            return []
        if not any(P.is_active(p) for p in self.obs.pods):
            return []
        return [name for name in (pod_name(self.job.name, r.type, i) for r, i in self.expected())
                if name not in self.pods and name in self.obs.vanished]

    def create_missing_pods(self, shape: GangShape | None) -> None:
        if self.deleting:
            return  # never recreate in the same pass that deletes: names must be free first
        if self.outcome()[0]:
            return  # finishing in this pass: a pod created now would outlive the job (cleanPodPolicy None)
        if shape is not None and any(P.terminating(p) for p in self.obs.pods):
            return  # a gang restarts as a unit: wait until every old member is gone
        backend = self.ctx.backend
        settings = self.ctx.settings
        scheduler = (settings.scheduler_name or backend.scheduler_name) if backend else settings.scheduler_name
        # Which incarnation of the gang a pod belongs to, for people reading pods after a gang restart.
        generation = {ANNOTATION_GANG_GENERATION: str(self.status.get("restartCount") or 0)} if backend else None
        warned = set()
        for replica, index in self.expected():
            name = pod_name(self.job.name, replica.type, index)
            if name in self.pods:
                continue
            markings = backend.pod_markings(self.job, replica, index, shape) if backend else None
            options = PodOptions(scheduler_name=scheduler, cluster_domain=settings.cluster_domain,
                                 extra_annotations=generation, **({"markings": markings} if markings else {}))
            self.plan.create.append(build_pod(self.ctx.templates, self.job, replica, index, options))
            self.created.append(f"pod {name}")
            own = (replica.template.get("spec") or {}).get("schedulerName")
            if backend and scheduler and own and own != scheduler and replica.type not in warned:
                warned.add(replica.type)
                self.event("Warning", "SchedulerNameKept",
                           f"{replica.type} pods keep the template's schedulerName {own!r}, not the gang "
                           f"scheduler's {scheduler!r}: the gang may not be scheduled together")

    def scale_down(self) -> None:
        wanted = {pod_name(self.job.name, r.type, i) for r, i in self.expected()}
        for name in dict.fromkeys([*self.pods, *self.services]):  # a pod and its service share a name
            if name not in wanted:
                self.delete_pod(name, with_service=True)

    # -- outcome ---------------------------------------------------------------
    def replica_counts(self) -> dict[str, dict[str, int]]:
        counts = {r.type: {"active": 0, "succeeded": 0, "failed": 0} for r in self.job.replicas}
        for pod in self.obs.pods:
            replica = self._replica_of(pod)
            if replica is None or P.terminating(pod):
                continue
            key = {"Running": "active", "Succeeded": "succeeded", "Failed": "failed"}.get(P.phase(pod))
            if key:
                counts[replica.type][key] += 1
        return counts

    def outcome(self) -> tuple[bool, bool]:
        """(succeeded, running) as the chief, else the workers, tell."""
        counts = self.replica_counts()
        chief = self.job.chief
        succeeded = running = False
        if chief is not None:
            succeeded = chief.replicas > 0 and counts[chief.type]["succeeded"] >= chief.replicas
            running = counts[chief.type]["active"] > 0
        elif self.job.replica("Worker") is not None:
            workers = self.job.replica("Worker")
            worker0 = self.pods.get(pod_name(self.job.name, "Worker", 0))
            all_done = workers.replicas > 0 and counts["Worker"]["succeeded"] >= workers.replicas
            first_done = worker0 is not None and P.phase(worker0) == "Succeeded"
            succeeded = all_done or (first_done and self.job.success_policy != "AllWorkers")
            running = counts["Worker"]["active"] > 0
        return succeeded, running

    def update_outcome(self) -> bool:
        """Running / Succeeded from the replicas; True when the job just finished."""
        succeeded, running = self.outcome()
        if succeeded:
            self.condition(S.SUCCEEDED, True, S.REASON[S.SUCCEEDED], f"TFJob {self.id} successfully completed.")
            self.status.setdefault("completionTime", S.timestamp(self.now))
            self.event("Normal", S.REASON[S.SUCCEEDED], f"TFJob {self.id} successfully completed.")
            return True
        if running and not self.deleting:
            self.condition(S.RUNNING, True, S.REASON[S.RUNNING], f"TFJob {self.id} is running.")
        return False

    # -- status ----------------------------------------------------------------
    def write_status(self) -> None:
        counts = self.replica_counts()
        replica_statuses = {}
        for replica in self.job.replicas:
            selector = {**job_selector(self.job.name), LABEL_TYPE: replica.lower}
            replica_statuses[replica.type] = {
                **counts[replica.type],
                "labelSelector": {"matchLabels": selector},
                "selector": ",".join(f"{k}={v}" for k, v in sorted(selector.items())),
            }
        self.status["conditions"] = self.conditions
        self.status["replicaStatuses"] = replica_statuses
        self.status["tfReplicaStatuses"] = replica_statuses
        ready = sum(P.is_ready(p) for p in self.obs.pods if not P.terminating(p))
        self.status["ready"] = f"{ready}/{self.job.total_replicas}"
        if self.job.generation:
            self.status["observedGeneration"] = self.job.generation
        if self.created or self.plan.delete:
            deleted = [f"{r.kind.lower()} {r.name}" for r in self.plan.delete]
            parts = ([f"created {_names(self.created)}"] if self.created else []) + (
                [f"deleted {_names(deleted)}"] if deleted else [])
            reason = "SuccessfulCreate" if not deleted else ("SuccessfulDelete" if not self.created else "Reconciled")
            self.plan.events.insert(0, Event("Normal", reason, "; ".join(parts)))
        comparable = {k: v for k, v in self.status.items() if k != "lastReconcileTime"}
        before = {k: v for k, v in self.old_status.items() if k != "lastReconcileTime"}
        if comparable != before:
            self.status["lastReconcileTime"] = S.timestamp(self.now)
            self.plan.status = self.status


def _names(items: list[str], limit: int = 12) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")
