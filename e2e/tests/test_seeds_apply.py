"""Scenario 6: every seed's TFJob YAML, applied verbatim with `kubectl apply -f`, works.

The seeds are the documents users copy from old Kubeflow guides: v1alpha2,
v1beta1 and v1 TFJobs with kube-batch scheduler names, GPU limits and a
hard-coded `namespace: kubeflow`. Each is written to a file exactly as the
seed spells it (quotes, comments, key order), applied as-is, and must be
accepted by the CRD and turned by the operator into its pods and services.
Pods that want GPUs or an absent scheduler may stay Pending: only the objects
and the Created condition are asserted.
"""
from __future__ import annotations

import pytest

from e2e.tests.lifecycle_helpers import Env, condition, names, operator, raw_seed_docs
from tests.seeds import seed_jobs

pytestmark = pytest.mark.cluster
SEEDS = raw_seed_docs()


def test_raw_seed_documents_are_the_seed_jobs():
    assert [(sid, parsed) for sid, _, parsed in SEEDS] == seed_jobs()


def expected_children(job: dict) -> set[str]:
    from tfop.api.normalize import canonical_type

    name = job["metadata"]["name"]
    return {f"{name}-{canonical_type(key).lower()}-{i}"
            for key, spec in job["spec"]["tfReplicaSpecs"].items() for i in range((spec or {}).get("replicas", 1))}


@pytest.mark.parametrize("seed_id,text,parsed", SEEDS, ids=[s[0] for s in SEEDS])
def test_seed_applies_verbatim(cluster, namespace, request, tmp_path, seed_id, text, parsed):
    fixed_ns = parsed["metadata"].get("namespace")
    target = fixed_ns or namespace
    name = parsed["metadata"]["name"]
    version = parsed["apiVersion"].rpartition("/")[2]
    if fixed_ns:
        cluster.kubectl("create", "namespace", fixed_ns, check=False)
        cluster.kubectl("delete", "tfjob", name, "-n", fixed_ns, "--ignore-not-found", "--wait=true")
        request.addfinalizer(lambda: cluster.kubectl("delete", "tfjob", name, "-n", fixed_ns,
                                                     "--ignore-not-found", "--wait=false", check=False))
    op = operator(cluster, sorted({namespace, target}))
    request.addfinalizer(op.stop)
    op.start()
    env = Env(cluster, target, op)

    path = tmp_path / f"seed-{seed_id}.yaml"
    path.write_text(text)
    applied = cluster.kubectl("apply", "-n", target, "-f", str(path), check=False)
    assert applied.returncode == 0, f"kubectl apply refused seed {seed_id}:\n{applied.stderr}\n{text}"

    job = env.wait_condition(name, "Created")
    assert condition(job, "Created")["reason"] == "TFJobCreated", env.msg(name)
    children = expected_children(parsed)
    env.wait_children(name, children)
    assert not condition(env.job(name), "Failed"), env.msg(name)
    for pod in env.pods(name):
        ref = pod["metadata"]["ownerReferences"][0]
        assert (ref["kind"], ref["name"], ref["uid"]) == ("TFJob", name, job["metadata"]["uid"])
    # The authored version still serves the object back.
    again = env.json("get", f"tfjobs.{version}.kubeflow.org", name)
    assert again["apiVersion"] == f"kubeflow.org/{version}"
    assert names(env.services(name)) == children
