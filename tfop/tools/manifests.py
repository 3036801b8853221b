"""`tfop manifests`: everything needed to run the operator, as plain objects.

Rendered from templates/deploy/*.yaml.j2; the ClusterRole's rules come from
tfop.tools.rbac so the deploy manifests, rbac/ and `tfop doctor` all agree.
"""
from __future__ import annotations

import json
from typing import Any

import jinja2
import yaml

from tfop.build.resources import resource_path
from tfop.core.settings import DEFAULT_DEPLOYMENT, DEFAULT_IMAGE, DEFAULT_NAMESPACE
from tfop.gang.base import GangBackend
from tfop.tools import rbac

# `kubectl apply -f` creates objects in file order; each kind needs the ones before it.
KIND_ORDER = ("CustomResourceDefinition", "Namespace", "ServiceAccount",
              "ClusterRole", "ClusterRoleBinding", "Deployment")
TEMPLATES = ("namespace", "serviceaccount", "clusterrole", "clusterrolebinding", "deployment")
UID = 65532  # matches the Dockerfile's USER

APPLY_NOTE = (
    "Apply with: kubectl apply --server-side -f <this file>\n"
    "The TFJob CRD is larger than the 256 KiB that client-side apply's\n"
    "last-applied-configuration annotation may hold, so plain `kubectl apply` fails on it.\n"
    "A conflict with manager \"tfop-gang\" means `tfop gang enable|disable` changed the\n"
    "args or rules since: render with the same gang flags, or add --force-conflicts to undo it."
)


def resolve_backend(name: str | None, scheduler_name: str | None = None,
                    installed_crds: set[str] | None = None) -> GangBackend:
    """The gang backend for a --gang-scheduler-name value; ValueError saying why if none.

    `auto` needs the cluster's CRDs; offline (installed_crds None) it is refused so
    the manifests grant exactly one backend's rules rather than every backend's.
    """
    from tfop.gang import registry

    if name == registry.AUTO and installed_crds is None:
        raise ValueError("--gang-scheduler-name auto picks a backend from the CRDs installed in "
                         "a cluster; name the backend here so the manifests grant exactly its "
                         f"rules (one of: {', '.join(registry.backend_names())})")
    backend, _why = registry.load_backend(name, scheduler_name, installed_crds=installed_crds)
    return backend


def operator_args(enable_gang: bool, gang_scheduler_name: str | None,
                  scheduler_name: str | None) -> list[str]:
    args = ["run"]
    if enable_gang:
        args.append("--enable-gang-scheduling")
        if gang_scheduler_name:
            args += ["--gang-scheduler-name", gang_scheduler_name]
    if scheduler_name:
        args += ["--scheduler-name", scheduler_name]
    return args + ["--all-namespaces"]


def _crds() -> list[dict]:
    from tfop.tools.crd import load_crd

    crd = load_crd()
    return list(crd) if isinstance(crd, list) else [crd]


def _env() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(resource_path("templates", "deploy"))),
        undefined=jinja2.StrictUndefined,  # a missing variable is a bug, not an empty string
        keep_trailing_newline=True,
    )


def render_manifests(enable_gang: bool = False, gang_scheduler_name: str | None = None,
                     scheduler_name: str | None = None, namespace: str = DEFAULT_NAMESPACE,
                     image: str = DEFAULT_IMAGE, include_crds: bool = True) -> list[dict]:
    """CRDs, Namespace, ServiceAccount, ClusterRole, ClusterRoleBinding, Deployment, in apply order."""
    backend = resolve_backend(gang_scheduler_name, scheduler_name) if enable_gang else None
    name = DEFAULT_DEPLOYMENT
    selector = {"app.kubernetes.io/name": name, "app.kubernetes.io/component": "operator"}
    context: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "image": image,
        "uid": UID,
        "selector": selector,
        "labels": {**rbac.LABELS, **selector},
        "rules": rbac.operator_rules(backend),
        "args": operator_args(enable_gang, gang_scheduler_name, scheduler_name),
    }
    env = _env()
    objs: list[dict] = _crds() if include_crds else []
    for template in TEMPLATES:
        text = env.get_template(f"{template}.yaml.j2").render(**context)
        objs += [o for o in yaml.safe_load_all(text) if o]
    return sorted(objs, key=lambda o: KIND_ORDER.index(o["kind"]))


def dump(objs: list[dict], output: str = "yaml") -> str:
    if output == "json":
        # kubectl accepts a v1 List and applies its items in order.
        return json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}, indent=2) + "\n"
    header = "".join(f"# {line}\n" for line in APPLY_NOTE.splitlines())
    return header + yaml.safe_dump_all(objs, sort_keys=False, explicit_start=True)
