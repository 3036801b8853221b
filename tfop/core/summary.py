"""The one Normal Event a pass posts about its writes: "created ...; deleted ..." (as upstream's reasons)."""
from __future__ import annotations

from collections.abc import Collection

from tfop.core.plan import Event, Plan

NAMES_SHOWN = 12  # a long list is cut: an Event message is read by people


def written_labels(plan: Plan) -> tuple[list[str], list[str]]:
    """("kind name" of every object the plan creates, group first; of every one it deletes)."""
    created = ([plan.create_group] if plan.create_group is not None else []) + plan.create
    return ([f"{o['kind'].lower()} {o['metadata']['name']}" for o in created],
            [f"{r.kind.lower()} {r.name}" for r in plan.delete])


def summary_event(plan: Plan, failed: Collection[str] = ()) -> Event | None:
    """The Event for what the plan wrote, leaving out the writes that `failed` ("kind name")."""
    created, deleted = ([label for label in labels if label not in failed] for labels in written_labels(plan))
    if not created and not deleted:
        return None
    parts = ([f"created {_names(created)}"] if created else []) + ([f"deleted {_names(deleted)}"] if deleted else [])
    reason = "SuccessfulCreate" if not deleted else ("SuccessfulDelete" if not created else "Reconciled")
    return Event("Normal", reason, "; ".join(parts))


def _names(items: list[str]) -> str:
    shown = ", ".join(items[:NAMES_SHOWN])
    more = len(items) - NAMES_SHOWN
    return shown + (f" and {more} more" if more > 0 else "")
