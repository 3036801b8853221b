"""One tenant's job never inherits another's pods, and every refusal is explained, on the real control plane.

Each test has its own namespace and operator (ServiceAccount and ClusterRole
from `tfop manifests`). Pods end through kwok's tfop-test-exit stage.
"""
from __future__ import annotations

import json

import pytest

from e2e.tests.lifecycle_helpers import Env, condition, is_true, replica, tfjob
from tfop.core.outcomes import NAMESPACE_TERMINATING, POD_SECURITY, QUOTA, FailedWrite, classify
from tfop.core.plan import Plan

pytestmark = pytest.mark.cluster


def uid(env: Env, name: str) -> str:
    return env.job(name)["metadata"]["uid"]


def controller_uid(obj: dict) -> str | None:
    return next((r["uid"] for r in obj["metadata"].get("ownerReferences") or [] if r.get("controller")), None)


def succeeded_with_own_pod(env: Env, name: str) -> None:
    """Succeeded, and the worker that made it so is this job's own (not an earlier job's of the name)."""
    job = env.wait_condition(name, "Succeeded", timeout=60)
    owner = controller_uid(env.pod(f"{name}-worker-0") or {"metadata": {}})
    assert owner == job["metadata"]["uid"], env.msg(name)


def test_a_job_created_again_under_its_name_runs_its_own_pods(env):
    job = tfjob("again", {"Worker": replica(1, exit_code=0, exit_delay="2s")})
    env.apply(job)
    succeeded_with_own_pod(env, "again")
    for _ in range(10):  # the old job's Succeeded worker is still there while the new job starts
        old = uid(env, "again")
        env.kubectl("delete", "tfjob", "again", "--wait=false")
        env.wait("the old job gone", lambda: (env.job("again") or {}).get("metadata", {}).get("uid") != old)
        env.apply(job)
        succeeded_with_own_pod(env, "again")


def test_an_orphaned_earlier_job_is_not_inherited(env):
    job = tfjob("orphaned", {"Worker": replica(1, exit_code=0, exit_delay="2s")})
    env.apply(job)
    succeeded_with_own_pod(env, "orphaned")
    old_pod = env.pod("orphaned-worker-0")["metadata"]["uid"]
    env.kubectl("delete", "tfjob", "orphaned", "--cascade=orphan")
    env.wait("the orphan kept", lambda: env.pod("orphaned-worker-0") and not controller_uid(env.pod("orphaned-worker-0")))
    env.apply(job)
    succeeded_with_own_pod(env, "orphaned")
    assert env.pod("orphaned-worker-0")["metadata"]["uid"] != old_pod


def test_a_name_held_by_a_foreign_pod_is_explained_then_freed(env):
    foreign = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "held-worker-0"},
               "spec": {"containers": [{"name": "web", "image": "registry.example/web:1"}]}}
    env.apply(foreign)
    env.apply(tfjob("held", {"Worker": replica(1)}))
    job = env.wait_job("held", lambda j: is_true(j, "Blocked"), "Blocked")
    blocked = condition(job, "Blocked")
    assert blocked["reason"] == "NameTaken", env.msg("held")
    assert "pod held-worker-0 belongs to no controller" in blocked["message"], env.msg("held")
    claims = [e["message"] for e in env.events("held") if e["reason"] == "SuccessfulCreate"]
    assert not any("pod held-worker-0" in m for m in claims), claims
    assert len([e for e in env.events("held") if e["reason"] == "NameTaken"]) == 1
    env.kubectl("delete", "pod", "held-worker-0", "--wait=true")
    env.wait_pods_running("held", {"held-worker-0"}, timeout=90)
    env.wait_job("held", lambda j: condition(j, "Blocked") is None, "Blocked cleared")
    assert controller_uid(env.pod("held-worker-0")) == uid(env, "held")


def test_pod_security_fails_the_job_with_the_policys_words(env):
    env.kubectl("label", "namespace", env.ns, "pod-security.kubernetes.io/enforce=restricted", namespaced=False)
    spec = replica(1)
    spec["template"]["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    env.apply(tfjob("privileged", {"Worker": spec}))
    job = env.wait_condition("privileged", "Failed")
    assert "violates PodSecurity" in condition(job, "Failed")["message"], env.msg("privileged")
    assert [e["reason"] for e in env.events("privileged") if e["type"] == "Warning"] == ["PodSecurity"]
    assert not env.pods("privileged")


def test_a_small_quota_blocks_until_it_is_raised(env):
    quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "pods"}, "spec": {"hard": {"pods": "1"}}}
    env.apply(quota)
    env.apply(tfjob("quota", {"Worker": replica(2)}))
    job = env.wait_job("quota", lambda j: is_true(j, "Blocked"), "Blocked by the quota")
    blocked = condition(job, "Blocked")
    assert blocked["reason"] == "QuotaExceeded", env.msg("quota")
    assert blocked["message"].startswith("ResourceQuota pods lacks 1 pods for pod quota-worker-"), blocked["message"]
    quota["spec"]["hard"]["pods"] = "4"
    env.apply(quota)
    env.wait_pods_running("quota", {"quota-worker-0", "quota-worker-1"}, timeout=90)
    env.wait_job("quota", lambda j: condition(j, "Blocked") is None and is_true(j, "Running"), "running, unblocked")


def test_the_refusals_are_told_apart_in_the_apiservers_own_words(cluster, env):
    """What the apiserver answers the operator's ServiceAccount, classified as the core does."""
    def refusal(pod: dict) -> FailedWrite:
        result = env.kubectl("create", "-f", "-", "--as", "system:serviceaccount:kubeflow:tfop",
                             input=json.dumps(pod), check=False)
        assert result.returncode != 0, result.stdout
        return FailedWrite("create", "Pod", pod["metadata"]["name"], 403, result.stderr)

    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe"},
           "spec": {"containers": [{"name": "c", "image": "x", "securityContext": {"privileged": True}}]}}
    env.kubectl("label", "namespace", env.ns, "pod-security.kubernetes.io/enforce=restricted", namespaced=False)
    assert classify(refusal(pod), Plan()) == POD_SECURITY
    env.kubectl("label", "namespace", env.ns, "pod-security.kubernetes.io/enforce-", namespaced=False)
    env.apply({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "none"}, "spec": {"hard": {"pods": "0"}}})
    plain = {**pod, "spec": {"containers": [{"name": "c", "image": "x"}]}}
    assert classify(refusal(plain), Plan()) == QUOTA
    env.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "hold", "finalizers": ["tfop.test/hold"]}})
    cluster.kubectl("delete", "namespace", env.ns, "--wait=false")
    try:
        assert classify(refusal(plain), Plan()) == NAMESPACE_TERMINATING
    finally:
        env.kubectl("patch", "configmap", "hold", "--type", "merge", "-p", '{"metadata":{"finalizers":null}}')


def test_a_terminating_namespace_blocks_the_job_with_its_own_condition(cluster, env):
    """The namespace is deleted while its job still has pods to create (a quota held them back). A
    ValidatingAdmissionPolicy keeps the namespace controller from deleting the TFJob, as a slow
    finalizer would, so the operator meets the apiserver's refusal through the job itself."""
    name = f"hold-tfjobs-{env.ns}"
    policy = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
              "metadata": {"name": name},
              "spec": {"failurePolicy": "Fail", "validations": [{"expression": "false", "message": "held by the test"}],
                       "matchConstraints": {"resourceRules": [{
                           "apiGroups": ["kubeflow.org"], "apiVersions": ["*"], "operations": ["DELETE"],
                           "resources": ["tfjobs"]}]}}}
    binding = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
               "metadata": {"name": name},
               "spec": {"policyName": name, "validationActions": ["Deny"], "matchResources": {
                   "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": env.ns}}}}}
    cluster.apply([policy, binding])
    try:
        env.apply({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "none"},
                   "spec": {"hard": {"pods": "0"}}})
        env.apply(tfjob("late", {"Worker": replica(2)}))
        env.wait_job("late", lambda j: (condition(j, "Blocked") or {}).get("reason") == "QuotaExceeded", "held by quota")
        cluster.kubectl("delete", "namespace", env.ns, "--wait=false")
        job = env.wait_job("late", lambda j: (condition(j, "Blocked") or {}).get("reason") == "NamespaceTerminating",
                           "Blocked: the namespace is being deleted", timeout=90)
        # A few objects go in one batch (tfop.core.plan.create_batches): every one of them refused.
        message = condition(job, "Blocked")["message"]
        assert message.startswith("the namespace is being deleted, so ") and "pod late-worker-" in message, message
        assert not env.pods("late"), env.msg("late")
    finally:
        cluster.kubectl("delete", "validatingadmissionpolicybinding,validatingadmissionpolicy", name, check=False)
