"""`tfop gang enable|disable`: flip gang scheduling on a running operator in one step.

Replaces the seeds' two hand edits (`kubectl edit deployment` for the flags,
`kubectl edit clusterrole` for the podgroup rights). The pure functions decide
what changes; apply_gang() reads, patches and reports.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tfop.gang.base import GangBackend
from tfop.gang.registry import backend_from_flags
from tfop.kube.blocking import BlockingClient
from tfop.runtime import discovery
from tfop.tools.deploy.operator_args import (
    ENABLE,
    GANG_NAME,
    flag_units,
    gang_flags,
    is_gang_flag,
    operator_container_index,
)
from tfop.tools.deploy.rbac import canonical_rule, operator_rules

# Named in server-side apply conflicts: re-applying `tfop manifests` made with
# other gang flags than the last `tfop gang` run then says who set the fields.
FIELD_MANAGER = "tfop-gang"


def toggle_args(args: list[str], enable: bool, name: str | None) -> list[str]:
    """The container args with gang scheduling on (with `name`) or off.

    Unchanged when already in the wanted state, so a second run is a no-op. New
    flags go right after the `run` subcommand, where `tfop manifests` puts them.
    """
    enabled, current = gang_flags(args)
    if enable and enabled and current == name:
        return list(args)
    if not enable and not enabled and current is None:
        return list(args)
    units = flag_units(args)
    first = next((i for i, u in enumerate(units) if is_gang_flag(u)), None)
    kept = [u for u in units if not is_gang_flag(u)]
    if enable:
        new = [(ENABLE,)] + ([(GANG_NAME, name)] if name else [])
        if first is None:
            at = next((i + 1 for i, u in enumerate(kept) if u == ("run",)), 0)
        else:
            at = sum(1 for u in units[:first] if not is_gang_flag(u))
        kept[at:at] = new
    return [tok for unit in kept for tok in unit]


def toggle_rules(rules: Sequence[Mapping[str, Any]], enable: bool,
                 backend: GangBackend | None) -> list[dict]:
    """The ClusterRole rules with `backend`'s own rules added or removed.

    Enable appends each backend rule not already present; disable removes rules
    equal to a backend rule, never one of the base rules (in case a backend
    repeats one), so disable undoes exactly what enable did.
    """
    out = [dict(r) for r in rules]
    if backend is None:
        return out
    base = operator_rules(None)
    extra = [r for r in operator_rules(backend) if r not in base]
    present = [canonical_rule(r) for r in rules]
    if enable:
        return out + [r for r in extra if r not in present]
    return [r for r, c in zip(out, present) if c not in extra]


# ------------------------------------------------------------------ diff text
def describe_args(old: list[str], new: list[str]) -> str:
    """'args += --enable-gang-scheduling ...; args -= ...' or '' when equal."""
    if old == new:
        return ""
    before, after = flag_units(old), flag_units(new)
    removed = [u for u in before if u not in after]
    added = [u for u in after if u not in before]
    parts = []
    if removed:
        parts.append("args -= " + " ".join(t for u in removed for t in u))
    if added:
        parts.append("args += " + " ".join(t for u in added for t in u))
    return "; ".join(parts) or "args reordered"


def describe_rule(rule: Mapping[str, Any]) -> str:
    groups = ",".join(g or "core" for g in rule.get("apiGroups", []))
    return f"{groups} {','.join(rule.get('resources', []))} [{' '.join(sorted(rule.get('verbs', [])))}]"


def describe_rules(old: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, Any]]) -> list[str]:
    before = [canonical_rule(r) for r in old]
    after = [canonical_rule(r) for r in new]
    return ([f"- {describe_rule(r)}" for r in before if r not in after]
            + [f"+ {describe_rule(r)}" for r in after if r not in before])


# ------------------------------------------------------------------ apply
@dataclass(frozen=True)
class Target:
    namespace: str = "kubeflow"
    deployment: str = "tfop"
    cluster_role: str = "tfop"
    container: str | None = None  # default: the container named like the Deployment, else the first


def _backend_by_name(api: BlockingClient) -> Callable[[str | None], GangBackend]:
    """Name -> backend; `auto` is detected from the cluster's CRDs and APIs, as the operator does."""
    def resolve(name: str | None) -> GangBackend:
        backend, _why = backend_from_flags(True, name, installed_crds=lambda: api.call(discovery.gang_apis))
        assert backend is not None  # gang is on: enable is True
        return backend
    return resolve


def gang_rules(rules: list[dict], was: tuple[bool, str | None], enable: bool, name: str | None,
               resolve: Callable[[str | None], GangBackend]) -> list[dict]:
    """The ClusterRole's rules after the toggle; `rules` itself when nothing changes.

    `was` is (enabled, name) from the Deployment's args before the toggle.
    """
    was_enabled, old_name = was
    new = rules
    # Switching backends or disabling: drop what the old backend added. A disable
    # naming a backend also cleans up after an earlier run that patched only the args.
    if was_enabled or (not enable and name is not None):
        new = toggle_rules(new, False, resolve(old_name if was_enabled else name))
    if enable:
        new = toggle_rules(new, True, resolve(name))
    if [canonical_rule(r) for r in new] == [canonical_rule(r) for r in rules]:
        return rules  # keep the role byte-for-byte when nothing changed
    return new


def guarded_patch(path: str, present: bool, old: Any, new: Any) -> list[dict]:
    """A JSON patch setting `path` to `new` that fails if `path` no longer holds `old`,
    so a concurrent edit makes the command fail instead of being overwritten."""
    if not present:
        return [{"op": "add", "path": path, "value": new}]
    return [{"op": "test", "path": path, "value": old}, {"op": "replace", "path": path, "value": new}]


def _rules_report(label: str, lines: list[str], aggregated: bool) -> list[str]:
    if not lines:
        return [f"{label}: unchanged"]
    if aggregated:  # its rules belong to the controller-manager, which would undo a patch
        return [(f"{label}: not patched: it has an aggregationRule; apply "
                 "rbac/gang-<backend>.yaml (its own role and binding) instead")]
    return [f"{label}: {line}" for line in lines]


def apply_gang(api: BlockingClient, enable: bool, name: str | None, target: Target = Target(),
               resolve: Callable[[str | None], GangBackend] | None = None,
               dry_run: bool = False) -> list[str]:
    """Patch the Deployment's args and the ClusterRole's rules; return the human diff."""
    resolve = resolve or _backend_by_name(api)
    dep = api.get("apps/v1", "deployments", target.namespace, target.deployment)
    if dep is None:
        raise LookupError(f"Deployment {target.namespace}/{target.deployment} not found")
    containers = dep["spec"]["template"]["spec"]["containers"]
    idx = operator_container_index([c["name"] for c in containers], target.namespace, target.deployment,
                                   target.container)
    present_args = containers[idx].get("args")
    old_args = list(present_args or [])
    new_args = toggle_args(old_args, enable, name if enable else None)
    role = api.get("rbac.authorization.k8s.io/v1", "clusterroles", None, target.cluster_role)
    if role is None:
        raise LookupError(f"ClusterRole {target.cluster_role} not found")
    old_rules = list(role.get("rules") or [])
    rules = gang_rules(old_rules, gang_flags(old_args), enable, name, resolve)

    args_text = describe_args(old_args, new_args)
    rule_lines = describe_rules(old_rules, rules)
    aggregated = role.get("aggregationRule") is not None
    report = [f"Deployment {target.namespace}/{target.deployment}: {args_text or 'unchanged'}"]
    report += _rules_report(f"ClusterRole {target.cluster_role}", rule_lines, aggregated)
    if args_text and not dry_run:
        path = f"/spec/template/spec/containers/{idx}/args"
        api.json_patch("apps/v1", "deployments", target.namespace, target.deployment,
                       guarded_patch(path, present_args is not None, old_args, new_args), FIELD_MANAGER)
    if rule_lines and not aggregated and not dry_run:
        api.json_patch("rbac.authorization.k8s.io/v1", "clusterroles", None, target.cluster_role,
                       guarded_patch("/rules", role.get("rules") is not None, old_rules, rules), FIELD_MANAGER)
    if not args_text and not rule_lines:
        state = f"enabled ({gang_flags(new_args)[1] or 'default backend'})" if enable else "disabled"
        report.append(f"nothing to do: gang scheduling already {state}")
    return report
