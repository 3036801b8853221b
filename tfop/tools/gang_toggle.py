"""`tfop gang enable|disable`: flip gang scheduling on a running operator in one step.

Replaces the seeds' two hand edits (`kubectl edit deployment` for the flags,
`kubectl edit clusterrole` for the podgroup rights). The pure functions decide
what changes; apply_gang() reads, patches and reports.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from tfop.gang.base import GangBackend
from tfop.tools.rbac import canonical_rule, operator_rules

ENABLE = "--enable-gang-scheduling"
NAME = "--gang-scheduler-name"
_FALSE = {"false", "0", "no", "off"}
# Named in server-side apply conflicts: re-applying `tfop manifests` rendered with
# other gang flags than the last `tfop gang` run then says who set the fields.
FIELD_MANAGER = "tfop-gang"


def _units(args: list[str]) -> list[tuple[str, ...]]:
    """Group args so a flag and its separate value stay together."""
    units, i = [], 0
    while i < len(args):
        if args[i] == NAME and i + 1 < len(args):
            units.append((NAME, args[i + 1]))
            i += 2
        else:
            units.append((args[i],))
            i += 1
    return units


def _is_gang_unit(unit: tuple[str, ...]) -> bool:
    head = unit[0]
    return head in (ENABLE, NAME) or head.startswith(ENABLE + "=") or head.startswith(NAME + "=")


def gang_state(args: list[str]) -> tuple[bool, str | None]:
    """(enabled, gang scheduler name) as the operator would parse these args."""
    enabled, name = False, None
    for unit in _units(args):
        head = unit[0]
        if head == ENABLE:
            enabled = True
        elif head.startswith(ENABLE + "="):
            enabled = head.split("=", 1)[1].lower() not in _FALSE
        elif head == NAME:
            name = unit[1]
        elif head.startswith(NAME + "="):
            name = head.split("=", 1)[1]
    return enabled, name


def toggle_args(args: list[str], enable: bool, name: str | None) -> list[str]:
    """The container args with gang scheduling on (with `name`) or off.

    Unchanged when already in the wanted state, so a second run is a no-op. New
    flags go right after the `run` subcommand, where `tfop manifests` puts them.
    """
    enabled, current = gang_state(args)
    if enable and enabled and current == name:
        return list(args)
    if not enable and not enabled and current is None:
        return list(args)
    units = _units(args)
    first = next((i for i, u in enumerate(units) if _is_gang_unit(u)), None)
    kept = [u for u in units if not _is_gang_unit(u)]
    if enable:
        new = [(ENABLE,)] + ([(NAME, name)] if name else [])
        if first is None:
            at = next((i + 1 for i, u in enumerate(kept) if u == ("run",)), 0)
        else:
            at = sum(1 for u in units[:first] if not _is_gang_unit(u))
        kept[at:at] = new
    return [tok for unit in kept for tok in unit]


def toggle_rules(rules: list[Mapping[str, Any]], enable: bool,
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
    before, after = _units(old), _units(new)
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


def describe_rules(old: list[Mapping[str, Any]], new: list[Mapping[str, Any]]) -> list[str]:
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


def container_index(deployment: Any, target: Target) -> int:
    containers = deployment.spec.template.spec.containers
    wanted = target.container or target.deployment
    for i, c in enumerate(containers):
        if c.name == wanted:
            return i
    if target.container:
        raise ValueError(f"Deployment {target.namespace}/{target.deployment} has no container "
                         f"{target.container!r}")
    return 0


def _resolver(api_client: Any) -> Callable[[str | None], GangBackend]:
    """Name -> backend; `auto` is detected from the cluster's CRDs, as the operator would."""
    from kubernetes import client

    from tfop.tools.manifests import resolve_backend

    def resolve(name: str | None) -> GangBackend:
        installed = None
        if name == "auto":
            crds = client.ApiextensionsV1Api(api_client).list_custom_resource_definition().items
            installed = {c.metadata.name for c in crds}
        return resolve_backend(name, installed_crds=installed)
    return resolve


def apply_gang(api_client: Any, enable: bool, name: str | None, target: Target = Target(),
               resolve: Callable[[str | None], GangBackend] | None = None,
               dry_run: bool = False) -> list[str]:
    """Patch the Deployment's args and the ClusterRole's rules; return the human diff.

    Both patches are JSON patches that first `test` the old value, so a
    concurrent edit makes the command fail instead of being overwritten.
    """
    from kubernetes import client

    if resolve is None:
        resolve = _resolver(api_client)
    apps = client.AppsV1Api(api_client)
    rbac_api = client.RbacAuthorizationV1Api(api_client)
    dep = apps.read_namespaced_deployment(target.deployment, target.namespace)
    idx = container_index(dep, target)
    old_args = list(dep.spec.template.spec.containers[idx].args or [])
    was_enabled, old_name = gang_state(old_args)
    new_args = toggle_args(old_args, enable, name if enable else None)

    role = rbac_api.read_cluster_role(target.cluster_role)
    old_rules = [api_client.sanitize_for_serialization(r) for r in role.rules or []]
    rules = old_rules
    # Switching backends or disabling: drop what the old backend added. A disable
    # naming a backend also cleans up after an earlier run that patched only the args.
    if was_enabled or (not enable and name is not None):
        rules = toggle_rules(rules, False, resolve(old_name if was_enabled else name))
    if enable:
        rules = toggle_rules(rules, True, resolve(name))
    if [canonical_rule(r) for r in rules] == [canonical_rule(r) for r in old_rules]:
        rules = old_rules  # keep the role byte-for-byte when nothing changed

    dep_label = f"Deployment {target.namespace}/{target.deployment}"
    role_label = f"ClusterRole {target.cluster_role}"
    report = []
    args_text = describe_args(old_args, new_args)
    if args_text:
        report.append(f"{dep_label}: {args_text}")
        if not dry_run:
            path = f"/spec/template/spec/containers/{idx}/args"
            op = "replace" if dep.spec.template.spec.containers[idx].args is not None else "add"
            patch = ([{"op": "test", "path": path, "value": old_args}] if op == "replace" else [])
            apps.patch_namespaced_deployment(target.deployment, target.namespace,
                                             patch + [{"op": op, "path": path, "value": new_args}],
                                             field_manager=FIELD_MANAGER)
    else:
        report.append(f"{dep_label}: unchanged")
    rule_lines = describe_rules(old_rules, rules)
    if rule_lines and role.aggregation_rule is not None:
        # Its rules belong to the controller-manager, which would undo this patch.
        report.append(f"{role_label}: not patched: it has an aggregationRule; apply "
                      "rbac/gang-<backend>.yaml (its own role and binding) instead")
    elif rule_lines:
        report += [f"{role_label}: {line}" for line in rule_lines]
        if not dry_run:
            op = "replace" if role.rules is not None else "add"
            patch = [{"op": "test", "path": "/rules", "value": old_rules}] if op == "replace" else []
            rbac_api.patch_cluster_role(target.cluster_role,
                                        patch + [{"op": op, "path": "/rules", "value": rules}],
                                        field_manager=FIELD_MANAGER)
    else:
        report.append(f"{role_label}: unchanged")
    if not args_text and not rule_lines:
        state = f"enabled ({gang_state(new_args)[1] or 'default backend'})" if enable else "disabled"
        report.append(f"nothing to do: gang scheduling already {state}")
    return report
