"""Every field each backend writes, for seed 003 (1 PS + 4 GPU workers) and seed 000."""
import json

import jsonschema
import kubernetes_validate
import pytest
import yaml

from gang_fixtures import UID, container, crd_file, job, replica, seed000, seed003, template
from tfop.gang.base import PodMarkings
from tfop.gang.backends.coscheduling import CoschedulingLabelsBackend
from tfop.gang.backends.koordinator import KoordinatorBackend
from tfop.gang.backends.kube_batch import KubeBatchBackend
from tfop.gang.backends.kubernetes import KubernetesBackend
from tfop.gang.backends.pdb import PdbBackend
from tfop.gang.backends.scheduler_plugins import SchedulerPluginsBackend
from tfop.gang.shape import compute_shape
from tfop.gang.backends.volcano import VolcanoBackend
from tfop.gang.backends.yunikorn import YunikornBackend, application_id

PRIO = {"high": 1000}
ANNOTATIONS = {"team": "vision",
               "kubectl.kubernetes.io/last-applied-configuration": '{"kind":"TFJob"}'}


def rich():
    """Seed 003 with every schedulingPolicy field a backend may read."""
    return job(*seed003().replicas, name="tf-smoke-gpu", annotations=ANNOTATIONS,
               queue="research", priority_class="high", schedule_timeout_seconds=300)


def metadata(name="tf-smoke-gpu", namespace="ml", annotations=None):
    return {
        "name": name, "namespace": namespace,
        "labels": {"training.kubeflow.org/job-name": name,
                   "training.kubeflow.org/operator-name": "tfjob-controller"},
        "annotations": {"team": "vision"} if annotations is None else annotations,
        "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "name": name,
                             "uid": UID, "controller": True, "blockOwnerDeletion": True}],
    }


def objects(backend, tfjob):
    shape = compute_shape(tfjob, PRIO)
    return backend.group_object(tfjob, shape), {
        (r.type, i): backend.pod_markings(tfjob, r, i, shape)
        for r in tfjob.replicas for i in range(r.replicas)}


PODS = [("PS", 0)] + [("Worker", i) for i in range(4)]
VERBS = ["create", "delete", "get", "list", "patch", "watch"]


def same_for_all(markings):
    return {pod: markings for pod in PODS}


# backend, group object, markings, rbac rules
CASES = {
    "kube-arbitrator": (
        PdbBackend(),
        {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": metadata(),
         "spec": {"minAvailable": 5,
                  "selector": {"matchLabels": {"training.kubeflow.org/job-name": "tf-smoke-gpu"}}}},
        same_for_all(PodMarkings()),
        [{"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": VERBS}]),
    "kube-batch": (
        KubeBatchBackend(),
        {"apiVersion": "scheduling.incubator.k8s.io/v1alpha1", "kind": "PodGroup",
         "metadata": metadata(),
         "spec": {"minMember": 5, "queue": "research", "priorityClassName": "high"}},
        same_for_all(PodMarkings(annotations={"scheduling.k8s.io/group-name": "tf-smoke-gpu"})),
        [{"apiGroups": ["scheduling.incubator.k8s.io"], "resources": ["podgroups"],
          "verbs": VERBS}]),
    "volcano": (
        VolcanoBackend(),
        {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup", "metadata": metadata(),
         "spec": {"minMember": 5, "minTaskMember": {"ps": 1, "worker": 4}, "queue": "research",
                  "priorityClassName": "high",
                  "minResources": {"cpu": "1", "nvidia.com/gpu": "8"}}},
        {pod: PodMarkings(annotations={"scheduling.k8s.io/group-name": "tf-smoke-gpu",
                                       "volcano.sh/task-spec": pod[0].lower()}) for pod in PODS},
        [{"apiGroups": ["scheduling.volcano.sh"], "resources": ["queues"], "verbs": ["list", "watch"]},
         {"apiGroups": ["scheduling.volcano.sh"], "resources": ["podgroups"], "verbs": VERBS}]),
    "scheduler-plugins": (
        SchedulerPluginsBackend(),
        {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup", "metadata": metadata(),
         "spec": {"minMember": 5, "minResources": {"cpu": "1", "nvidia.com/gpu": "8"},
                  "scheduleTimeoutSeconds": 300}},
        same_for_all(PodMarkings(labels={"scheduling.x-k8s.io/pod-group": "tf-smoke-gpu"})),
        [{"apiGroups": ["scheduling.x-k8s.io"], "resources": ["podgroups"], "verbs": VERBS}]),
    "coscheduling": (
        CoschedulingLabelsBackend(), None,
        same_for_all(PodMarkings(labels={"pod-group.scheduling.sigs.k8s.io/name": "tf-smoke-gpu",
                                         "pod-group.scheduling.sigs.k8s.io/min-available": "5"})),
        []),
    "koordinator": (
        KoordinatorBackend(), None,
        same_for_all(PodMarkings(annotations={
            "gang.scheduling.koordinator.sh/name": "tf-smoke-gpu",
            "gang.scheduling.koordinator.sh/min-available": "5",
            "gang.scheduling.koordinator.sh/waiting-time": "300s",
            "gang.scheduling.koordinator.sh/mode": "Strict"})),
        []),
}

# Kubernetes' own gang: the PodGroup and a spec field on each pod, one priority for group and pods.
CASES["kubernetes"] = (
    KubernetesBackend(),
    {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup", "metadata": metadata(),
     "spec": {"schedulingPolicy": {"gang": {"minCount": 5}}, "disruptionMode": {"all": {}},
              "priorityClassName": "high"}},
    same_for_all(PodMarkings(spec={"schedulingGroup": {"podGroupName": "tf-smoke-gpu"},
                                   "priorityClassName": "high"})),
    [{"apiGroups": ["scheduling.k8s.io"], "resources": ["podgroups"], "verbs": VERBS}])

YK_LABELS = {"applicationId": "ml-tf-smoke-gpu-0b5c3f2e", "queue": "research"}
YK_GROUPS = [{"name": "ps", "minMember": 1, "minResource": {"cpu": "1"}},
             {"name": "worker", "minMember": 4, "minResource": {"nvidia.com/gpu": "2"}}]
YK_APP = {"yunikorn.apache.org/task-groups": json.dumps(YK_GROUPS, separators=(",", ":")),
          "yunikorn.apache.org/schedulingPolicyParameters":
              "placeholderTimeoutInSeconds=300 gangSchedulingStyle=Hard"}
# Every pod carries the app-wide annotations: YuniKorn reads them from whichever pod it sees first.
CASES["yunikorn"] = (
    YunikornBackend(), None,
    {("PS", 0): PodMarkings(labels=YK_LABELS, annotations={
        "yunikorn.apache.org/task-group-name": "ps", **YK_APP}),
     **{("Worker", i): PodMarkings(labels=YK_LABELS, annotations={
         "yunikorn.apache.org/task-group-name": "worker", **YK_APP}) for i in range(4)}},
    [])


@pytest.mark.parametrize("name", sorted(CASES))
def test_group_object_and_markings(name):
    backend, group, markings, _ = CASES[name]
    got_group, got_markings = objects(backend, rich())
    assert got_group == group
    assert got_markings == markings
    assert backend.name == name


@pytest.mark.parametrize("name", sorted(CASES))
def test_rbac_rules_are_exactly_what_is_needed(name):
    backend, group, _, rules = CASES[name]
    assert [dict(r) for r in backend.rbac_rules] == rules
    assert (backend.group_resource is None) == (group is None)
    if group is not None:
        assert group["apiVersion"] == backend.group_resource.api_version
        assert group["kind"] == backend.group_resource.kind


SCHEDULER_NAMES = [
    (PdbBackend, "kube-batchd"), (KubeBatchBackend, "kube-batch"), (VolcanoBackend, "volcano"),
    (SchedulerPluginsBackend, "scheduler-plugins-scheduler"), (CoschedulingLabelsBackend, None),
    (KoordinatorBackend, "koord-scheduler"), (YunikornBackend, "yunikorn"),
]


@pytest.mark.parametrize("cls,default", SCHEDULER_NAMES)
def test_scheduler_names(cls, default):
    assert cls().scheduler_name == default
    assert cls("my-scheduler").scheduler_name == "my-scheduler"


def test_seed000_pdb_and_single_pod_job_gets_none():
    tfjob = seed000()
    group, _ = objects(PdbBackend(), tfjob)
    assert group["spec"] == {"minAvailable": 2, "selector": {"matchLabels": {
        "training.kubeflow.org/job-name": "tfjob-gang-scheduling"}}}
    assert group["metadata"] == metadata("tfjob-gang-scheduling", "default", {})
    single = job(replica("Worker", 1, template(container(limits={"cpu": "1"}))))
    assert objects(PdbBackend(), single)[0] is None


def test_optional_fields_left_out_when_unset():
    tfjob = seed003()
    shape = compute_shape(tfjob, {})
    assert KubeBatchBackend().group_object(tfjob, shape)["spec"] == {"minMember": 5}
    assert VolcanoBackend().group_object(tfjob, shape)["spec"] == {
        "minMember": 5, "minTaskMember": {"ps": 1, "worker": 4}, "queue": "default",
        "minResources": {"cpu": "1", "nvidia.com/gpu": "8"}}
    assert SchedulerPluginsBackend().group_object(tfjob, shape)["spec"] == {
        "minMember": 5, "minResources": {"cpu": "1", "nvidia.com/gpu": "8"}}
    worker = tfjob.replica("Worker")
    assert "gang.scheduling.koordinator.sh/waiting-time" not in \
        KoordinatorBackend().pod_markings(tfjob, worker, 0, shape).annotations
    ps = YunikornBackend().pod_markings(tfjob, tfjob.replica("PS"), 0, shape)
    assert ps.labels["queue"] == "root.default"
    assert ps.annotations["yunikorn.apache.org/schedulingPolicyParameters"] == \
        "gangSchedulingStyle=Hard"


def test_yunikorn_every_pod_carries_task_groups_with_placement():
    placement = {"nodeSelector": {"gpu": "a100"},
                 "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
                 "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                     "nodeSelectorTerms": [{"matchExpressions": [
                         {"key": "zone", "operator": "In", "values": ["a"]}]}]}}}}
    tfjob = job(replica("Worker", 2, template(container(requests={"cpu": "2", "memory": "4Gi"}),
                                              **placement)),
                replica("Chief", 1, template(container(requests={"cpu": "1"}))),
                replica("Evaluator", 1, template(container(requests={"cpu": "1"}))),
                min_available=3)
    shape = compute_shape(tfjob, {})
    backend = YunikornBackend()
    chief = backend.pod_markings(tfjob, tfjob.replica("Chief"), 0, shape).annotations
    assert json.loads(chief["yunikorn.apache.org/task-groups"]) == [
        {"name": "chief", "minMember": 1, "minResource": {"cpu": "1"}},
        {"name": "worker", "minMember": 2, "minResource": {"cpu": "2", "memory": "4Gi"},
         **placement}]
    worker = backend.pod_markings(tfjob, tfjob.replica("Worker"), 1, shape).annotations
    assert worker["yunikorn.apache.org/task-groups"] == chief["yunikorn.apache.org/task-groups"]
    assert worker["yunikorn.apache.org/task-group-name"] == "worker"
    # minAvailable 3 leaves the Evaluator outside the gang: an ordinary pod of the app
    # (no task group), yet it may be the pod YuniKorn sees first, so it carries the groups too.
    evaluator = backend.pod_markings(tfjob, tfjob.replica("Evaluator"), 0, shape)
    assert "yunikorn.apache.org/task-group-name" not in evaluator.annotations
    assert evaluator.annotations["yunikorn.apache.org/task-groups"] == chief["yunikorn.apache.org/task-groups"]
    assert evaluator.labels["applicationId"] == application_id(tfjob)


APP_IDS = [
    ("ml", "tf-job", UID, "ml-tf-job-0b5c3f2e"),
    ("ml", "tf-job", "", "ml-tf-job"),
    ("n" * 63, "j" * 63, UID, "n" * 54 + "-0b5c3f2e"),
]


@pytest.mark.parametrize("namespace,name,uid,expected", APP_IDS)
def test_yunikorn_application_id(namespace, name, uid, expected):
    app = application_id(job(replica("Worker", 1, template(container())),
                             namespace=namespace, name=name, uid=uid))
    assert app == expected and len(app) <= 63


def test_pdb_validates_against_the_kubernetes_schema():
    group, _ = objects(PdbBackend(), rich())
    kubernetes_validate.validate(group, kubernetes_validate.latest_version(), strict=True)


def _no_unknown_fields(value, schema, path="spec"):
    # The apiserver prunes fields a structural schema does not name; a typo would vanish.
    if isinstance(value, dict) and "properties" in schema:
        for key, item in value.items():
            assert key in schema["properties"], f"{path}.{key} is not in the CRD schema"
            _no_unknown_fields(item, schema["properties"][key], f"{path}.{key}")


CRDS = [
    ("volcano", "volcano.sh/volcano@*/config/crd/volcano/bases/scheduling.volcano.sh_podgroups.yaml"),
    ("scheduler-plugins",
     "sigs.k8s.io/scheduler-plugins@*/config/crd/bases/scheduling.x-k8s.io_podgroups.yaml"),
]


@pytest.mark.parametrize("name,pattern", CRDS)
def test_podgroups_match_the_schedulers_own_crd(name, pattern):
    path = crd_file(pattern)
    if path is None:
        pytest.skip(f"{pattern} not in the Go module cache")
    crd = yaml.safe_load(open(path))
    backend, group, _, _ = CASES[name]
    version = next(v for v in crd["spec"]["versions"]
                   if v["name"] == backend.group_resource.version)
    schema = version["schema"]["openAPIV3Schema"]
    assert crd["spec"]["names"]["plural"] == backend.group_resource.plural
    assert f"{crd['spec']['names']['plural']}.{crd['spec']['group']}" in backend.crds
    jsonschema.validate(group, schema)
    _no_unknown_fields(group["spec"], schema["properties"]["spec"])


# Shapes of the CRD specs with no schema at hand: field -> type.
PODGROUP_FIELDS = {
    "kube-batch": {"minMember": int, "queue": str, "priorityClassName": str},
    "volcano": {"minMember": int, "minTaskMember": dict, "queue": str, "priorityClassName": str,
                "minResources": dict},
    "scheduler-plugins": {"minMember": int, "minResources": dict, "scheduleTimeoutSeconds": int},
}


@pytest.mark.parametrize("name", sorted(PODGROUP_FIELDS))
def test_podgroup_spec_shape(name):
    group = CASES[name][1]
    fields = PODGROUP_FIELDS[name]
    assert set(group["spec"]) <= set(fields)
    for key, value in group["spec"].items():
        assert isinstance(value, fields[key]), key
        if isinstance(value, dict):
            assert all(isinstance(k, str) and isinstance(v, (str, int)) for k, v in value.items())
    assert set(group["metadata"]) == {"name", "namespace", "labels", "annotations",
                                      "ownerReferences"}


def test_kubernetes_without_a_priority_class_leaves_the_default_to_admission():
    plain = job(*seed003().replicas, name="tf-smoke-gpu")
    group, markings = objects(KubernetesBackend(), plain)
    assert "priorityClassName" not in group["spec"]
    assert markings == same_for_all(PodMarkings(spec={"schedulingGroup": {"podGroupName": "tf-smoke-gpu"}}))


@pytest.mark.parametrize("observed,desired,patch", [
    ({"spec": {"schedulingPolicy": {"gang": {"minCount": 5}}, "disruptionMode": {"single": {}}, "priority": 0}},
     {"spec": {"schedulingPolicy": {"gang": {"minCount": 5}}, "disruptionMode": {"all": {}}}}, None),
    ({"spec": {"schedulingPolicy": {"gang": {"minCount": 5}}}},
     {"spec": {"schedulingPolicy": {"gang": {"minCount": 3}}, "priorityClassName": "high"}},
     {"spec": {"schedulingPolicy": {"gang": {"minCount": 3}}}}),
])
def test_kubernetes_patches_only_min_count(observed, desired, patch):
    """The other fields of a PodGroup's spec are immutable: a patch of them is refused."""
    assert KubernetesBackend().group_changes(observed, desired) == patch


@pytest.mark.parametrize("backend", [PdbBackend(), KubeBatchBackend(), VolcanoBackend(),
                                     SchedulerPluginsBackend(), KubernetesBackend()])
def test_no_group_for_a_job_without_pods(backend):
    empty = job(replica("Worker", 0, template(container())))
    assert backend.group_object(empty, compute_shape(empty, {})) is None
