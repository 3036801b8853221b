"""Pods and services of one replica: labels, owners, ports, restart policy, TF_CONFIG, schema validity."""
import kubernetes_validate
import pytest

from core_fixtures import TEMPLATES, UID, container, model, pod_template, rspec, tfjob
from seeds import seed_jobs
from tfop.children.pod import PodOptions, build_pod
from tfop.children.service import build_service
from tfop.gang.base import PodMarkings
from tfop.api.normalize import normalize

CW2 = model(tfjob({"Chief": 1, "Worker": 2}))
W2 = model(tfjob({"Worker": 2, "PS": 1}))
MASTER = model(tfjob({"Master": 1, "Worker": 1}))


def _labels(rtype, index, role=False, job="tf-job"):
    out = {
        "training.kubeflow.org/operator-name": "tfjob-controller",
        "training.kubeflow.org/job-name": job,
        "training.kubeflow.org/replica-type": rtype,
        "training.kubeflow.org/replica-index": str(index),
        "group-name": "kubeflow.org",
        "job-name": job, "tf-job-name": job, "tf_job_name": job,
        "replica-type": rtype, "tf-replica-type": rtype,
        "replica-index": str(index), "tf-replica-index": str(index),
    }
    if role:
        out["training.kubeflow.org/job-role"] = "master"
    return out


def _pod(job, rtype, index, options=None):
    return build_pod(TEMPLATES, job, job.replica(rtype), index, options or PodOptions())


def _svc(job, rtype, index):
    return build_service(TEMPLATES, job, job.replica(rtype), index)


# (description, job, type, index, expected labels)
LABEL_TABLE = [
    ("chief gets job-role master", CW2, "Chief", 0, _labels("chief", 0, role=True)),
    ("worker-0 with a chief: no role", CW2, "Worker", 0, _labels("worker", 0)),
    ("master gets job-role master", MASTER, "Master", 0, _labels("master", 0, role=True)),
    ("worker-0 without chief: master", W2, "Worker", 0, _labels("worker", 0, role=True)),
    ("worker-1 without chief: no role", W2, "Worker", 1, _labels("worker", 1)),
    ("PS: no role", W2, "PS", 0, _labels("ps", 0)),
]


@pytest.mark.parametrize("desc,job,rtype,index,labels", LABEL_TABLE, ids=[r[0] for r in LABEL_TABLE])
def test_labels(desc, job, rtype, index, labels):
    assert _pod(job, rtype, index)["metadata"]["labels"] == labels
    assert _svc(job, rtype, index)["metadata"]["labels"] == labels


OWNER = [{"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "name": "tf-job", "uid": UID,
          "controller": True, "blockOwnerDeletion": True}]


@pytest.mark.parametrize("version", ["v1", "v1beta1", "v1alpha2"])
def test_owner_references_and_names(version):
    job = model(tfjob({"Worker": 2}, version=version))
    for obj in (_pod(job, "Worker", 1), _svc(job, "Worker", 1)):
        assert obj["metadata"]["ownerReferences"] == OWNER
        assert obj["metadata"]["name"] == "tf-job-worker-1"
        assert obj["metadata"]["namespace"] == "ml"


def _ports(*ports):
    return rspec(template=pod_template(container(ports=list(ports))))


# (description, replica spec, expected service ports, expected tensorflow container ports)
PORT_TABLE = [
    ("no ports: tfjob-port 2222 added", rspec(),
     [{"name": "tfjob-port", "port": 2222, "targetPort": 2222}],
     [{"name": "tfjob-port", "containerPort": 2222}]),
    ("custom tfjob-port", _ports({"name": "tfjob-port", "containerPort": 3000}),
     [{"name": "tfjob-port", "port": 3000, "targetPort": 3000}],
     [{"name": "tfjob-port", "containerPort": 3000}]),
    ("other named port kept, tfjob-port added", _ports({"name": "metrics", "containerPort": 8080}),
     [{"name": "metrics", "port": 8080, "targetPort": 8080}, {"name": "tfjob-port", "port": 2222, "targetPort": 2222}],
     [{"name": "metrics", "containerPort": 8080}, {"name": "tfjob-port", "containerPort": 2222}]),
    ("unnamed 2222 becomes the tfjob-port, not a second 2222", _ports({"containerPort": 2222}),
     [{"name": "tfjob-port", "port": 2222, "targetPort": 2222}],
     [{"containerPort": 2222, "name": "tfjob-port"}]),
    ("2222 named otherwise is exposed once, under its name", _ports({"name": "grpc", "containerPort": 2222}),
     [{"name": "grpc", "port": 2222, "targetPort": 2222}],
     [{"name": "grpc", "containerPort": 2222}]),
    ("unnamed port not exposed", _ports({"containerPort": 9000}),
     [{"name": "tfjob-port", "port": 2222, "targetPort": 2222}],
     [{"containerPort": 9000}, {"name": "tfjob-port", "containerPort": 2222}]),
]


@pytest.mark.parametrize("desc,spec,svc_ports,ctr_ports", PORT_TABLE, ids=[r[0] for r in PORT_TABLE])
def test_ports(desc, spec, svc_ports, ctr_ports):
    job = model(tfjob({"Worker": spec}))
    svc = _svc(job, "Worker", 0)
    assert svc["spec"] == {
        "clusterIP": "None",
        "publishNotReadyAddresses": True,
        "selector": {"training.kubeflow.org/operator-name": "tfjob-controller",
                     "training.kubeflow.org/job-name": "tf-job",
                     "training.kubeflow.org/replica-type": "worker",
                     "training.kubeflow.org/replica-index": "0"},
        "ports": svc_ports,
    }
    assert _pod(job, "Worker", 0)["spec"]["containers"][0]["ports"] == ctr_ports


def test_ports_only_from_tensorflow_container():
    job = model(tfjob({"Worker": rspec(template=pod_template(
        container(), container(name="sidecar", ports=[{"name": "side", "containerPort": 7000}])))}))
    assert _svc(job, "Worker", 0)["spec"]["ports"] == [{"name": "tfjob-port", "port": 2222, "targetPort": 2222}]
    assert _pod(job, "Worker", 0)["spec"]["containers"][1]["ports"] == [{"name": "side", "containerPort": 7000}]


# (replica restartPolicy, template restartPolicy, pod restartPolicy)
RESTART_TABLE = [
    ("ExitCode", None, "Never"),
    ("Never", None, "Never"),
    ("OnFailure", None, "OnFailure"),
    ("Always", None, "Always"),
    (None, "OnFailure", "OnFailure"),
    ("ExitCode", "OnFailure", "Never"),
    ("Never", "Always", "Never"),
    (None, None, "Never"),  # the replica's default, as upstream
]


@pytest.mark.parametrize("policy,in_template,pod_policy", RESTART_TABLE)
def test_pod_restart_policy(policy, in_template, pod_policy):
    extra = {"restartPolicy": in_template} if in_template else {}
    job = model(tfjob({"Worker": rspec(restart_policy=policy, template=pod_template(**extra))}))
    assert _pod(job, "Worker", 0)["spec"]["restartPolicy"] == pod_policy


# Decided (README, Differences): a restartPolicy written only in the pod template is the replica's,
# where upstream v1.9 overrides it with Never; either way the user is told, once, in an Event.
# (replica restartPolicy, template restartPolicy, the note)
RESTART_NOTES = [
    (None, "OnFailure", "Worker: restartPolicy OnFailure taken from the pod template; "
                        "set spec.tfReplicaSpecs.Worker.restartPolicy instead"),
    ("Never", "Always", "Worker: pod template restartPolicy Always ignored in favour of "
                        "the replica's restartPolicy Never"),
    ("OnFailure", "OnFailure", None),
    (None, None, None),
]


@pytest.mark.parametrize("policy,in_template,note", RESTART_NOTES)
def test_template_restart_policy_is_announced(policy, in_template, note):
    extra = {"restartPolicy": in_template} if in_template else {}
    notes = normalize(tfjob({"Worker": rspec(restart_policy=policy, template=pod_template(**extra))})).notes
    assert [n for n in notes if "restartPolicy" in n] == ([note] if note else [])


def test_template_metadata_kept_operator_labels_win():
    tmpl = pod_template(labels={"team": "ml", "training.kubeflow.org/job-name": "spoof"},
                        annotations={"sidecar.istio.io/inject": "false"})
    job = model(tfjob({"Worker": rspec(template=tmpl)}))
    pod = _pod(job, "Worker", 0, PodOptions(markings=PodMarkings(labels={"gang": "g"}, annotations={"a": "b"}),
                                            extra_annotations={"x": "y"}))
    assert pod["metadata"]["labels"] == {"team": "ml", "gang": "g", **_labels("worker", 0, role=True)}
    assert pod["metadata"]["annotations"] == {"sidecar.istio.io/inject": "false", "a": "b", "x": "y"}


def test_no_annotations_key_when_none():
    assert "annotations" not in _pod(W2, "Worker", 0)["metadata"]


def test_tf_config_replaced_not_duplicated():
    env = [{"name": "A", "value": "1"}, {"name": "TF_CONFIG", "value": "stale"}, {"name": "B", "value": "2"}]
    job = model(tfjob({"Worker": rspec(replicas=2, template=pod_template(container(env=env)))}))
    got = _pod(job, "Worker", 1)["spec"]["containers"][0]["env"]
    assert [e["name"] for e in got] == ["A", "B", "TF_CONFIG"]
    assert got[2]["value"].startswith('{"cluster":{"worker":["tf-job-worker-0.ml.svc:2222"')
    assert env[1] == {"name": "TF_CONFIG", "value": "stale"}  # the template is not mutated


def test_tf_config_only_in_tensorflow_container_and_not_for_single_pod():
    job = model(tfjob({"Worker": rspec(replicas=2, template=pod_template(container(), container(name="side")))}))
    pod = _pod(job, "Worker", 0)
    assert [e["name"] for e in pod["spec"]["containers"][0]["env"]] == ["TF_CONFIG"]
    assert "env" not in pod["spec"]["containers"][1]
    single = model(tfjob({"Worker": 1}))
    assert "env" not in _pod(single, "Worker", 0)["spec"]["containers"][0]


def test_cluster_domain_in_tf_config():
    pod = _pod(W2, "PS", 0, PodOptions(cluster_domain="cluster.local"))
    assert "tf-job-ps-0.ml.svc.cluster.local:2222" in pod["spec"]["containers"][0]["env"][0]["value"]


# (template schedulerName, option schedulerName, pod schedulerName)
SCHEDULER_TABLE = [
    (None, None, None),
    (None, "volcano", "volcano"),
    ("kube-batch", None, "kube-batch"),
    ("kube-batch", "volcano", "kube-batch"),
]


@pytest.mark.parametrize("own,option,expected", SCHEDULER_TABLE)
def test_scheduler_name(own, option, expected):
    extra = {"schedulerName": own} if own else {}
    job = model(tfjob({"Worker": rspec(template=pod_template(**extra))}))
    assert _pod(job, "Worker", 0, PodOptions(scheduler_name=option))["spec"].get("schedulerName") == expected


def test_user_pod_spec_kept():
    tmpl = pod_template(nodeSelector={"gpu": "a100"}, tolerations=[{"key": "k", "operator": "Exists"}],
                        serviceAccountName="trainer", restartPolicy="Always")
    job = model(tfjob({"Worker": rspec(restart_policy="ExitCode", template=tmpl)}))
    spec = _pod(job, "Worker", 0)["spec"]
    assert spec["nodeSelector"] == {"gpu": "a100"}
    assert spec["tolerations"] == [{"key": "k", "operator": "Exists"}]
    assert spec["serviceAccountName"] == "trainer"
    assert spec["restartPolicy"] == "Never"


def _all_children(obj):
    job = normalize(obj).job
    out = []
    for r in job.replicas:
        for i in range(r.replicas):
            out.append(_pod(job, r.type, i, PodOptions(scheduler_name="volcano")))
            out.append(_svc(job, r.type, i))
    return out


VALIDATE_CASES = [(sid, j) for sid, j in seed_jobs()] + [
    ("chief-ps-worker-evaluator", tfjob({"Chief": 1, "PS": 2, "Worker": 3, "Evaluator": 1})),
    ("custom ports", tfjob({"Worker": _ports({"name": "tfjob-port", "containerPort": 3000},
                                            {"name": "metrics", "containerPort": 8080})})),
]


@pytest.mark.parametrize("desc,obj", VALIDATE_CASES, ids=[c[0] for c in VALIDATE_CASES])
def test_children_valid_kubernetes_objects(desc, obj):
    children = _all_children(obj)
    assert children
    for child in children:
        kubernetes_validate.validate(child, kubernetes_validate.latest_version(), strict=True)
