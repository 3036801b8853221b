"""TF_CONFIG: exact strings, as upstream's clients parse them."""
import json

import pytest

from core_fixtures import TEMPLATES, container, model, pod_template, rspec, tfjob
from tfop.children.pod import PodOptions, build_pod
from tfop.children.tfconfig import ClusterConfig, cluster_spec, tf_config


def _job(replicas, **spec):
    return model(tfjob(replicas, **spec))


def _port(port):
    return rspec(template=pod_template(container(ports=[{"name": "tfjob-port", "containerPort": port}])))


PS2_W4 = _job({"PS": 2, "Worker": 4})
PS2_W4_CLUSTER = ('{"ps":["tf-job-ps-0.ml.svc:2222","tf-job-ps-1.ml.svc:2222"],'
                  '"worker":["tf-job-worker-0.ml.svc:2222","tf-job-worker-1.ml.svc:2222",'
                  '"tf-job-worker-2.ml.svc:2222","tf-job-worker-3.ml.svc:2222"]}')
CWE = _job({"Chief": 1, "Worker": 1, "Evaluator": 1})
CWE_CLUSTER = ('{"chief":["tf-job-chief-0.ml.svc:2222"],"evaluator":["tf-job-evaluator-0.ml.svc:2222"],'
               '"worker":["tf-job-worker-0.ml.svc:2222"]}')
PORTS = _job({"PS": _port(3333), "Worker": {**_port(4444), "replicas": 2}})
PORTS_CLUSTER = ('{"ps":["tf-job-ps-0.ml.svc:3333"],'
                 '"worker":["tf-job-worker-0.ml.svc:4444","tf-job-worker-1.ml.svc:4444"]}')
DYN = _job({"PS": 2, "Worker": 3}, enableDynamicWorker=True)
DYN_PS = '["tf-job-ps-0.ml.svc:2222","tf-job-ps-1.ml.svc:2222"]'


def _cfg(cluster, rtype, index):
    return f'{{"cluster":{cluster},"task":{{"type":"{rtype}","index":{index}}},"environment":"cloud"}}'


# (description, job, type, index, cluster domain, expected TF_CONFIG)
TABLE = [
    ("2 PS + 4 workers: ps-0", PS2_W4, "PS", 0, "", _cfg(PS2_W4_CLUSTER, "ps", 0)),
    ("2 PS + 4 workers: ps-1", PS2_W4, "PS", 1, "", _cfg(PS2_W4_CLUSTER, "ps", 1)),
    ("2 PS + 4 workers: worker-3", PS2_W4, "Worker", 3, "", _cfg(PS2_W4_CLUSTER, "worker", 3)),
    ("chief+worker+evaluator: chief", CWE, "Chief", 0, "", _cfg(CWE_CLUSTER, "chief", 0)),
    ("chief+worker+evaluator: evaluator", CWE, "Evaluator", 0, "", _cfg(CWE_CLUSTER, "evaluator", 0)),
    ("custom tfjob-port per type", PORTS, "Worker", 1, "", _cfg(PORTS_CLUSTER, "worker", 1)),
    ("cluster domain", _job({"PS": 1, "Worker": 1}), "Worker", 0, "cluster.local",
     _cfg('{"ps":["tf-job-ps-0.ml.svc.cluster.local:2222"],"worker":["tf-job-worker-0.ml.svc.cluster.local:2222"]}',
          "worker", 0)),
    ("master lower-cased", _job({"Master": 1, "Worker": 1}), "Master", 0, "",
     _cfg('{"master":["tf-job-master-0.ml.svc:2222"],"worker":["tf-job-worker-0.ml.svc:2222"]}', "master", 0)),
    ("single-pod job", _job({"Worker": 1}), "Worker", 0, "", None),
    ("single pod, other types at 0 replicas", _job({"Worker": 1, "PS": 0}), "Worker", 0, "", None),
]


def _sparse(cluster, rtype, index):
    return f'{{"cluster":{cluster},"task":{{"type":"{rtype}","index":{index}}}}}'


DYN_CHIEF = _job({"Chief": 1, "Worker": 2, "Evaluator": 1}, enableDynamicWorker=True)
DYN_PS0 = _job({"PS": 0, "Worker": 2}, enableDynamicWorker=True)
# upstream v1.9's sparse TF_CONFIG (enableDynamicWorker), byte for byte: Go's field order (worker, ps),
# no "environment"; a worker sees itself and every PS, a PS only itself, any other type neither.
SPARSE_TABLE = [
    ("worker sees itself and every PS", DYN, "Worker", 2, "",
     _sparse(f'{{"worker":{{"2":"tf-job-worker-2.ml.svc:2222"}},"ps":{DYN_PS}}}', "worker", 2)),
    ("worker 0", DYN, "Worker", 0, "",
     _sparse(f'{{"worker":{{"0":"tf-job-worker-0.ml.svc:2222"}},"ps":{DYN_PS}}}', "worker", 0)),
    ("PS sees only itself", DYN, "PS", 1, "",
     _sparse('{"worker":{},"ps":["tf-job-ps-1.ml.svc:2222"]}', "ps", 1)),
    ("chief sees no one", DYN_CHIEF, "Chief", 0, "", _sparse('{"worker":{},"ps":[]}', "chief", 0)),
    ("evaluator sees no one", DYN_CHIEF, "Evaluator", 0, "", _sparse('{"worker":{},"ps":[]}', "evaluator", 0)),
    ("no PS type: Go's nil list is null", DYN_CHIEF, "Worker", 1, "",
     _sparse('{"worker":{"1":"tf-job-worker-1.ml.svc:2222"},"ps":null}', "worker", 1)),
    ("PS type at 0 replicas: an empty list", DYN_PS0, "Worker", 1, "",
     _sparse('{"worker":{"1":"tf-job-worker-1.ml.svc:2222"},"ps":[]}', "worker", 1)),
    ("cluster domain and ports", _job({"PS": _port(3333), "Worker": {**_port(4444), "replicas": 12}},
                                      enableDynamicWorker=True), "Worker", 11, "cluster.local",
     _sparse('{"worker":{"11":"tf-job-worker-11.ml.svc.cluster.local:4444"},'
             '"ps":["tf-job-ps-0.ml.svc.cluster.local:3333"]}', "worker", 11)),
    ("single pod: none", _job({"Worker": 1}, enableDynamicWorker=True), "Worker", 0, "", None),
]
TABLE += SPARSE_TABLE


@pytest.mark.parametrize("desc,job,rtype,index,domain,expected", TABLE, ids=[r[0] for r in TABLE])
def test_tf_config(desc, job, rtype, index, domain, expected):
    got = tf_config(job, rtype, index, domain)
    assert got == expected
    if got is not None:
        assert json.loads(got)["task"] == {"type": rtype.lower(), "index": index}


def test_cluster_spec_lists_zero_replica_types_empty():
    job = _job({"PS": 0, "Worker": 2})
    assert cluster_spec(job) == {"ps": [], "worker": ["tf-job-worker-0.ml.svc:2222", "tf-job-worker-1.ml.svc:2222"]}


# ------------------------------------------------------------ the cluster part written once per job
def _reference(job, rtype, index, domain=""):
    """TF_CONFIG as it was built per pod before ClusterConfig: the whole body through json.dumps."""
    if job.total_replicas == 1:
        return None
    full = cluster_spec(job, domain)
    task = {"type": rtype.lower(), "index": index}
    if job.dynamic_worker:  # upstream's SparseClusterSpec{Worker map, PS list}; a missing PS list is nil
        sparse = {"worker": {}, "ps": []}
        if rtype == "Worker":
            sparse = {"worker": {str(index): full["worker"][index]}, "ps": full.get("ps")}
        elif rtype == "PS":
            sparse["ps"] = [full["ps"][index]]
        return json.dumps({"cluster": sparse, "task": task}, separators=(",", ":"))
    body = {"cluster": dict(sorted(full.items())), "task": task, "environment": "cloud"}
    return json.dumps(body, separators=(",", ":"))


SAME_BYTES = [  # (description, job, cluster domain)
    ("2 PS + 4 workers", PS2_W4, ""),
    ("chief, worker, evaluator", CWE, ""),
    ("ports per type", PORTS, "cluster.local"),
    ("dynamic workers", DYN, ""),
    ("dynamic workers without PS", _job({"Chief": 1, "Worker": 3}, enableDynamicWorker=True), ""),
    ("dynamic PS only", _job({"PS": 2}, enableDynamicWorker=True), "example.org"),
    ("every type, one at 0", _job({"Master": 1, "PS": 3, "Worker": 12, "Evaluator": 0}), ""),
    ("single pod", _job({"Worker": 1}), ""),
    ("many workers", _job({"PS": 3, "Worker": 150}), ""),
]


@pytest.mark.parametrize("desc,job,domain", SAME_BYTES, ids=[r[0] for r in SAME_BYTES])
def test_cluster_config_is_byte_identical_to_the_per_pod_body(desc, job, domain):
    config = ClusterConfig(job, domain)
    for replica in job.replicas:
        for index in range(replica.replicas):
            expected = _reference(job, replica.type, index, domain)
            assert config.for_task(replica.type, index) == expected, (replica.type, index)
            assert tf_config(job, replica.type, index, domain) == expected


def test_pods_of_one_pass_share_the_cluster_text():
    """build_pod with the pass's ClusterConfig writes exactly what it writes alone."""
    config = ClusterConfig(PS2_W4)
    for rtype, index in [("PS", 1), ("Worker", 0), ("Worker", 3)]:
        replica = PS2_W4.replica(rtype)
        shared = build_pod(TEMPLATES, PS2_W4, replica, index, PodOptions(cluster_config=config))
        alone = build_pod(TEMPLATES, PS2_W4, replica, index, PodOptions())
        assert shared == alone
        env = {e["name"]: e["value"] for e in shared["spec"]["containers"][0]["env"]}
        assert env["TF_CONFIG"] == _cfg(PS2_W4_CLUSTER, rtype.lower(), index)
