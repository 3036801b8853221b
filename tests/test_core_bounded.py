"""Bounded input: no tenant's job can stop the operator (its size, its quantities, one pass's work)."""
import time

import pytest
import yaml
from click.testing import CliRunner

from core_fixtures import (
    container, context, ctypes, last_condition, model, names, pod_template, rspec, run, running_status, tfjob,
    with_status,
)
from gang_fixtures import job as gang_job
from gang_fixtures import replica, template
from gang_fixtures import container as gang_container
from tfop.api import rules
from tfop.api.normalize import normalize
from tfop.core.context import Observed
from tfop.core.replicas import MAX_CREATES_PER_PASS
from tfop.core.settings import DEFAULT_MAX_PODS_PER_JOB
from tfop.gang.shape import shape_problems
from tfop.tools.cli import cli

HUGE = "1e10000000"  # a valid Kubernetes quantity: 8.8 s of CPU per exact parse before the bound


# ------------------------------------------------------------ the operator's ceiling
# (description, --max-pods-per-job, replicas, fails)
CEILING = [
    ("at the default", DEFAULT_MAX_PODS_PER_JOB, {"Worker": DEFAULT_MAX_PODS_PER_JOB}, False),
    ("one over the default", DEFAULT_MAX_PODS_PER_JOB, {"PS": 1, "Worker": DEFAULT_MAX_PODS_PER_JOB}, True),
    ("a lowered ceiling", 10, {"Chief": 1, "PS": 2, "Worker": 8}, True),
    ("exactly the lowered ceiling", 10, {"Chief": 1, "PS": 1, "Worker": 8}, False),
    ("unset replicas count 1", 2, {"Chief": rspec(replicas=None), "Worker": 2}, True),
]


@pytest.mark.parametrize("desc,limit,replicas,fails", CEILING, ids=[r[0] for r in CEILING])
def test_a_job_over_the_ceiling_fails_before_anything_is_built(desc, limit, replicas, fails):
    job = model(tfjob(replicas))
    plan = run(job, ctx=context(max_pods_per_job=limit))
    if not fails:
        assert plan.create and ("Failed", "True") not in ctypes(plan.status)
        return
    asked = job.total_replicas
    message = (f"TFJob ml/tf-job asks for {asked} pods, more than the {limit} this operator runs per job "
               f"(--max-pods-per-job={limit}): lower its replicas or split it into smaller jobs, or raise the "
               f"operator's `tfop run --max-pods-per-job` (at most {rules.MAX_JOB_REPLICAS})")
    assert plan.create == [] and plan.create_group is None and plan.requeue_after is None
    assert ctypes(plan.status) == [("Created", "True"), ("Failed", "True")]
    assert last_condition(plan.status)["message"] == message
    assert [(e.type, e.reason, e.message) for e in plan.events] == [("Warning", "TooManyPods", message)]


def test_a_job_failed_for_its_size_is_not_failed_again():
    job = model(tfjob({"Worker": 5}))
    first = run(job, ctx=context(max_pods_per_job=4))
    again = run(with_status(job, **first.status), ctx=context(max_pods_per_job=4))
    assert again.events == [] and again.create == [] and again.status is None


def test_an_invalid_job_over_the_ceiling_fails_once_for_its_spec():
    obj = tfjob({"Worker": 5})
    obj["spec"]["successPolicy"] = "AnyWorker"
    normalized = normalize(obj)
    plan = run(normalized.job, ctx=context(max_pods_per_job=4), problems=normalized.problems)
    assert [e.reason for e in plan.events] == ["InvalidSpec"]


def test_a_running_job_scaled_over_the_ceiling_fails_and_creates_nothing():
    job = with_status(model(tfjob({"Worker": 6})), **running_status())
    plan = run(job, ctx=context(max_pods_per_job=5))
    assert plan.create == [] and "--max-pods-per-job=5" in last_condition(plan.status)["message"]


# ------------------------------------------------------------ a bounded number of creates per pass
def _passes(job, ctx):
    """Every pass until nothing is missing, each seeing what the earlier ones created (as the informers do)."""
    pods, services, plans = [], [], []
    while True:
        plan = run(job, Observed(pods=list(pods), services=list(services)), ctx=ctx)
        plans.append(plan)
        if not plan.create:
            return plans, pods, services
        for obj in plan.create:
            (pods if obj["kind"] == "Pod" else services).append(obj)
        assert len(plans) < 100


def test_a_big_job_is_created_in_batches_pass_after_pass():
    n = 2 * MAX_CREATES_PER_PASS + 7
    job = model(tfjob({"PS": 2, "Worker": n - 2}))
    plans, pods, services = _passes(job, context())
    assert [len(p.create) for p in plans] == [2 * MAX_CREATES_PER_PASS] * 2 + [14, 0]
    assert [p.requeue_after for p in plans[:2]] == [0, 0]  # the rest at once
    assert plans[2].requeue_after is None
    expected = [f"tf-job-ps-{i}" for i in range(2)] + [f"tf-job-worker-{i}" for i in range(n - 2)]
    assert [p["metadata"]["name"] for p in pods] == expected  # each once, in index order
    assert [s["metadata"]["name"] for s in services] == expected
    first = names(plans[0].create)
    assert first[:MAX_CREATES_PER_PASS] == [f"Service/{x}" for x in expected[:MAX_CREATES_PER_PASS]]
    assert first[MAX_CREATES_PER_PASS:] == [f"Pod/{x}" for x in expected[:MAX_CREATES_PER_PASS]]


def test_a_job_of_one_batch_is_created_in_one_pass():
    plan = run(model(tfjob({"Worker": MAX_CREATES_PER_PASS})))
    assert len(plan.create) == 2 * MAX_CREATES_PER_PASS and plan.requeue_after is None


def test_every_pod_of_a_batched_job_has_its_tf_config():
    job = model(tfjob({"PS": 1, "Worker": MAX_CREATES_PER_PASS + 1}))
    _, pods, _ = _passes(job, context())
    configs = [next(e["value"] for e in p["spec"]["containers"][0]["env"] if e["name"] == "TF_CONFIG")
               for p in pods]
    assert len(set(configs)) == len(pods)
    assert all(f'"worker":["tf-job-worker-0.ml.svc:2222",' in c for c in configs)


def test_one_pass_of_the_biggest_admitted_job_builds_one_batch_quickly():
    """A pass of a job of MAX_JOB_REPLICAS pods builds one batch; before, it built every pod, each with
    a TF_CONFIG rebuilt from scratch (4000 pods: 13.6 s of CPU)."""
    job = model(tfjob({"PS": 2, "Worker": rules.MAX_JOB_REPLICAS - 2}))
    start = time.process_time()
    plan = run(job, ctx=context(max_pods_per_job=rules.MAX_JOB_REPLICAS))
    spent = time.process_time() - start
    assert len(plan.create) == 2 * MAX_CREATES_PER_PASS and plan.requeue_after == 0
    assert spent < 1.0, spent  # ~0.05 s here; generous for a loaded machine


# ------------------------------------------------------------ the spec's bounds, in the operator too
def test_normalize_refuses_replicas_above_the_maximum_without_listing_them():
    n = normalize(tfjob({"Worker": 2**31 - 1}))  # stored before the CRD had its maximum
    assert [p.field for p in n.problems] == ["spec.tfReplicaSpecs.Worker.replicas"]
    assert f"more than the {rules.MAX_REPLICAS_PER_TYPE} replicas a type may have" in n.problems[0].message
    assert n.job.total_replicas == 0  # no pod of it is ever listed


def test_normalize_refuses_a_job_above_the_total():
    n = normalize(tfjob({"PS": rules.MAX_REPLICAS_PER_TYPE, "Worker": 1}))
    assert [(p.field, p.message) for p in n.problems] == [(
        "spec.tfReplicaSpecs", f"the job asks for {rules.MAX_REPLICAS_PER_TYPE + 1} pods, more than the "
        f"{rules.MAX_JOB_REPLICAS} a job may have: lower replicas or split the job")]


def test_normalize_refuses_an_absurd_quantity_at_once():
    obj = tfjob({"worker": rspec(template=pod_template(container(resources={"limits": {"cpu": HUGE}})))})
    start = time.process_time()
    problems = normalize(obj).problems
    assert time.process_time() - start < 0.1
    assert [(p.field, p.message) for p in problems] == [
        ("spec.tfReplicaSpecs.worker.template.spec.containers[0].resources.limits.cpu",
         f"{HUGE!r} is not a Kubernetes quantity (e.g. 500m, 2, 1Gi)")]


def test_the_gang_shape_refuses_an_absurd_quantity_at_once():
    tfjob_ = gang_job(replica("Worker", 2, template(gang_container(limits={"cpu": HUGE}))),
                      min_resources={"memory": "1e100000000"})
    start = time.process_time()
    problems = shape_problems(tfjob_, None)
    assert time.process_time() - start < 0.1
    assert [(p.field, p.message) for p in problems] == [
        ("spec.tfReplicaSpecs.Worker.template.spec.containers[0].resources.limits.cpu",
         f"{HUGE!r} is not a Kubernetes quantity"),
        ("spec.runPolicy.schedulingPolicy.minResources.memory", "'1e100000000' is not a Kubernetes quantity")]


def test_tfop_validate_names_the_field_of_an_absurd_quantity(tmp_path):
    obj = tfjob({"Worker": rspec(2, template=pod_template(container(resources={"limits": {"cpu": HUGE}})))})
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(obj))
    start = time.process_time()
    result = CliRunner().invoke(cli, ["validate", "-f", str(path)])
    assert time.process_time() - start < 5  # the CRD's schema check dominates; 8.8 s per parse before
    assert result.exit_code == 1
    field = "spec.tfReplicaSpecs.Worker.template.spec.containers[0].resources.limits.cpu"
    assert [line.split(": ")[2] for line in result.output.splitlines()] == [field]
    assert HUGE in result.output


def test_run_refuses_a_ceiling_admission_would_never_reach():
    result = CliRunner().invoke(cli, ["run", "--max-pods-per-job", str(rules.MAX_JOB_REPLICAS + 1)])
    assert result.exit_code == 2 and "--max-pods-per-job" in result.output


def test_render_shows_every_pass_of_a_job_bigger_than_one_batch():
    from tfop.tools.offline.render import first_start_objects

    workers = 2 * MAX_CREATES_PER_PASS + 5
    objects = first_start_objects(tfjob({"PS": 1, "Worker": workers}), context())
    expected = {"tf-job-ps-0"} | {f"tf-job-worker-{i}" for i in range(workers)}
    for kind in ("Pod", "Service"):
        got = [o["metadata"]["name"] for o in objects if o["kind"] == kind]
        assert len(got) == len(expected) and set(got) == expected, kind


def test_validate_warns_of_a_job_over_the_default_ceiling_and_render_shows_it(tmp_path):
    """Offline the operator's flags are unknown: a warning (exit 0), and the objects the job becomes."""
    from tfop.tools.offline.render import first_start_objects

    obj = tfjob({"PS": 1, "Worker": DEFAULT_MAX_PODS_PER_JOB})
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(obj))
    result = CliRunner().invoke(cli, ["validate", "-f", str(path)])
    assert result.output == (
        f"{path}: tf-job: spec.tfReplicaSpecs: warning: the job asks for {DEFAULT_MAX_PODS_PER_JOB + 1} pods: an "
        f"operator run with --max-pods-per-job={DEFAULT_MAX_PODS_PER_JOB} fails it; lower the replicas or split "
        "the job, unless the operator runs with a higher --max-pods-per-job\n")
    assert result.exit_code == 0
    assert len(first_start_objects(obj, context())) == 2 * (DEFAULT_MAX_PODS_PER_JOB + 1)

