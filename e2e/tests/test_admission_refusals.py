"""What tfop does when admission refuses what it creates for a gang, on the real apiserver.

Volcano v1.14.1's real webhook (test_volcano_webhook.py) refuses neither tfop's probe nor pods of
a Pending PodGroup; the releases of 2022-2025 refused pods whose PodGroup they could not get, those
before refused pods of a Pending group, and the PodGroup webhook refuses a group whose queue does
not exist. Those refusals are made here by ValidatingAdmissionPolicies (CEL, evaluated by the
apiserver's own admission chain, dry runs included), each bound to one test's namespace.
"""
from __future__ import annotations

import contextlib
import json
import time

import pytest

from e2e.tests.gang_helpers import (
    Api,
    condition,
    gpu_pool,
    new_namespace,
    operator,
    phases,
    prepare_job,
    seed,
    submit,
    wait_all_running,
    wait_until,
)

pytestmark = pytest.mark.cluster
GROUP_NAME = "scheduling.k8s.io/group-name"
PROBE = "tfop-admission-probe"
DENY_LABEL = "tfop.test/deny-gang-pods"


@contextlib.contextmanager
def policy(cluster, ns: str, resource: tuple[str, str, str], expression: str, message: str):
    """A ValidatingAdmissionPolicy denying CREATE of `resource` (group, version, plural) in `ns`
    unless `expression` holds."""
    group, version, plural = resource
    name = f"tfop-test-{ns}"
    cluster.apply([
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
         "metadata": {"name": name},
         "spec": {"failurePolicy": "Fail",
                  "matchConstraints": {"resourceRules": [{"apiGroups": [group], "apiVersions": [version],
                                                          "operations": ["CREATE"], "resources": [plural]}]},
                  "validations": [{"expression": expression, "message": message}]}},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
         "metadata": {"name": name},
         "spec": {"policyName": name, "validationActions": ["Deny"],
                  "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}}}},
    ])
    try:
        yield name
    finally:
        cluster.kubectl("delete", "validatingadmissionpolicybinding,validatingadmissionpolicy", name,
                        "--ignore-not-found", check=False)


def fitting_gang(ns: str, p) -> dict:
    return prepare_job(seed("003-0"), ns, p)


def wait_policy_active(cluster, ns: str, pod: dict) -> None:
    """Policies take effect asynchronously: wait until a dry run of `pod` is denied."""
    wait_until(lambda: cluster.kubectl("create", "--dry-run=server", "-n", ns, "-f", "-", check=False,
                                       input=json.dumps(pod)).returncode != 0,
               20, "the admission policy to take effect")


def probe_like(ns: str, name: str = PROBE, group: str = "tfop-admission-probe-no-such-group") -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns,
                                                            "annotations": {GROUP_NAME: group}},
            "spec": {"schedulerName": "volcano", "containers": [{"name": "c", "image": "pause"}]}}


def test_probe_refused_so_pods_wait_for_admission(cluster):
    """Like the 2022-2025 webhooks: a pod naming a PodGroup that does not exist is refused. tfop's
    probe is, so no pod is created until Volcano admits the group; the gang still starts."""
    api = Api(cluster)
    ns = new_namespace(cluster, "probe-refused")
    expression = f"!(has(object.metadata.annotations) && '{GROUP_NAME}' in object.metadata.annotations && " \
                 f"object.metadata.annotations['{GROUP_NAME}'] == 'tfop-admission-probe-no-such-group')"
    with policy(cluster, ns, ("", "v1", "pods"), expression,
                'failed to get PodGroup: podgroups "tfop-admission-probe-no-such-group" not found'), \
            gpu_pool(cluster, api, ns) as p:
        wait_policy_active(cluster, ns, probe_like(ns))
        with operator(cluster, ns, "volcano") as op:
            job = fitting_gang(ns, p)
            name = job["metadata"]["name"]
            submit(cluster, job)
            early: list[str | None] = []
            added, deadline = False, time.monotonic() + 90
            while not all_running_now(api, ns, name, 5):
                assert time.monotonic() < deadline, f"the gang did not start: {phases(api, ns, name)}"
                pods = phases(api, ns, name)  # before the group: a Pending read after was Pending then
                group = api.group("volcano", ns, name)
                phase = None if group is None else (group.get("status") or {}).get("phase", "")
                if phase in (None, "", "Pending") and pods:
                    early.append(phase)
                if not added and time.monotonic() > deadline - 85:  # 5 s without the GPUs first
                    p.add(4, gpus=8)
                    added = True
                time.sleep(0.2)
            log = op.log_path.read_text(errors="replace")
        assert "dry-run pod of a volcano gang was refused" in log, log[-2000:]
        assert not early, f"pods existed while the PodGroup was {early[:3]}"
        assert condition(api.tfjob(ns, name), "Failed") is None


def all_running_now(api: Api, ns: str, name: str, n: int) -> bool:
    seen = phases(api, ns, name)
    return len(seen) == n and all(v.split("@")[0] == "Running" for v in seen.values())


def test_refused_podgroup_is_explained_and_tried_again(cluster):
    """Like Volcano's PodGroup webhook for a queue that does not exist: the job gets a Warning Event
    and status.gang saying why, is not Failed, creates no pods; once admission lets the group
    through, the gang starts."""
    api = Api(cluster)
    ns = new_namespace(cluster, "group-refused")
    refusal = policy(cluster, ns, ("scheduling.volcano.sh", "v1beta1", "podgroups"), "false",
                     "unable to find queue: research")
    with gpu_pool(cluster, api, ns) as p, operator(cluster, ns, "volcano"):
        p.add(4, gpus=8)
        with refusal:
            group = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
                     "metadata": {"name": "x", "namespace": ns}, "spec": {"minMember": 1}}
            wait_policy_active(cluster, ns, group)
            job = fitting_gang(ns, p)
            name = job["metadata"]["name"]
            submit(cluster, job)
            events = wait_until(lambda: api.events(ns, "GangGroupRefused"), 20, "a GangGroupRefused Event")
            assert "unable to find queue: research" in events[0]["message"]
            def refused_gang():
                gang = ((api.tfjob(ns, name) or {}).get("status") or {}).get("gang") or {}
                return gang if gang.get("reason") == "GroupRefused" else None
            gang = wait_until(refused_gang, 20, "status.gang.reason GroupRefused")
            assert "unable to find queue: research" in gang["message"]
            assert not phases(api, ns, name), "no pods without their PodGroup"
            assert condition(api.tfjob(ns, name), "Failed") is None
        wait_all_running(api, job, timeout=60)  # tried again within GROUP_RETRY_SECONDS (30 s)
        assert len(api.events(ns, "GangGroupRefused")) == 1, "one Event, not one per retry"


def test_pods_refused_later_switch_to_waiting_without_failing(cluster):
    """Like the webhooks before 2022, installed after tfop started: pods of an unadmitted group are
    refused ("podgroup phase is Pending"). tfop switches to waiting for admission, fails no job, and
    creates the pods again once admission allows them."""
    api = Api(cluster)
    ns = new_namespace(cluster, "pods-refused")
    cluster.kubectl("label", "namespace", ns, f"{DENY_LABEL}=true")
    expression = (f"!(has(namespaceObject.metadata.labels) && '{DENY_LABEL}' in namespaceObject.metadata.labels) "
                  f"|| object.metadata.name == '{PROBE}' || !has(object.metadata.annotations) "
                  f"|| !('{GROUP_NAME}' in object.metadata.annotations)")
    with policy(cluster, ns, ("", "v1", "pods"), expression,
                "failed to create pod as the podgroup phase is Pending"), gpu_pool(cluster, api, ns) as p:
        wait_policy_active(cluster, ns, probe_like(ns, name="denied", group="g"))
        p.add(4, gpus=8)
        with operator(cluster, ns, "volcano") as op:
            job = fitting_gang(ns, p)
            name = job["metadata"]["name"]
            submit(cluster, job)
            wait_until(lambda: "refuses pods of unadmitted groups" in op.log_path.read_text(errors="replace"),
                       30, "tfop to switch to waiting for admission")
            assert condition(api.tfjob(ns, name), "Failed") is None
            assert not api.events(ns, "InvalidPodTemplate")
            cluster.kubectl("label", "namespace", ns, f"{DENY_LABEL}-")
            wait_all_running(api, job, timeout=60)
            assert condition(api.tfjob(ns, name), "Failed") is None
