"""The pure core: (job, what was observed, now) -> Plan.

Level-triggered: every call looks at the whole job and computes the whole
difference, so it does not matter which event (or crash) came before. The
phases run in the order below; each reads the JobView and adds its decisions
to the Draft.
"""
from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from tfop.api.model import TFJob
from tfop.api.validation import Problem
from tfop.core import lifecycle, replicas
from tfop.core.admission import record_admission
from tfop.core.blockers import check_blockers
from tfop.core.context import Context, Observed
from tfop.core.draft import Draft
from tfop.core.failures import handle_failures
from tfop.core.gang_step import gang_step
from tfop.core.nodes import say_node_loss
from tfop.core.plan import Plan
from tfop.core.status import finalize
from tfop.core.view import JobView


def reconcile(job: TFJob, obs: Observed, now: datetime, ctx: Context,
              problems: Sequence[Problem] = (), notes: Sequence[str] = ()) -> Plan:
    draft = Draft(JobView.of(job, obs, now))
    lifecycle.begin(draft, problems, notes)
    lifecycle.fail_if_too_many_pods(draft, ctx.settings)
    if draft.finished:
        lifecycle.finish(draft, ctx)
    elif job.run_policy.suspend:
        lifecycle.suspend(draft, ctx)
    elif not _run_active(draft, ctx):
        lifecycle.finish(draft, ctx)
    say_node_loss(draft, ctx)  # after the restarts: what the job now waits for on lost nodes
    record_admission(draft)  # Kueue's hold on a suspended job, said plainly
    finalize(draft)
    return draft.plan


def _run_active(draft: Draft, ctx: Context) -> bool:
    """One pass over a job that should be running; False when it finished in this pass."""
    lifecycle.start(draft)
    if draft.view.succeeded:
        # Done by its pods, though the status may not say so yet (a crash before it was written):
        # nothing may be created again, not even the gang's group, which `finish` then deletes.
        return not lifecycle.record_progress(draft)
    if lifecycle.past_deadline(draft):
        return False
    gang = gang_step(draft, ctx)
    if gang is None:  # the gang itself failed (invalid shape or schedule timeout)
        return False
    shape, state = gang
    if not handle_failures(draft, ctx, shape):
        return False
    replicas.claim_children(draft, ctx)
    if check_blockers(draft):
        draft.plan.create_group = None  # the group's create waits out the same backoff as the pods'
    else:
        replicas.ensure_services(draft, ctx)
        if state.admitted or ctx.pods_before_admission:
            replicas.create_missing_pods(draft, ctx, shape)
            draft.plan.create_together = shape is not None
        elif any(name not in draft.view.pods for name in draft.view.expected_names()):
            # pods wait for the group's admission, which its status tells
            draft.plan.reads_group_status = draft.plan.reads_group_progress = True
    replicas.scale_down(draft)
    return not lifecycle.record_progress(draft)
