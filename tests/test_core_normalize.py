"""normalize(): every seed, version detection, run-policy locations, case, restart policy, problems."""
import json

import pytest

from core_fixtures import container, pod_template, rspec, tfjob
from seeds import seed_jobs
from tfop.api.normalize import authored_version, normalize

SEEDS = dict(seed_jobs())

# seed -> (version, namespace, cleanPodPolicy, [(type, replicas, restartPolicy)], notes count)
SEED_TABLE = [
    ("000-0", "v1alpha2", "default", "Running", [("PS", 1, "OnFailure"), ("Worker", 1, "OnFailure")], 2),
    ("001-0", "v1alpha2", "default", "Running", [("PS", 1, "OnFailure"), ("Worker", 1, "OnFailure")], 2),
    ("002-0", "v1beta1", "default", "Running", [("PS", 1, "OnFailure"), ("Worker", 1, "OnFailure")], 2),
    ("003-0", "v1", "default", "None", [("PS", 1, "OnFailure"), ("Worker", 4, "OnFailure")], 2),
    ("004-0", "v1beta1", "default", "None", [("Worker", 2, "Never")], 0),
    ("004-1", "v1beta1", "kubeflow", "Running", [("PS", 1, "OnFailure"), ("Worker", 1, "OnFailure")], 2),
]


def test_seed_table_covers_every_seed():
    assert sorted(SEEDS) == sorted(row[0] for row in SEED_TABLE)


@pytest.mark.parametrize("seed,version,namespace,clean,replicas,notes", SEED_TABLE)
def test_seed(seed, version, namespace, clean, replicas, notes):
    n = normalize(SEEDS[seed])
    assert n.problems == ()
    assert n.job.api_version == version
    assert n.job.namespace == namespace
    assert n.job.run_policy.clean_pod_policy == clean
    assert [(r.type, r.replicas, r.restart_policy) for r in n.job.replicas] == replicas
    assert len(n.notes) == notes


def _mf(*versions, manager="kubectl-client-side-apply", subresource=None):
    out = []
    for v in versions:
        entry = {"manager": manager, "operation": "Update", "apiVersion": f"kubeflow.org/{v}"}
        if subresource:
            entry["subresource"] = subresource
        out.append(entry)
    return out


LAST = "kubectl.kubernetes.io/last-applied-configuration"

# (description, object, expected authored version)
VERSION_TABLE = [
    ("apiVersion only", tfjob(version="v1beta1"), "v1beta1"),
    ("apiVersion v1alpha2", tfjob(version="v1alpha2"), "v1alpha2"),
    ("managedFields beat apiVersion", tfjob(version="v1", managed_fields=_mf("v1alpha2")), "v1alpha2"),
    ("operator's own managedFields skipped",
     tfjob(version="v1", managed_fields=_mf("v1", manager="tfop") + _mf("v1beta1")), "v1beta1"),
    ("status subresource entries skipped",
     tfjob(version="v1", managed_fields=_mf("v1", manager="other", subresource="status") + _mf("v1alpha2")),
     "v1alpha2"),
    ("last-applied annotation",
     tfjob(version="v1", annotations={LAST: json.dumps({"apiVersion": "kubeflow.org/v1beta1"})}), "v1beta1"),
    ("broken last-applied falls back to apiVersion",
     tfjob(version="v1beta1", annotations={LAST: "{not json"}), "v1beta1"),
    ("unknown version falls back to v1", tfjob(version="v9"), "v1"),
]


@pytest.mark.parametrize("desc,obj,version", VERSION_TABLE, ids=[r[0] for r in VERSION_TABLE])
def test_authored_version(desc, obj, version):
    assert authored_version(obj) == version
    assert normalize(obj).job.api_version == version


# (description, version, spec extras, expected (clean, ttl, deadline, backoff), expected notes)
RUN_POLICY_TABLE = [
    ("v1alpha2 default Running", "v1alpha2", {}, ("Running", None, None, None), ()),
    ("v1beta1 default Running", "v1beta1", {}, ("Running", None, None, None), ()),
    ("v1 default None", "v1", {}, ("None", None, None, None), ()),
    ("v1 managedFields v1beta1 -> Running default", None, {}, ("Running", None, None, None), ()),
    ("v1beta1 top level", "v1beta1",
     {"cleanPodPolicy": "All", "ttlSecondsAfterFinished": 60, "activeDeadlineSeconds": 600, "backoffLimit": 3},
     ("All", 60, 600, 3), ()),
    ("v1 top level honoured (#1241)", "v1",
     {"cleanPodPolicy": "Running", "ttlSecondsAfterFinished": 0, "backoffLimit": 0}, ("Running", 0, None, 0), ()),
    ("v1 runPolicy", "v1",
     {"runPolicy": {"cleanPodPolicy": "All", "ttlSecondsAfterFinished": 5, "activeDeadlineSeconds": 7,
                    "backoffLimit": 2}}, ("All", 5, 7, 2), ()),
    # the CRD defaults runPolicy to {}: a v1beta1 job read through v1 has both
    ("v1beta1 top level beside the defaulted runPolicy", None,
     {"cleanPodPolicy": "All", "ttlSecondsAfterFinished": 60, "activeDeadlineSeconds": 600, "backoffLimit": 3,
      "runPolicy": {}}, ("All", 60, 600, 3), ()),
    ("v1alpha2 default beside the defaulted runPolicy", "v1alpha2", {"runPolicy": {}},
     ("Running", None, None, None), ()),
    ("runPolicy wins over top level", "v1",
     {"cleanPodPolicy": "All", "backoffLimit": 9, "runPolicy": {"cleanPodPolicy": "None", "backoffLimit": 9}},
     ("None", None, None, 9),
     ("spec.cleanPodPolicy=All ignored: spec.runPolicy.cleanPodPolicy=None takes precedence",)),
]


@pytest.mark.parametrize("desc,version,extra,expected,notes", RUN_POLICY_TABLE, ids=[r[0] for r in RUN_POLICY_TABLE])
def test_run_policy(desc, version, extra, expected, notes):
    if version is None:
        obj = tfjob(version="v1", managed_fields=_mf("v1beta1"), **extra)
    else:
        obj = tfjob(version=version, **extra)
    n = normalize(obj)
    assert n.problems == ()
    rp = n.job.run_policy
    assert (rp.clean_pod_policy, rp.ttl_seconds_after_finished, rp.active_deadline_seconds, rp.backoff_limit) == expected
    assert n.notes == notes


def test_run_policy_suspend_scheduling_and_success_policy():
    obj = tfjob(runPolicy={"suspend": True, "managedBy": "kueue.x-k8s.io/multikueue",
                           "schedulingPolicy": {"minAvailable": 3, "queue": "q", "minResources": {"cpu": "4"},
                                                "priorityClass": "high", "scheduleTimeoutSeconds": 30}},
                successPolicy="AllWorkers", enableDynamicWorker=True)
    job = normalize(obj).job
    assert job.run_policy.suspend is True
    assert job.run_policy.managed_by == "kueue.x-k8s.io/multikueue"
    s = job.run_policy.scheduling
    assert (s.min_available, s.queue, dict(s.min_resources), s.priority_class, s.schedule_timeout_seconds) == (
        3, "q", {"cpu": "4"}, "high", 30)
    assert job.success_policy == "AllWorkers"
    assert job.dynamic_worker is True


# (keys as written) -> canonical types in creation order
CASE_TABLE = [
    (["worker", "ps"], ["PS", "Worker"]),
    (["WORKER", "Ps", "chief"], ["Chief", "PS", "Worker"]),
    (["evaluator", "master", "Worker"], ["Master", "Worker", "Evaluator"]),
]


@pytest.mark.parametrize("keys,types", CASE_TABLE)
def test_case_normalisation(keys, types):
    n = normalize(tfjob({k: 1 for k in keys}))
    assert n.problems == ()
    assert [r.type for r in n.job.replicas] == types


# (description, replica spec, expected policy, expected notes)
RESTART_TABLE = [
    ("default Never", rspec(), "Never", ()),
    ("replica's own", rspec(restart_policy="ExitCode"), "ExitCode", ()),
    ("from the template, with a note", rspec(template=pod_template(restartPolicy="OnFailure")), "OnFailure",
     ("Worker: restartPolicy OnFailure taken from the pod template; "
      "set spec.tfReplicaSpecs.Worker.restartPolicy instead",)),
    ("replica's wins over template's", rspec(restart_policy="Always", template=pod_template(restartPolicy="Never")),
     "Always",
     ("Worker: pod template restartPolicy Never ignored in favour of the replica's restartPolicy Always",)),
    ("same in both: no note", rspec(restart_policy="OnFailure", template=pod_template(restartPolicy="OnFailure")),
     "OnFailure", ()),
]


@pytest.mark.parametrize("desc,spec,policy,notes", RESTART_TABLE, ids=[r[0] for r in RESTART_TABLE])
def test_restart_policy(desc, spec, policy, notes):
    n = normalize(tfjob({"Worker": spec}))
    assert n.problems == ()
    assert n.job.replicas[0].restart_policy == policy
    assert n.notes == notes


def _problems(obj):
    return [(p.field, p.message) for p in normalize(obj).problems]


NAME_MSG = ("is not a DNS-1035 label: use lower-case letters, digits and '-', "
            "starting with a letter, at most 63 characters")
TF_MSG = ("needs exactly one container named 'tensorflow' (found {}): "
          "TF_CONFIG and the tfjob-port go to that container")

# (description, object, [(field, message)])
PROBLEM_TABLE = [
    ("bad name", tfjob(name="My_Job"), [("metadata.name", "'My_Job' " + NAME_MSG)]),
    ("name starting with a digit", tfjob(name="1job"), [("metadata.name", "'1job' " + NAME_MSG)]),
    ("name too long", tfjob(name="a" * 64), [("metadata.name", f"{'a' * 64!r} " + NAME_MSG)]),
    ("two chiefs", tfjob({"Chief": 1, "Master": 1, "Worker": 1}),
     [("spec.tfReplicaSpecs", "both Chief and Master are given: keep only one")]),
    ("unknown type", tfjob({"Worker": 1, "Launcher": 1}),
     [("spec.tfReplicaSpecs.Launcher",
       "unknown replica type 'Launcher': use one of Chief, Master, PS, Worker, Evaluator")]),
    ("same type twice", tfjob({"Worker": 1, "worker": 1}),
     [("spec.tfReplicaSpecs.worker", "replica type Worker is given twice (keys differ only in case): keep one")]),
    ("no tensorflow container",
     tfjob({"Worker": rspec(template=pod_template(container(name="main")))}),
     [("spec.tfReplicaSpecs.Worker.template.spec.containers", TF_MSG.format(0))]),
    ("two tensorflow containers",
     tfjob({"Worker": rspec(template=pod_template(container(), container()))}),
     [("spec.tfReplicaSpecs.Worker.template.spec.containers", TF_MSG.format(2))]),
    ("missing image on the second container",
     tfjob({"PS": rspec(template=pod_template(container(), container(name="sidecar", image="")))}),
     [("spec.tfReplicaSpecs.PS.template.spec.containers[1].image", "is empty: every container needs an image")]),
    ("init container without image",
     tfjob({"Worker": rspec(template=pod_template(container(), initContainers=[{"name": "init"}]))}),
     [("spec.tfReplicaSpecs.Worker.template.spec.initContainers[0].image", "is empty: every container needs an image")]),
    ("cpu limit that is no quantity",
     tfjob({"Worker": rspec(template=pod_template(container(resources={"limits": {"cpu": "abc"},
                                                                         "requests": {"memory": "1Gi"}})))}),
     [("spec.tfReplicaSpecs.Worker.template.spec.containers[0].resources.limits.cpu",
       "'abc' is not a Kubernetes quantity (e.g. 500m, 2, 1Gi)")]),
    ("replicas -1", tfjob({"Worker": rspec(replicas=-1)}),
     [("spec.tfReplicaSpecs.Worker.replicas", "-1 is not a whole number >= 0")]),
    ("replicas as a string", tfjob({"Worker": rspec(replicas="2")}),
     [("spec.tfReplicaSpecs.Worker.replicas", "'2' is not a whole number >= 0")]),
    ("replicas true", tfjob({"Worker": rspec(replicas=True)}),
     [("spec.tfReplicaSpecs.Worker.replicas", "True is not a whole number >= 0")]),
    ("Evaluator replicas 2", tfjob({"Worker": 1, "Evaluator": 2}),
     [("spec.tfReplicaSpecs.Evaluator.replicas", "Evaluator must have at most 1 replica")]),
    ("chief replicas 2 (lower-case key)", tfjob({"chief": 2, "worker": 1}),
     [("spec.tfReplicaSpecs.chief.replicas", "Chief must have at most 1 replica")]),
    ("evaluator replicas 2 (upper-case key)", tfjob({"EVALUATOR": 2, "wOrKeR": 1}),
     [("spec.tfReplicaSpecs.EVALUATOR.replicas", "Evaluator must have at most 1 replica")]),
    ("unknown restart policy", tfjob({"Worker": rspec(restart_policy="Sometimes")}),
     [("spec.tfReplicaSpecs.Worker.restartPolicy",
       "'Sometimes' is unknown: use one of Always, OnFailure, Never, ExitCode")]),
    ("no replica specs", tfjob({}),
     [("spec.tfReplicaSpecs", "no replica types: add at least one of Chief, PS, Worker, Evaluator")]),
    ("unknown cleanPodPolicy", tfjob(runPolicy={"cleanPodPolicy": "Some"}),
     [("spec.runPolicy.cleanPodPolicy", "'Some' is unknown: use None, Running or All")]),
    ("negative backoffLimit", tfjob(runPolicy={"backoffLimit": -1}),
     [("spec.runPolicy.backoffLimit", "-1 is not a whole number >= 0")]),
    ("negative backoffLimit at the top level (v1beta1)", tfjob(version="v1beta1", backoffLimit=-1),
     [("spec.backoffLimit", "-1 is not a whole number >= 0")]),
    ("unknown cleanPodPolicy at the top level", tfjob(version="v1beta1", cleanPodPolicy="Sometimes"),
     [("spec.cleanPodPolicy", "'Sometimes' is unknown: use None, Running or All")]),
    ("unknown successPolicy", tfjob(successPolicy="AnyWorker"),
     [("spec.successPolicy", "'AnyWorker' is unknown: use \"\" or AllWorkers")]),
]


@pytest.mark.parametrize("desc,obj,expected", PROBLEM_TABLE, ids=[r[0] for r in PROBLEM_TABLE])
def test_problems(desc, obj, expected):
    assert _problems(obj) == expected


def test_template_never_mutated():
    obj = tfjob({"Worker": rspec(template=pod_template(restartPolicy="OnFailure"))})
    before = json.dumps(obj, sort_keys=True)
    normalize(obj)
    assert json.dumps(obj, sort_keys=True) == before
