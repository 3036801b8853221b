"""The operator's in-memory copies keep everything a reconcile reads, and little else."""
import json

import pytest

from core_fixtures import model, observed, pod, run, service, tfjob
from tfop.api import pods as P
from tfop.api.constants import LABEL_INDEX, LABEL_JOB, LABEL_OPERATOR, LABEL_ROLE, LABEL_TYPE
from tfop.core.context import Observed
from tfop.gang.common import pending_reason
from tfop.api.normalize import authored_version, normalize
from tfop.gang.registry import backend_class
from tfop.runtime.trim import SharedParts, keep_whole, trim_child, trim_group, trim_job


def full_pod(phase="Running", exit_code=None, last_exit=None, restarts=0, ready=True, unschedulable=None):
    state = {"running": {"startedAt": "2026-01-01T00:00:00Z"}}
    if exit_code is not None:
        state = {"terminated": {"exitCode": exit_code, "reason": "Error", "startedAt": "x", "finishedAt": "y",
                                "containerID": "containerd://abc"}}
    status = {
        "phase": phase, "hostIP": "10.0.0.1", "podIP": "10.1.0.1", "qosClass": "BestEffort",
        "podIPs": [{"ip": "10.1.0.1"}], "startTime": "2026-01-01T00:00:00Z",
        "conditions": [
            {"type": "PodScheduled", "status": "False" if unschedulable else "True",
             "reason": "Unschedulable" if unschedulable else None, "message": unschedulable,
             "lastTransitionTime": "2026-01-01T00:00:00Z", "lastProbeTime": None},
            {"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": "t"},
        ],
        "containerStatuses": [{
            "name": "tensorflow", "image": "tf:2", "imageID": "sha256:abc", "containerID": "c://1",
            "ready": ready, "started": True, "restartCount": restarts, "state": state,
            "lastState": {"terminated": {"exitCode": last_exit, "reason": "OOMKilled"}} if last_exit is not None else {},
            "volumeMounts": [{"name": "kube-api-access", "mountPath": "/var/run/secrets"}],
        }],
    }
    status["conditions"] = [{k: v for k, v in c.items() if v is not None} for c in status["conditions"]]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "job-worker-0", "namespace": "ns", "uid": "u", "resourceVersion": "7",
                         "labels": {"training.kubeflow.org/job-name": "job"}, "annotations": {"a": "b"},
                         "ownerReferences": [{"kind": "TFJob", "name": "job", "uid": "j", "controller": True}],
                         "creationTimestamp": "2026-01-01T00:00:00Z",
                         "managedFields": [{"manager": "kwok", "fieldsV1": {"f:status": {}}}]},
            "spec": {"containers": [{"name": "tensorflow", "image": "tf:2", "env": [{"name": "TF_CONFIG"}]}]},
            "status": status}


PODS = [
    full_pod(),
    full_pod(ready=False),
    full_pod("Failed", exit_code=137),
    full_pod("Running", last_exit=1, restarts=2),
    full_pod("Succeeded", exit_code=0),
    full_pod("Pending", ready=False, unschedulable="0/4 nodes are available: 4 Insufficient nvidia.com/gpu."),
    {**full_pod("Failed"), "status": {"phase": "Failed", "reason": "Evicted", "message": "low memory"}},
]


@pytest.mark.parametrize("pod", PODS)
def test_trimmed_pod_reads_the_same(pod):
    small = trim_child(pod)
    for read in (P.name, P.phase, P.terminating, P.is_active, P.is_ready, P.exit_code, P.restarts,
                 P.failure_summary):
        assert read(small) == read(pod), read.__name__
    assert pending_reason([small]) == pending_reason([pod])
    assert "spec" not in small and "managedFields" not in small["metadata"]
    assert len(json.dumps(small)) < len(json.dumps(pod))


def test_a_jobs_children_keep_their_equal_parts_once():
    shared = SharedParts()
    first, second = full_pod(), json.loads(json.dumps(full_pod()))  # strings of their own, as parsed
    second["metadata"] = {**second["metadata"], "name": "job-worker-1", "uid": "u1"}
    small = [trim_child(p, shared=shared) for p in (first, second)]
    assert small == [trim_child(first), trim_child(second)]  # the same content as without sharing
    for part in (lambda p: p["metadata"]["ownerReferences"], lambda p: p["status"]["conditions"],
                 lambda p: p["status"]["containerStatuses"]):
        assert part(small[0]) is part(small[1])
    assert small[0]["metadata"]["creationTimestamp"] is small[1]["metadata"]["creationTimestamp"]  # one a second
    assert small[0]["metadata"] is not small[1]["metadata"]  # what differs stays each pod's own


def test_shared_parts_tell_true_from_one_and_stay_bounded():
    shared = SharedParts(limit=2)
    assert shared.one([{"controller": 1}]) == [{"controller": 1}]
    assert shared.one([{"controller": True}])[0]["controller"] is True
    for n in range(10):
        shared.one([{"n": n}])
    assert len(shared._kept) <= 2


# Group objects as their schedulers write them while a gang starts: counters and condition times move
# with every pod, which no backend's state() reads.
_TIMES = {"lastTransitionTime": "2026-01-01T00:00:01Z", "transitionID": "9f1c"}
GROUP_STATUSES = [
    ("volcano", {}),
    ("volcano", {"phase": "Pending", "conditions": [{"type": "Unschedulable", "status": "True",
                 "reason": "NotEnoughResources", "message": "3/5 tasks in gang unschedulable", **_TIMES}]}),
    ("volcano", {"phase": "Running", "running": 4, "succeeded": 1,
                 "conditions": [{"type": "Scheduled", "status": "True", "reason": "tasks in gang are ready", **_TIMES}]}),
    ("kube-batch", {"phase": "Pending", "running": 1, "conditions": [
        {"type": "Unschedulable", "status": "True", "message": "1/3 tasks", **_TIMES}]}),
    ("scheduler-plugins", {"phase": "Scheduling", "scheduled": 3, "running": 2,
                           "occupiedBy": "ml/job", "scheduleStartTime": "2026-01-01T00:00:00Z"}),
    ("kube-arbitrator", {"currentHealthy": 2, "desiredHealthy": 5, "disruptionsAllowed": 0, "expectedPods": 5,
                         "conditions": [{"type": "DisruptionAllowed", "status": "False", **_TIMES}]}),
]


@pytest.mark.parametrize("backend, status", GROUP_STATUSES,
                         ids=[f"{b}-{i}" for i, (b, _) in enumerate(GROUP_STATUSES)])
def test_a_trimmed_group_reads_the_same_to_its_backend(backend, status):
    gang = backend_class(backend)()
    resource = gang.group_resource
    group = {"apiVersion": resource.api_version, "kind": resource.kind,
             "metadata": {"name": "job", "namespace": "ns", "managedFields": [{}], "resourceVersion": "5"},
             "spec": {"minMember": 5, "minResources": {"cpu": "5"}}, "status": status}
    small = trim_group(group, gang.group_status_fields)
    pods = [{"metadata": {"name": "job-worker-0"}, "status": {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes"}]}}]
    assert gang.state(small, pods) == gang.state(group, pods)
    assert small["spec"] == group["spec"] and "managedFields" not in small["metadata"]
    desired = {"spec": {"minMember": 6, "minResources": {"cpu": "5"}}}
    assert gang.group_changes(small, desired) == gang.group_changes(group, desired)
    # the scheduler's next update: counters up, condition times moved; only a backend that reads the
    # counters (scheduler-plugins says them) gets a copy that differs, to wake the job
    later = {k: v + 1 if isinstance(v, int) else v for k, v in status.items()}
    if "conditions" in status:
        later["conditions"] = [{**c, "lastTransitionTime": "2026-01-01T00:00:09Z"} for c in status["conditions"]]
    reads_counters = any(isinstance(status.get(k), int) for k in gang.group_status_fields)
    assert (trim_group({**group, "status": later}, gang.group_status_fields) == small) is not reads_counters


def job(version="v1beta1", how="managedFields"):
    body = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob",
            "metadata": {"name": "j", "namespace": "ns", "uid": "u", "resourceVersion": "3", "annotations": {}},
            "spec": {"tfReplicaSpecs": {"Worker": {"replicas": 2, "template": {"spec": {"containers": [
                {"name": "tensorflow", "image": "tf"}]}}}}}}
    if how == "managedFields":
        body["metadata"]["managedFields"] = [
            {"manager": "kubectl", "operation": "Update", "apiVersion": f"kubeflow.org/{version}",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:tfReplicaSpecs": {}}}},
            {"manager": "tfop", "operation": "Update", "apiVersion": "kubeflow.org/v1", "subresource": "status",
             "fieldsV1": {"f:status": {}}}]
    else:
        body["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] = json.dumps(
            {**body, "apiVersion": f"kubeflow.org/{version}"})
    return body


@pytest.mark.parametrize("version", ["v1", "v1beta1", "v1alpha2"])
@pytest.mark.parametrize("how", ["managedFields", "last-applied"])
def test_trimmed_job_keeps_its_authored_version_and_spec(version, how):
    body = job(version, how)
    small = trim_job(body)
    assert authored_version(small) == authored_version(body) == version
    kept, whole = normalize(small).job, normalize(body).job
    assert kept.replicas == whole.replicas and kept.run_policy == whole.run_policy
    last_applied = "kubectl.kubernetes.io/last-applied-configuration"
    assert {k: v for k, v in kept.annotations.items() if k != last_applied} == \
        {k: v for k, v in whole.annotations.items() if k != last_applied}
    assert "fieldsV1" not in json.dumps(small)
    assert len(json.dumps(small)) < len(json.dumps(body))
    assert body == job(version, how), "the original is not modified"


def test_keep_whole_keeps_everything():
    """For an informer of objects a reconcile reads whole (TFJobs): nothing dropped, a copy of its own."""
    pod = full_pod()
    kept = keep_whole(pod)
    assert kept == pod and kept is not pod


# (case, pod overrides for core_fixtures.observed): a pass over the trimmed children decides what it
# decides over the children as the apiserver sends them
PASSES = [
    ("every pod running", {}),
    ("a worker failed", {"worker_1": {"phase": "Failed", "exit_code": 1}}),
    ("a worker missing, one unschedulable", {"worker_1": None, "ps_0": {"phase": "Pending", "unschedulable": "0/3"}}),
    ("a worker succeeded", {"worker_0": {"phase": "Succeeded", "exit_code": 0}}),
]


@pytest.mark.parametrize("case, overrides", PASSES, ids=[c for c, _ in PASSES])
def test_a_pass_over_trimmed_children_decides_the_same(case, overrides):
    job = model(tfjob({"PS": 1, "Worker": 3}))
    full = observed(job, **overrides)
    trimmed = Observed(pods=[trim_child(p) for p in full.pods], services=[trim_child(s) for s in full.services])
    a, b = run(job, full), run(job, trimmed)
    assert (a.status, a.create, a.delete, a.patch, a.events, a.requeue_after) == \
        (b.status, b.create, b.delete, b.patch, b.events, b.requeue_after)


def test_cached_children_keep_the_labels_tfop_reads_and_not_upstreams_older_keys():
    job = model(tfjob({"Worker": 2}))
    for child in (pod(job, "Worker", 0), service(job, "Worker", 0)):
        labels = trim_child(child)["metadata"]["labels"]
        assert set(labels) == {LABEL_OPERATOR, LABEL_JOB, LABEL_TYPE, LABEL_INDEX, LABEL_ROLE}
        assert all(labels[k] == child["metadata"]["labels"][k] for k in labels)
    assert "status" not in trim_child(service(job, "Worker", 0))
