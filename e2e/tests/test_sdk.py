"""Mixed-case replica keys and the Kubeflow Training SDK, on the real apiserver with the generated CRD.

- TFJobs written as v1, v1beta1 and v1alpha2 with keys in any case (WORKER, Ps, chief), applied with
  `kubectl apply` as a user would, run to Succeeded; the v1beta1 one's legacy top-level
  cleanPodPolicy is honoured beside the runPolicy the CRD defaults to {};
- the SDK users already have (kubeflow-training 1.9, `TrainingClient`, job_kind TFJob) reads them all
  through kubeflow.org/v1 with a kubeconfig: `list_jobs` and `get_job` on jobs just created (no status
  yet) and finished, `wait_for_job_conditions` until Succeeded. Its models require spec.runPolicy,
  which a v1beta1 or v1alpha2 job has only by the CRD's default: without it one such job makes
  `list_jobs` fail for its whole namespace;
- two keys that differ only in case are refused, naming both.
"""
from __future__ import annotations

import copy
import json

import pytest
import yaml
from kubeflow.training import TrainingClient
from kubernetes import client, config

from e2e.tests.lifecycle_helpers import Env, names, operator, replica, tfjob
from e2e.harness.tfop_operator import deploy_manifests
from tfop.api.rules import duplicate_message

pytestmark = pytest.mark.cluster

# name -> (version, replica counts by key as written, extra spec fields)
JOBS = {
    "sdk-v1": ("v1", {"Chief": 1, "Worker": 2}, {"runPolicy": {"cleanPodPolicy": "None"}}),
    "sdk-v1-mixed": ("v1", {"chief": 1, "WORKER": 2, "Ps": 1}, {}),
    "sdk-v1beta1": ("v1beta1", {"WORKER": 2, "Ps": 1, "chief": 1}, {"cleanPodPolicy": "All"}),
    "sdk-v1alpha2": ("v1alpha2", {"MASTER": 1, "worker": 1, "pS": 2}, {"cleanPodPolicy": "None"}),
}
CANONICAL = {"chief": "Chief", "master": "Master", "ps": "PS", "worker": "Worker"}
LEADERS = {"chief", "master"}


def job_yaml(name: str) -> dict:
    version, counts, extra = JOBS[name]
    # A chief or master ends the job when it exits: it exits last, so that every other pod has run and
    # counts in replicaStatuses (a pod still Pending then would count nowhere, upstream too).
    job = tfjob(name, {key: replica(n, exit_code=0, exit_delay="4s" if key.lower() in LEADERS else None)
                       for key, n in counts.items()}, **copy.deepcopy(extra))
    job["apiVersion"] = f"kubeflow.org/{version}"
    return job


def training_client(cluster, namespace: str) -> TrainingClient:
    """The SDK as a user runs it, from a kubeconfig. Into a Configuration of its own: loading it with
    config_file= would change the kubernetes client's process-wide default."""
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(cluster.kubeconfig), client_configuration=configuration)
    return TrainingClient(client_configuration=configuration, namespace=namespace, job_kind="TFJob")


def replica_specs(job) -> dict[str, tuple[int | None, str | None]]:
    """What the SDK returns for spec.tfReplicaSpecs: key -> (replicas, the tensorflow container's image)."""
    return {key: (spec.replicas, spec.template.spec.containers[0].image)
            for key, spec in job.spec.tf_replica_specs.items()}


def expected_specs(name: str) -> dict[str, tuple[int, str]]:
    spec = job_yaml(name)["spec"]["tfReplicaSpecs"]
    return {key: (s["replicas"], s["template"]["spec"]["containers"][0]["image"]) for key, s in spec.items()}


def test_sdk_reads_jobs_of_every_version_and_mixed_case_keys(cluster, namespace, request):
    deploy_manifests(cluster, None)  # the CRD, before any job: jobs are listed before the operator runs
    env = Env(cluster, namespace)
    applied = env.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([job_yaml(n) for n in JOBS]), check=False)
    assert applied.returncode == 0, applied.stderr
    sdk = training_client(cluster, namespace)

    fresh = {j.metadata.name: j for j in sdk.list_jobs()}  # just created: no status, no operator yet
    assert set(fresh) == set(JOBS)
    for name, job in fresh.items():
        assert job.kind == "TFJob" and job.api_version == "kubeflow.org/v1", name
        assert replica_specs(job) == expected_specs(name), name
        assert job.status is None, name
    assert fresh["sdk-v1beta1"].spec.run_policy.clean_pod_policy is None  # {}: the CRD's default
    assert fresh["sdk-v1"].spec.run_policy.clean_pod_policy == "None"
    assert sdk.get_job("sdk-v1alpha2").spec.tf_replica_specs["pS"].replicas == 2

    op = operator(cluster, [namespace])
    request.addfinalizer(op.stop)
    op.start()
    env.op = op
    for name in JOBS:
        done = sdk.wait_for_job_conditions(name, wait_timeout=90, polling_interval=1)
        succeeded = [c for c in done.status.conditions if c.type == "Succeeded"]
        assert [(c.status, c.reason) for c in succeeded] == [("True", "TFJobSucceeded")], env.msg(name)
        assert done.status.completion_time is not None, name
        counts = {rtype: (s.active or 0, s.succeeded or 0, s.failed or 0)
                  for rtype, s in done.status.replica_statuses.items()}
        _, keys, _ = JOBS[name]
        assert counts == {CANONICAL[k.lower()]: (0, n, 0) for k, n in keys.items()}, name

    finished = {j.metadata.name: j for j in sdk.list_jobs()}
    assert set(finished) == set(JOBS)
    for name, job in finished.items():
        assert replica_specs(job) == expected_specs(name), name
        assert sdk.is_job_succeeded(name), name
        assert sdk.get_job_conditions(name)[-1].type == "Succeeded", name
    assert_clean_pod_policies_honoured(env)


def assert_clean_pod_policies_honoured(env: Env) -> None:
    """v1beta1's top-level cleanPodPolicy All (runPolicy defaulted to {}) deletes every pod; None keeps all."""
    env.wait("sdk-v1beta1's pods deleted (spec.cleanPodPolicy All)", lambda: not env.pods("sdk-v1beta1"),
             timeout=30, job="sdk-v1beta1")
    for name in ("sdk-v1", "sdk-v1alpha2"):
        _, counts, _ = JOBS[name]
        want = {f"{name}-{CANONICAL[k.lower()].lower()}-{i}" for k, n in counts.items() for i in range(n)}
        assert names(env.pods(name)) == want, env.msg(name)


def test_keys_differing_only_in_case_are_refused_naming_both(cluster, namespace):
    deploy_manifests(cluster, None)
    env = Env(cluster, namespace)
    for version in ("v1", "v1beta1", "v1alpha2"):
        job = tfjob(f"twice-{version}", {"Worker": replica(1), "WORKER": replica(1), "Ps": replica(1)})
        job["apiVersion"] = f"kubeflow.org/{version}"
        refused = env.kubectl("apply", "-f", "-", input=json.dumps(job), check=False)
        assert refused.returncode != 0, refused.stdout
        assert duplicate_message("WORKER", "Worker") in refused.stderr, refused.stderr
        assert "spec.tfReplicaSpecs" in refused.stderr
    assert env.json("get", "tfjobs")["items"] == []
