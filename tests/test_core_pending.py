"""Why a gang waits, in tfop's words (tfop/core/pending.py): plain tables of inputs -> sentences."""
from fractions import Fraction

import pytest

from core_fixtures import container, model, pod_template, rspec, tfjob
from tfop.core import pending, quota, room
from tfop.core.pending import Waiting
from tfop.core.quota import QuotaShortage
from tfop.core.room import Capacity, NodeRoom, Taint
from tfop.gang.shape import compute_shape

GPU = "nvidia.com/gpu"


def job(workers=5, gpus=2, ps=0, min_available=None, queue=None, priority=None, tolerations=None, **pc):
    worker_spec = {"tolerations": tolerations} if tolerations else {}
    worker_spec.update(pc.get("placement") or {})
    if pc.get("worker_priority"):
        worker_spec["priorityClassName"] = pc["worker_priority"]
    replicas = {"Worker": rspec(workers, template=pod_template(
        container(resources={"limits": {GPU: str(gpus)}, "requests": {"cpu": "1"}}), **worker_spec))}
    if ps:
        replicas["PS"] = rspec(ps, template=pod_template(container(resources={"requests": {"cpu": "2"}})))
    policy = {k: v for k, v in {"minAvailable": min_available, "queue": queue, "priorityClass": priority}.items() if v}
    return model(tfjob(replicas, run_policy={"schedulingPolicy": policy} if policy else None))


def node(name, gpus=0, used=0, cpu=32, ready=True, cordoned=False, taints=(), labels=None):
    return NodeRoom(name, {"cpu": cpu * 1000, GPU: gpus * 1000}, {GPU: used * 1000} if used else {},  # thousandths
                    ready=ready, unschedulable=cordoned, taints=tuple(taints), labels=labels or {})


def gpu_nodes(n, gpus, used=0):
    return Capacity(tuple(node(f"n{i}", gpus, used) for i in range(n)))


def explain(j, capacity=None, members=(), queues=None, priorities=None):
    shape = compute_shape(j, priorities or {})
    return pending.explain_gang(j, shape, list(members), "volcano", capacity, queues,
                                {} if priorities is None else priorities)


GONE = Taint("gpu", "busy", "NoSchedule")

# (case, job, capacity, expected Waiting)
RESOURCE_TABLE = [
    ("not enough GPUs in the cluster: what it needs, what is free, where",
     job(5, gpus=2, min_available=4), gpu_nodes(2, 4, used=2),
     Waiting("waiting for 8 nvidia.com/gpu for 4 pods as one gang; 4 are free on 2 nodes (at most 2 on one node)",
             "InsufficientResources")),
    ("every pod of the job when minAvailable is unset",
     job(5, gpus=2), gpu_nodes(2, 4, used=2),
     Waiting("waiting for 10 nvidia.com/gpu for 5 pods as one gang; 4 are free on 2 nodes (at most 2 on one node)",
             "InsufficientResources")),
    ("no GPU free anywhere",
     job(2, gpus=1), gpu_nodes(3, 2, used=2),
     Waiting("waiting for 2 nvidia.com/gpu for 2 pods as one gang; none are free", "InsufficientResources")),
    ("one GPU on one node",
     job(2, gpus=1), Capacity((node("a", 2, used=1), node("b", 2, used=2))),
     Waiting("waiting for 2 nvidia.com/gpu for 2 pods as one gang; 1 is free on 1 node", "InsufficientResources")),
    ("enough in total, but each pod needs 4 GPUs on one node and nodes have 2",
     job(4, gpus=4), gpu_nodes(8, 4, used=2),
     Waiting("waiting for 16 nvidia.com/gpu for 4 pods as one gang; 16 are free on 8 nodes (at most 2 on one "
             "node), but no node has 4 free for one worker pod", "NoNodeFitsPod")),
    ("enough in total, some pods fit",
     job(3, gpus=4), Capacity((node("a", 8), node("b", 4, used=2), node("c", 4, used=2))),
     Waiting("waiting for 12 nvidia.com/gpu for 3 pods as one gang; 12 are free on 3 nodes (at most 8 on one "
             "node), but only 2 of 3 worker pods fit (4 nvidia.com/gpu each on one node)", "NoNodeFitsPod")),
    ("room for all: the scheduler has yet to place them",
     job(4, gpus=2), gpu_nodes(2, 4),
     Waiting("waiting for volcano to place 4 pods as one gang; the cluster's free capacity fits them", fits=True)),
    ("not ready, cordoned and tainted nodes hold no room",
     job(2, gpus=2), Capacity((node("a", 8, ready=False), node("b", 8, cordoned=True), node("c", 8, taints=[GONE]),
                               node("d", 2))),
     Waiting("waiting for 4 nvidia.com/gpu for 2 pods as one gang; 2 are free on 1 node", "InsufficientResources")),
    ("a tolerated taint keeps no pod off",
     job(2, gpus=2, tolerations=[{"key": "gpu", "operator": "Exists"}]), Capacity((node("c", 8, taints=[GONE]),)),
     Waiting("waiting for volcano to place 2 pods as one gang; the cluster's free capacity fits them", fits=True)),
    ("only the nodes the pods select",
     job(2, gpus=2, placement={"nodeSelector": {"pool": "a"}}),
     Capacity((node("a1", 2, labels={"pool": "a"}), node("b1", 8, labels={"pool": "b"}), node("c1", 8))),
     Waiting("waiting for 4 nvidia.com/gpu for 2 pods as one gang; 2 are free on 1 node", "InsufficientResources")),
    ("only the nodes the pods' required node affinity accepts",
     job(2, gpus=2, placement={"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
         "nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a", "b"]}]},
                               {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}]}}}}),
     Capacity((node("a1", 1, labels={"pool": "a"}), node("b1", 1, labels={"pool": "b"}),
               node("g1", 1, labels={"gpu": ""}), node("c1", 8))),
     Waiting("waiting for 4 nvidia.com/gpu for 2 pods as one gang; 3 are free on 3 nodes (at most 1 on one node)",
             "InsufficientResources")),
    ("a PS without GPUs takes CPU only; the GPUs are what is short",
     job(2, gpus=4, ps=1), Capacity((node("a", 4, cpu=64), node("b", 2, cpu=64))),
     Waiting("waiting for 8 nvidia.com/gpu for 3 pods as one gang; 6 are free on 2 nodes (at most 4 on one node)",
             "InsufficientResources")),
    ("CPU short once the GPUs fit",
     job(2, gpus=1), Capacity((node("a", 4, cpu=1), node("b", 4, cpu=0))),
     Waiting("waiting for 2 cpu for 2 pods as one gang; 1 is free on 1 node", "InsufficientResources")),
]


@pytest.mark.parametrize("case,j,capacity,expected", RESOURCE_TABLE, ids=[r[0] for r in RESOURCE_TABLE])
def test_resources(case, j, capacity, expected):
    assert explain(j, capacity) == expected


def bound(j, rtype, index):
    labels = {"training.kubeflow.org/replica-type": rtype.lower()}
    return {"metadata": {"name": f"{j.name}-{rtype.lower()}-{index}", "labels": labels},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]}}


def test_members_bound_already_are_counted_on_their_nodes_not_again():
    j = job(4, gpus=2)
    members = [bound(j, "Worker", 0), bound(j, "Worker", 1)]
    assert explain(j, gpu_nodes(2, 2, used=2), members) == Waiting(
        "waiting for 4 nvidia.com/gpu for 2 pods as one gang; none are free", "InsufficientResources")
    everyone = [bound(j, "Worker", i) for i in range(4)]
    assert explain(j, gpu_nodes(2, 2, used=2), everyone) == Waiting(
        "all 4 pods of the gang are placed; waiting for them to start", placed=True)


# (case, job, queues, priorities, expected): these come before resources
QUEUE_TABLE = [
    ("a missing queue", job(2, queue="research"), {"default": "Open"}, {},
     Waiting("queue research does not exist", "QueueNotFound")),
    ("a closed queue", job(2, queue="research"), {"research": "Closed"}, {},
     Waiting("queue research is closed", "QueueClosed")),
    ("a queue no controller opened yet", job(2, queue="research"), {"research": ""}, {},
     Waiting("queue research is not open", "QueueClosed")),
    ("Volcano's default queue when the job names none", job(2), {}, {},
     Waiting("queue default does not exist", "QueueNotFound")),
    ("a missing PriorityClass of the gang", job(2, priority="gpu-high"), None, {},
     Waiting("priority class gpu-high does not exist", "PriorityClassNotFound")),
    ("a missing PriorityClass of a replica type", job(2, worker_priority="gpu-low"), {"default": "Open"}, {"x": 1},
     Waiting("priority class gpu-low does not exist", "PriorityClassNotFound")),
    ("an open queue and a PriorityClass that exists: on to resources", job(1, gpus=1, priority="gpu-high"),
     {"default": "Open"}, {"gpu-high": 1000},
     Waiting("waiting for 1 nvidia.com/gpu for 1 pod as one gang; none are free", "InsufficientResources")),
]


@pytest.mark.parametrize("case,j,queues,priorities,expected", QUEUE_TABLE, ids=[r[0] for r in QUEUE_TABLE])
def test_queue_and_priority(case, j, queues, priorities, expected):
    assert explain(j, gpu_nodes(1, 0), queues=queues, priorities=priorities) == expected


def test_without_capacity_the_sentence_says_what_the_gang_needs():
    assert explain(job(5, gpus=2, ps=1)) == Waiting(
        "waiting for volcano to place 6 pods as one gang (10 nvidia.com/gpu, 7 cpu)")
    assert explain(job(3, gpus=0)).message == "waiting for volcano to place 3 pods as one gang (3 cpu)"


# (case, shortage, expected)
QUOTA_TABLE = [
    ("what the job needs and what its quota has left",
     QuotaShortage("team-a", "gpus", {GPU: (Fraction(8), Fraction(4))}),
     Waiting("queue team-a (ClusterQueue gpus) holds the job: it needs 8 nvidia.com/gpu, 4 are left in its quota",
             "QueueQuotaExceeded")),
    ("more than the quota could ever hold: nothing left said",
     QuotaShortage("team-a", "", {GPU: (Fraction(8), None)}),
     Waiting("queue team-a holds the job: it needs 8 nvidia.com/gpu", "QueueQuotaExceeded")),
    ("two resources, GPUs first",
     QuotaShortage("team-a", "gpus", {"memory": (Fraction(2 ** 31), Fraction(2 ** 30)), GPU: (Fraction(2), Fraction(1))}),
     Waiting("queue team-a (ClusterQueue gpus) holds the job: it needs 2 nvidia.com/gpu, 1 is left in its quota; "
             "it needs 2Gi memory, 1Gi are left in its quota", "QueueQuotaExceeded")),
    ("Kueue's words when they name no amount",
     QuotaShortage("team-a", "", {}, "ClusterQueue gpus is inactive"),
     Waiting("queue team-a holds the job: ClusterQueue gpus is inactive", "QueueQuotaExceeded")),
]


UNUSED = ("couldn't assign flavors to pod set worker: insufficient unused quota for nvidia.com/gpu in flavor "
          "default-flavor, 4 more needed")
MAXIMUM = ("couldn't assign flavors to pod set worker: insufficient quota for nvidia.com/gpu in flavor default-flavor, "
           "request > maximum capacity (16 > 8)")
MAXIMUM_SO_FAR = ("couldn't assign flavors to pod set worker: insufficient quota for nvidia.com/gpu in flavor "
                  "default-flavor, previously considered podsets requests (2) + current podset request (14) > "
                  "maximum capacity (8)")  # Kueue v0.15
# (case, Kueue's message, what the job asks, expected)
KUEUE_TABLE = [
    ("unused quota short", UNUSED, {GPU: Fraction(8), "cpu": Fraction(2)},
     Waiting("queue team-a (ClusterQueue gpus) holds the job: it needs 8 nvidia.com/gpu, 4 are left in its quota",
             "QueueQuotaExceeded")),
    ("more than the quota ever holds", MAXIMUM, {GPU: Fraction(16)},
     Waiting("queue team-a (ClusterQueue gpus) holds the job: it needs 16 nvidia.com/gpu, more than its quota of 8 "
             "ever holds", "QueueQuotaExceeded")),
    ("more than the quota ever holds, as Kueue v0.15 says it", MAXIMUM_SO_FAR, {GPU: Fraction(16)},
     Waiting("queue team-a (ClusterQueue gpus) holds the job: it needs 16 nvidia.com/gpu, more than its quota of 8 "
             "ever holds", "QueueQuotaExceeded")),
    ("Kueue v0.15 counting only the pod sets so far", MAXIMUM_SO_FAR, {},
     Waiting("queue team-a (ClusterQueue gpus) holds the job: it needs 16 nvidia.com/gpu, more than its quota of 8 "
             "ever holds", "QueueQuotaExceeded")),
    ("a missing LocalQueue", "LocalQueue team-a doesn't exist", {GPU: Fraction(8)},
     Waiting("queue team-a does not exist", "QueueNotFound")),
    ("words without numbers are kept", "ClusterQueue gpus is inactive", {GPU: Fraction(8)},
     Waiting("queue team-a (ClusterQueue gpus) holds the job: ClusterQueue gpus is inactive", "QueueQuotaExceeded")),
]


@pytest.mark.parametrize("case,said,asked,expected", KUEUE_TABLE, ids=[r[0] for r in KUEUE_TABLE])
def test_kueue_words_read_for_their_numbers(case, said, asked, expected):
    assert quota.explain_quota(quota.kueue_shortage("team-a", "gpus", said, asked)) == expected


@pytest.mark.parametrize("case,shortage,expected", QUOTA_TABLE, ids=[r[0] for r in QUOTA_TABLE])
def test_kueue_quota(case, shortage, expected):
    assert quota.explain_quota(shortage) == expected


# (case, status, expected status.message: the Message column)
HEADLINE_TABLE = [
    ("a waiting gang: tfop's sentence",
     {"conditions": [{"type": "Created", "message": "TFJob ml/a is created."}],
      "gang": {"reason": "InsufficientResources", "message": "waiting for 8 nvidia.com/gpu ..."}},
     "waiting for 8 nvidia.com/gpu ..."),
    ("a gang that no longer waits: the latest condition",
     {"conditions": [{"type": "Created", "message": "c"}, {"type": "Running", "message": "TFJob ml/a is running."}],
      "gang": {"backend": "volcano", "group": "a"}},
     "TFJob ml/a is running."),
    ("no gang", {"conditions": [{"type": "Failed", "message": "boom"}]}, "boom"),
    ("nothing yet", {}, ""),
]


@pytest.mark.parametrize("case,status,expected", HEADLINE_TABLE, ids=[r[0] for r in HEADLINE_TABLE])
def test_headline(case, status, expected):
    assert pending.headline(status) == expected


TOLERATION_TABLE = [
    ([], Taint("a", "b", "NoSchedule"), False),
    ([{"operator": "Exists"}], Taint("a", "b", "NoExecute"), True),
    ([{"key": "a", "operator": "Exists"}], Taint("a", "b", "NoSchedule"), True),
    ([{"key": "a", "value": "b"}], Taint("a", "b", "NoSchedule"), True),
    ([{"key": "a", "value": "c"}], Taint("a", "b", "NoSchedule"), False),
    ([{"key": "a", "operator": "Exists", "effect": "NoExecute"}], Taint("a", "b", "NoSchedule"), False),
]


@pytest.mark.parametrize("tolerations,taint,expected", TOLERATION_TABLE)
def test_tolerations(tolerations, taint, expected):
    assert room.tolerates(tolerations, taint) is expected


# -- a job Kueue holds: status.admission through a whole pass (tfop/core/admission.py) ------------
def kueue_job(suspend=True, status=None):
    from core_fixtures import with_status
    worker = rspec(2, template=pod_template(container(resources={"limits": {GPU: "4"}})))
    j = model(tfjob({"Worker": worker}, run_policy={"suspend": suspend}))
    return with_status(j, **(status or {}))


def workload(reserved=None, message="", admitted=False):
    conds = []
    if reserved is not None:
        conds.append({"type": "QuotaReserved", "status": reserved, "reason": "Pending", "message": message})
    if admitted:
        conds.append({"type": "Admitted", "status": "True", "reason": "Admitted", "message": "ok"})
    return {"metadata": {"name": "tfjob-tf-job-1a2b3", "namespace": "ml"}, "spec": {"queueName": "team-a"},
            "status": {"conditions": conds}}


def kueue_pass(j, wl, cluster_queue="gpus"):
    from core_fixtures import run
    from tfop.core.context import Observed
    return run(j, Observed(workload=wl, cluster_queue=cluster_queue))


def test_kueue_hold_said_plainly_with_one_event_per_cause():
    short = workload("False", UNUSED)
    plan = kueue_pass(kueue_job(), short)
    sentence = "queue team-a (ClusterQueue gpus) holds the job: it needs 8 nvidia.com/gpu, 4 are left in its quota"
    admission = plan.status["admission"]
    assert (admission["queue"], admission["clusterQueue"], admission["reason"], admission["message"],
            admission["schedulerMessage"]) == ("team-a", "gpus", "QueueQuotaExceeded", sentence, UNUSED)
    assert plan.status["message"] == sentence
    assert [(e.type, e.reason, e.message) for e in plan.events if e.type == "Warning"] == [
        ("Warning", "QueueQuotaExceeded", sentence)]

    again = kueue_pass(kueue_job(status=plan.status), workload("False", UNUSED.replace("4 more", "2 more")))
    assert again.status["admission"]["message"].endswith("6 are left in its quota")
    assert [e for e in again.events if e.type == "Warning"] == []


def test_kueue_hold_before_kueue_says_anything_and_after_admission():
    plan = kueue_pass(kueue_job(), workload())
    assert plan.status["admission"]["message"] == "waiting for Kueue to admit the job from queue team-a"
    assert "reason" not in plan.status["admission"] and not [e for e in plan.events if e.type == "Warning"]
    admitted = kueue_pass(kueue_job(suspend=False, status=plan.status), workload("True", "", admitted=True))
    assert "admission" not in admitted.status
    assert admitted.status["message"] == admitted.status["conditions"][-1]["message"]
    assert "admission" not in (kueue_pass(kueue_job(), None).status or {}), "a job suspended by its user"
