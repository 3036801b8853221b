"""Install paths on the real control plane, typed as users type them.

`kubectl apply --server-side -k manifests/overlays/standalone` and
`helm template charts/tfop ... | kubectl apply --server-side -f -`: the apiserver
takes every object, the Deployment's controller makes its two pods (kwok only
fakes them: nothing runs the image), and an operator holding nothing but the
chart's namespaced RBAC (Roles in the watched namespace, a ClusterRole of
cluster-scoped reads) runs a gang job there.

The session cluster is shared: the ClusterRole `tfop` other tests' operators use
is changed here, so the marker of what was deployed last is dropped and the next
operator applies its own manifests again; the Deployments are deleted.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from unittest import mock

import pytest
import yaml

from e2e import build
from e2e.tests.lifecycle_helpers import Env, replica, tfjob
from e2e.harness.tfop_operator import DEPLOYED_GANG, OperatorProcess, wait_established
from tfop.tools.deploy import rbac
from tfop.tools.deploy.manifests import deploy_objects

pytestmark = [pytest.mark.cluster, pytest.mark.builds("helm")]
ROOT = Path(__file__).resolve().parents[2]
PODGROUPS = "podgroups.scheduling.volcano.sh"


def _helm() -> str:
    try:
        return str(build.built_binary("helm"))
    except build.BuildError as err:
        message = f"helm could not be built: {err}"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message)


def _forget_deployed(cluster) -> None:
    """The ClusterRole `tfop` no longer holds what the last deploy_manifests() put there."""
    if hasattr(cluster, DEPLOYED_GANG):
        delattr(cluster, DEPLOYED_GANG)


def _live(cluster, obj: dict) -> dict:
    meta = obj["metadata"]
    ns = ["-n", meta["namespace"]] if meta.get("namespace") else []
    group = obj["apiVersion"].rpartition("/")[0]
    kind = f"{obj['kind'].lower()}.{group}" if group else obj["kind"].lower()
    return json.loads(cluster.kubectl("get", kind, meta["name"], *ns, "-o", "json").stdout)


def _contains(live, want) -> bool:
    """Whether the apiserver's object holds everything rendered (it adds defaults and metadata)."""
    if isinstance(want, dict):
        return isinstance(live, dict) and all(k in live and _contains(live[k], v) for k, v in want.items())
    if isinstance(want, list):
        return isinstance(live, list) and len(live) == len(want) and all(map(_contains, live, want))
    return live == want


def _assert_applied(cluster, objs: list[dict]) -> None:
    for obj in objs:
        if obj["kind"] == "CustomResourceDefinition":
            wait_established(cluster, obj["metadata"]["name"])
            continue
        live = _live(cluster, obj)
        assert _contains(live, {k: v for k, v in obj.items() if k != "metadata"}), (obj, live)
        assert _contains(live["metadata"], obj["metadata"]), (obj["metadata"], live["metadata"])


def _wait_pods_created(cluster, namespace: str, replicas: int, timeout: float = 90) -> dict:
    """The Deployment's ReplicaSet has created its pods: the pod template passed admission."""
    deadline = time.monotonic() + timeout
    while True:
        dep = json.loads(cluster.kubectl("get", "deployment", "tfop", "-n", namespace, "-o", "json").stdout)
        sets = json.loads(cluster.kubectl("get", "replicasets", "-n", namespace, "-l",
                                          "app.kubernetes.io/name=tfop", "-o", "json").stdout)["items"]
        if sum((s.get("status") or {}).get("replicas", 0) for s in sets) == replicas:
            return dep
        if time.monotonic() > deadline:
            pytest.fail(f"the Deployment's pods were not created in {timeout}s: {dep.get('status')}\n"
                        + cluster.kubectl("get", "events", "-n", namespace).stdout)
        time.sleep(0.5)


def _delete_deployment(cluster, namespace: str) -> None:
    cluster.kubectl("delete", "deployment", "tfop", "-n", namespace, "--ignore-not-found", "--wait=true",
                    check=False, timeout=120)


def test_kustomize_standalone(cluster, request):
    request.addfinalizer(lambda: _delete_deployment(cluster, "kubeflow"))
    request.addfinalizer(lambda: _forget_deployed(cluster))
    # --force-conflicts: on this shared cluster other tests' tools may have set fields of the same objects.
    out = cluster.kubectl("apply", "--server-side", "--force-conflicts", "-k",
                          str(ROOT / "manifests" / "overlays" / "standalone"), timeout=300)
    want = deploy_objects(create_namespace=True)
    assert out.stdout.count("serverside-applied") == len(want), out.stdout
    _assert_applied(cluster, want)
    role = _live(cluster, next(o for o in want if o["kind"] == "ClusterRole"))
    assert role["rules"] == rbac.operator_rules(None)
    dep = _wait_pods_created(cluster, "kubeflow", 2)
    assert dep["spec"]["template"]["spec"]["containers"][0]["args"] == ["run", "--all-namespaces", "--leader-elect"]


class _NamespacedOperator(OperatorProcess):
    """`tfop run` as the ServiceAccount the chart made in `namespace`, with the Deployment's flags; its
    manifests are the chart's, already applied (not deploy_manifests())."""

    def __init__(self, cluster, namespace: str, deployment_args: list[str]):
        super().__init__(cluster, [namespace], gang_scheduler_name="volcano")
        self.deployment_args = deployment_args

    def args(self) -> list[str]:
        ns = self.namespaces[0]
        kubeconfig = self.cluster.service_account_kubeconfig(ns, "tfop")
        return [sys.executable, "-m", "tfop", *self.deployment_args, "--leader-elect-namespace", ns,
                "--health-probe-bind-address", "0", "--metrics-bind-address", "0", "--kubeconfig", str(kubeconfig)]

    def start(self) -> "_NamespacedOperator":
        with mock.patch("e2e.harness.tfop_operator.deploy_manifests"):
            return super().start()


def test_helm_template_namespaced_gang(cluster, namespace, request):
    """The chart for a namespaced gang install applies; an operator with only its rights runs a gang job."""
    helm = _helm()
    request.addfinalizer(lambda: _delete_deployment(cluster, namespace))
    request.addfinalizer(lambda: _forget_deployed(cluster))
    text = subprocess.run([helm, "template", "tfop", str(ROOT / "charts" / "tfop"), "--namespace", namespace,
                           "--include-crds", "--set", f"gang.schedulerName=volcano,watchNamespaces={{{namespace}}}"],
                          check=True, capture_output=True, text=True).stdout
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=text, timeout=300)
    want = deploy_objects(True, "volcano", namespace=namespace, watch_namespaces=[namespace])
    assert sorted(o["kind"] for o in yaml.safe_load_all(text) if o) == sorted(o["kind"] for o in want)
    _assert_applied(cluster, want)
    dep = _wait_pods_created(cluster, namespace, 2)
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args == ["run", "--enable-gang-scheduling", "--gang-scheduler-name", "volcano",
                    "--namespace", namespace, "--leader-elect"]
    _delete_deployment(cluster, namespace)  # its fake pods would hold the Lease's name for nothing

    op = _NamespacedOperator(cluster, namespace, args)
    request.addfinalizer(op.stop)
    op.start()
    env = Env(cluster, namespace, op)
    env.apply(tfjob("gang", {"Worker": replica(2)}))
    env.wait("the PodGroup and both pods", lambda: (
        env.kubectl("get", PODGROUPS, "gang", check=False).returncode == 0
        and len(env.pods("gang")) == 2), timeout=90, job="gang")
    log = Path(op.log_path).read_text(errors="replace")
    # No RBAC refusal but the cluster-wide reads that only explain a waiting gang (nodes, bound pods,
    # Volcano Queues), which a namespaced install does not grant: each said once, as a warning.
    # (A 403 "cannot find RESTMapping ... TFJob" may come too: the apiserver's ownerReference check
    # learns a CRD just created up to ~10 s late, and tfop retries it.)
    refused = [line for line in log.splitlines() if 'forbidden: User "system:serviceaccount:' in line]
    explained = [line for line in refused if re.search(r"WARNING tfop\.informer: cannot list (nodes|pods|queues) "
                                                       r"\(all namespaces\)", line)]
    assert refused == explained and len(explained) == len({line.split(": cannot list ")[1].split()[0]
                                                           for line in explained}), op.log_tail()
