"""`tfop manifests`: everything needed to run the operator, as plain objects.

Filled in from templates/deploy/*.yaml.j2; the ClusterRole's rules come from
tfop.tools.deploy.rbac so the deploy manifests, rbac/ and `tfop doctor` all agree.
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

import jinja2
import yaml

from tfop.children.resources import resource_path
from tfop.core.settings import DEFAULT_DEPLOYMENT, DEFAULT_IMAGE, DEFAULT_NAMESPACE
from tfop.gang.registry import backend_from_flags
from tfop.tools.deploy import rbac
from tfop.tools.deploy.operator_args import run_args

# `kubectl apply -f` creates objects in file order; each kind needs the ones before it.
KIND_ORDER = ("CustomResourceDefinition", "Namespace", "ServiceAccount",
              "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Deployment", "PodMonitor")
TEMPLATES = ("namespace", "serviceaccount", "clusterrole", "clusterrolebinding", "deployment", "podmonitor")
UID = 65532  # matches the Dockerfile's USER
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")

APPLY_NOTE = (
    "Apply with: kubectl apply --server-side -f <this file>\n"
    "The TFJob CRD is larger than the 256 KiB that client-side apply's\n"
    "last-applied-configuration annotation may hold, so plain `kubectl apply` fails on it.\n"
    "The operator's namespace must exist (kubectl create namespace kubeflow) unless this\n"
    "was printed with --create-namespace.\n"
    "A conflict with manager \"tfop-gang\" means `tfop gang enable|disable` changed the\n"
    "args or rules since: run `tfop manifests` with the gang flags it set, or add\n"
    "--force-conflicts to undo it."
)


def _crds() -> list[dict]:
    from tfop.tools.offline.crd import load_crd

    crd = load_crd()
    return list(crd) if isinstance(crd, list) else [crd]


def _env() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(resource_path("templates", "deploy"))),
        undefined=jinja2.StrictUndefined,  # a missing variable is a bug, not an empty string
        keep_trailing_newline=True,
    )


def operator_args(enable_gang: bool, gang_scheduler_name: str | None, scheduler_name: str | None,
                  watch_namespaces: Sequence[str] = ()) -> list[str]:
    """The Deployment's args: run_args(), with `--namespace NS` per watched namespace in place of
    `--all-namespaces` when the install is namespaced."""
    args = run_args(enable_gang, gang_scheduler_name, scheduler_name)
    if not watch_namespaces:
        return args
    at = args.index("--all-namespaces")
    return args[:at] + [a for ns in watch_namespaces for a in ("--namespace", ns)] + args[at + 1:]


def watched(namespaces: Iterable[str]) -> tuple[str, ...]:
    """The namespaces to watch, each once, in the order given; ValueError on a name that cannot be one."""
    out: dict[str, None] = {}
    for ns in namespaces:
        if not (len(ns) <= 63 and DNS_LABEL.fullmatch(ns)):
            raise ValueError(f"{ns!r} is not a namespace name (a DNS label: a-z, 0-9 and -, at most 63)")
        out[ns] = None
    return tuple(out)


def deploy_objects(enable_gang: bool = False, gang_scheduler_name: str | None = None,
                   scheduler_name: str | None = None, namespace: str = DEFAULT_NAMESPACE,
                   image: str = DEFAULT_IMAGE, include_crds: bool = True, create_namespace: bool = False,
                   watch_namespaces: Sequence[str] = (), pod_monitor: bool = False) -> list[dict]:
    """The objects to apply, in apply order: CRDs, the Namespace (only with create_namespace: it is
    usually shared by all of Kubeflow, and `kubectl delete` of this output must not remove it),
    ServiceAccount, ClusterRole and ClusterRoleBinding, Roles and RoleBindings, Deployment.

    With watch_namespaces the operator watches only those and its rights there are Roles; the
    ClusterRole keeps only the cluster-scoped reads (the gang's PriorityClasses and CRDs), and is
    left out when there are none. A --gang-scheduler-name implies gang scheduling, as in `tfop
    run`. There is no cluster here, so `auto` is a ValueError: the roles must grant one backend's
    rules, and which one is only known where the CRDs are. pod_monitor adds a Prometheus Operator
    PodMonitor scraping the Deployment's `metrics` port.
    """
    backend, _why = backend_from_flags(enable_gang, gang_scheduler_name, scheduler_name)
    watch = watched(watch_namespaces)
    rules = rbac.operator_rules(backend)
    if watch:
        rules = rbac.split_by_scope(rules)[1]
    name = DEFAULT_DEPLOYMENT
    selector = {"app.kubernetes.io/name": name, "app.kubernetes.io/component": "operator"}
    context: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "image": image,
        "uid": UID,
        "selector": selector,
        "labels": {**rbac.LABELS, **selector},
        "base_labels": rbac.LABELS,
        "rules": rules,
        "args": operator_args(enable_gang, gang_scheduler_name, scheduler_name, watch),
    }
    templates = [t for t in TEMPLATES if (t != "namespace" or create_namespace)
                 and (rules or not t.startswith("clusterrole")) and (t != "podmonitor" or pod_monitor)]
    env = _env()
    objs: list[dict] = _crds() if include_crds else []
    for template in templates:
        text = env.get_template(f"{template}.yaml.j2").render(**context)
        objs += [o for o in yaml.safe_load_all(text) if o]
    objs += rbac.namespaced_role_objects(watch, backend, namespace)
    objs += rbac.leader_election_objects(namespace)  # the Deployment runs two replicas with --leader-elect
    return sorted(objs, key=lambda o: KIND_ORDER.index(o["kind"]))


def dump(objs: list[dict], output: str = "yaml") -> str:
    if output == "json":
        # kubectl accepts a v1 List and applies its items in order.
        return json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}, indent=2) + "\n"
    header = "".join(f"# {line}\n" for line in APPLY_NOTE.splitlines())
    return header + yaml.safe_dump_all(objs, sort_keys=False, explicit_start=True)
