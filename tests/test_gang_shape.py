from dataclasses import replace

import pytest

from gang_fixtures import container, job, replica, seed000, seed003, template
from tfop.gang.base import GangShape
from tfop.gang.shape import compute_shape, gang_of, pod_requests, priority_order, shape_problems
from tfop.api.validation import WARNING, Problem

PRIO = {"high": 1000, "low": 10, "also-high": 1000}


def prio_tmpl(pc, **limits):
    return template(container(limits=limits or {"cpu": "1"}), priorityClassName=pc)


def test_seed003_shape():
    assert compute_shape(seed003(), {}) == GangShape(
        group_name="tf-smoke-gpu", min_member=5,
        min_task_member={"PS": 1, "Worker": 4},
        min_resources={"cpu": "1", "nvidia.com/gpu": "8"},
        pod_resources={"PS": {"cpu": "1"}, "Worker": {"nvidia.com/gpu": "2"}},
        queue=None, priority_class=None, schedule_timeout_seconds=None)


def test_seed000_shape():
    assert compute_shape(seed000(), {}) == GangShape(
        group_name="tfjob-gang-scheduling", min_member=2,
        min_task_member={"PS": 1, "Worker": 1},
        min_resources={"cpu": "1", "nvidia.com/gpu": "1"},
        pod_resources={"PS": {"cpu": "1"}, "Worker": {"nvidia.com/gpu": "1"}})


def test_policy_fields_pass_through():
    shape = compute_shape(seed003(queue="research", priority_class="high",
                                  schedule_timeout_seconds=300), PRIO)
    assert (shape.queue, shape.priority_class, shape.schedule_timeout_seconds) == \
        ("research", "high", 300)


def test_min_resources_override_is_canonicalised():
    shape = compute_shape(seed003(min_resources={"memory": "1.5Gi", "cpu": "2000m"}), {})
    assert shape.min_resources == {"cpu": "2", "memory": "1536Mi"}
    assert shape.min_member == 5  # the override changes resources only


# (minAvailable, priority of PS, priority of Worker) -> min_task_member, min_resources
MIN_AVAILABLE = [
    (None, None, None, {"PS": 1, "Worker": 4}, {"cpu": "1", "nvidia.com/gpu": "8"}),
    (3, None, None, {"PS": 1, "Worker": 2}, {"cpu": "1", "nvidia.com/gpu": "4"}),
    (3, None, "high", {"Worker": 3}, {"nvidia.com/gpu": "6"}),
    (3, "low", "high", {"Worker": 3}, {"nvidia.com/gpu": "6"}),
    (5, "low", "high", {"Worker": 4, "PS": 1}, {"cpu": "1", "nvidia.com/gpu": "8"}),
    (2, "high", "also-high", {"PS": 1, "Worker": 1}, {"cpu": "1", "nvidia.com/gpu": "2"}),
    (1, "high", "low", {"PS": 1}, {"cpu": "1"}),
]


@pytest.mark.parametrize("min_available,ps_pc,worker_pc,members,resources", MIN_AVAILABLE)
def test_min_available_fills_types_in_priority_order(min_available, ps_pc, worker_pc,
                                                     members, resources):
    j = job(replica("PS", 1, template(container(limits={"cpu": "1"}), priorityClassName=ps_pc)),
            replica("Worker", 4, template(container(limits={"nvidia.com/gpu": 2}),
                                          priorityClassName=worker_pc)),
            min_available=min_available)
    shape = compute_shape(j, PRIO)
    assert shape.min_member == (min_available or 5)
    assert dict(shape.min_task_member) == members
    assert list(shape.min_task_member) == list(members)  # priority order kept
    assert shape.min_resources == resources


def test_priority_ties_follow_replica_type_order_not_spec_order():
    j = job(replica("Worker", 2, prio_tmpl("high")), replica("PS", 1, prio_tmpl("also-high")),
            replica("Evaluator", 1, prio_tmpl("low")), replica("Chief", 1, prio_tmpl("high")))
    assert [r.type for r in priority_order(j, PRIO)] == ["Chief", "PS", "Worker", "Evaluator"]


def test_unknown_priority_class_counts_as_zero():
    j = job(replica("PS", 1, prio_tmpl("missing")), replica("Worker", 1, prio_tmpl("low")))
    assert [r.type for r in priority_order(j, PRIO)] == ["Worker", "PS"]


def test_zero_replica_types_are_left_out():
    j = job(replica("PS", 0, prio_tmpl(None)), replica("Worker", 2, prio_tmpl(None)))
    shape = compute_shape(j, {})
    assert (shape.min_member, dict(shape.min_task_member), list(shape.pod_resources)) == \
        (2, {"Worker": 2}, ["Worker"])


def test_shared_priority_class_becomes_group_priority():
    j = job(replica("PS", 1, prio_tmpl("high")), replica("Worker", 2, prio_tmpl("high")))
    assert compute_shape(j, PRIO).priority_class == "high"
    mixed = job(replica("PS", 1, prio_tmpl("low")), replica("Worker", 2, prio_tmpl("high")))
    assert compute_shape(mixed, PRIO).priority_class is None


POD_REQUESTS = [
    # requests win over limits, limits fill in the rest
    (template(container(requests={"cpu": "500m"}, limits={"cpu": "1", "memory": "1Gi"})),
     {"cpu": "500m", "memory": "1Gi"}),
    # app containers add up
    (template(container(requests={"cpu": "1", "memory": "1Gi"}),
              container(name="side", requests={"cpu": "250m", "memory": "512Mi"})),
     {"cpu": "1250m", "memory": "1536Mi"}),
    # a big init container sets the floor, per resource
    (template(container(requests={"cpu": "1", "memory": "4Gi"}),
              initContainers=[container(name="init", requests={"cpu": "3", "memory": "1Gi"})]),
     {"cpu": "3", "memory": "4Gi"}),
    # a sidecar keeps running: it adds to the apps and to later init containers
    (template(container(requests={"cpu": "1"}),
              initContainers=[container(name="proxy", requests={"cpu": "1"}, restartPolicy="Always"),
                              container(name="init", requests={"cpu": "2"})]),
     {"cpu": "3"}),
    # pod overhead (RuntimeClass) is added on top
    (template(container(requests={"cpu": "1", "memory": "1Gi"}),
              overhead={"cpu": "250m", "memory": "120Mi"}),
     {"cpu": "1250m", "memory": "1144Mi"}),
    (template(container()), {}),
]


@pytest.mark.parametrize("tmpl,expected", POD_REQUESTS)
def test_pod_requests(tmpl, expected):
    from tfop.api.quantity import format_resources
    assert format_resources(pod_requests(tmpl)) == expected


def field(rtype):
    return f"spec.tfReplicaSpecs.{rtype}.template.spec.priorityClassName"


FIX = "give every replica type the same priorityClassName, or none"
PROBLEMS = [
    (seed003(), []),
    (seed003(min_available=5), []),
    (seed003(min_available=6), [Problem(
        "spec.runPolicy.schedulingPolicy.minAvailable",
        "minAvailable 6 exceeds the job's 5 replicas, so the gang could never start; "
        "set it to at most 5 or remove it", WARNING)]),
    (job(replica("PS", 1, prio_tmpl("high")), replica("Worker", 2, prio_tmpl("high"))), []),
    (job(replica("Worker", 2, prio_tmpl("high")), replica("PS", 1, prio_tmpl(None))), [Problem(
        field("Worker"), "pods of one gang must share one priority, but Worker uses "
        f"'high' (1000) and PS uses none; {FIX}")]),
    (job(replica("PS", 1, prio_tmpl("high")), replica("Worker", 2, prio_tmpl("also-high")),
         replica("Evaluator", 1, prio_tmpl("high"))), [Problem(
        field("Worker"), "pods of one gang must share one priority, but Worker uses "
        f"'also-high' (1000) and PS uses 'high' (1000); {FIX}")]),
    (job(replica("PS", 1, prio_tmpl("gone")), replica("Worker", 2, prio_tmpl("gone"))), [
        Problem(field("PS"), "PriorityClass gone not found; create it or remove it", WARNING),
        Problem(field("Worker"), "PriorityClass gone not found; create it or remove it", WARNING)]),
    (seed003(priority_class="vip"), [Problem(
        "spec.runPolicy.schedulingPolicy.priorityClass",
        "PriorityClass vip not found; create it or remove it", WARNING)]),
    (job(replica("Worker", 1, template(container(limits={"cpu": "lots"}))),
         min_resources={"memory": "1 Gi"}), [
        Problem("spec.tfReplicaSpecs.Worker.template.spec.containers[0].resources.limits.cpu",
                "'lots' is not a Kubernetes quantity"),
        Problem("spec.runPolicy.schedulingPolicy.minResources.memory",
                "'1 Gi' is not a Kubernetes quantity")]),
]


@pytest.mark.parametrize("tfjob,expected", PROBLEMS)
def test_shape_problems(tfjob, expected):
    assert shape_problems(tfjob, PRIO) == expected


def test_shape_survives_bad_quantities():
    j = job(replica("Worker", 2, template(container(limits={"cpu": "lots", "memory": "1Gi"}))),
            min_resources=None)
    assert compute_shape(j, {}).min_resources == {"memory": "2Gi"}


def test_only_bad_quantities_and_mixed_priorities_block():
    # The reconciler fails the job on blocking problems only.
    blocking = [p for _, expected in PROBLEMS for p in expected
                if p.blocking]
    assert all("esources" in p.field or "share one priority" in p.message for p in blocking)
    assert sum("esources" in p.field for p in blocking) == 2


def test_gang_of_computes_once_per_spec_and_priority_values():
    """What a pass reads of the gang is computed once for the job's spec and PriorityClass values: the
    copies each pass makes of the job (its status changed) reuse it; other values or another spec do not."""
    j = seed003(priority_class="high")
    problems, shape = gang_of(j, PRIO)
    assert (list(problems), shape) == (shape_problems(j, PRIO), compute_shape(j, PRIO))
    assert gang_of(replace(j, status={"conditions": []}), dict(PRIO))[1] is shape
    lower = {**PRIO, "high": 5}
    assert gang_of(j, lower)[1] is not shape and gang_of(j, lower)[1] == compute_shape(j, lower)
    more = replace(j, replicas=(j.replicas[0], replace(j.replicas[1], replicas=6)))  # shares j.derived
    assert gang_of(more, PRIO)[1] == compute_shape(more, PRIO) != shape
    mixed = job(replica("PS", 1, prio_tmpl("high")), replica("Worker", 1, prio_tmpl("low")))
    assert gang_of(mixed, PRIO) == (tuple(shape_problems(mixed, PRIO)), None)  # blocked: no shape
