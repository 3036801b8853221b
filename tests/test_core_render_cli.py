"""`tfop render` and `tfop validate` through click's CliRunner."""
import json

import kubernetes_validate
import pytest
import yaml
from click.testing import CliRunner

from core_fixtures import container, pod_template, rspec, tfjob
from seeds import seed_jobs
from tfop.tools.cli import cli

SEEDS = seed_jobs()
SEED_IDS = [s for s, _ in SEEDS]
GROUP_KIND = {"volcano": "PodGroup", "scheduler-plugins": "PodGroup", "kube-arbitrator": "PodDisruptionBudget"}


def _file(tmp_path, name, *jobs):
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump_all(list(jobs)))
    return str(path)


def _invoke(*args):
    result = CliRunner().invoke(cli, list(args))
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def _expected_children(job):
    """(kind, name) of the pods then services the job needs, in creation order."""
    name = job["metadata"]["name"]
    order = ["chief", "master", "ps", "worker", "evaluator"]
    specs = sorted(job["spec"]["tfReplicaSpecs"].items(), key=lambda kv: order.index(kv[0].lower()))
    members = [f"{name}-{k.lower()}-{i}" for k, v in specs for i in range(v.get("replicas", 1))]
    return [("Pod", m) for m in members] + [("Service", m) for m in members]


@pytest.mark.parametrize("seed,job", SEEDS, ids=SEED_IDS)
@pytest.mark.parametrize("output", ["yaml", "json"])
def test_render_seed(tmp_path, seed, job, output):
    result = _invoke("render", "-f", _file(tmp_path, seed, job), "-o", output)
    assert result.exit_code == 0, result.output
    objects = json.loads(result.output) if output == "json" else list(yaml.safe_load_all(result.output))
    assert [(o["kind"], o["metadata"]["name"]) for o in objects] == _expected_children(job)
    namespace = job["metadata"].get("namespace", "default")
    for obj in objects:
        assert obj["metadata"]["namespace"] == namespace
        kubernetes_validate.validate(obj, kubernetes_validate.latest_version(), strict=True)


@pytest.mark.parametrize("seed,job", SEEDS, ids=SEED_IDS)
@pytest.mark.parametrize("backend", sorted(GROUP_KIND))
def test_render_seed_with_gang(tmp_path, seed, job, backend):
    result = _invoke("render", "-f", _file(tmp_path, seed, job), "--enable-gang-scheduling",
                     "--gang-scheduler-name", backend, "-o", "json")
    assert result.exit_code == 0, result.output
    objects = json.loads(result.output)
    name = job["metadata"]["name"]
    assert (objects[0]["kind"], objects[0]["metadata"]["name"]) == (GROUP_KIND[backend], name)
    assert [(o["kind"], o["metadata"]["name"]) for o in objects[1:]] == _expected_children(job)
    pods = [o for o in objects if o["kind"] == "Pod"]
    own = {(r["template"].get("spec") or {}).get("schedulerName") for r in job["spec"]["tfReplicaSpecs"].values()}
    if own == {None}:  # the template's schedulerName (seeds 000/001/004) is kept
        scheduler = {"volcano": "volcano", "scheduler-plugins": "scheduler-plugins-scheduler",
                     "kube-arbitrator": "kube-batchd"}[backend]
        assert {p["spec"]["schedulerName"] for p in pods} == {scheduler}
    for p in pods:
        assert p["metadata"]["annotations"]["tfop.kubeflow.org/gang-generation"] == "0"
        kubernetes_validate.validate(p, kubernetes_validate.latest_version(), strict=True)


def test_render_namespace_option_and_multiple_files(tmp_path):
    a = _file(tmp_path, "a", tfjob({"Worker": 1}, name="a"))
    b = _file(tmp_path, "b", tfjob({"Worker": 1}, name="b"), tfjob({"Worker": 1}, name="c"))
    result = _invoke("render", "-f", a, "-f", b, "--namespace", "team", "-o", "json")
    objects = json.loads(result.output)
    assert [o["metadata"]["name"] for o in objects] == ["a-worker-0", "a-worker-0", "b-worker-0", "b-worker-0",
                                                         "c-worker-0", "c-worker-0"]
    assert {o["metadata"]["namespace"] for o in objects} == {"team"}


def test_render_scheduler_name_override(tmp_path):
    f = _file(tmp_path, "j", tfjob({"Worker": 2}))
    result = _invoke("render", "-f", f, "--gang-scheduler-name", "volcano", "--scheduler-name", "vc2", "-o", "json")
    pods = [o for o in json.loads(result.output) if o["kind"] == "Pod"]
    assert {p["spec"]["schedulerName"] for p in pods} == {"vc2"}


def test_render_rejects_non_tfjob(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    result = _invoke("render", "-f", str(path))
    assert result.exit_code == 1
    assert "no kubeflow.org TFJob in it" in result.output


@pytest.mark.parametrize("seed,job", SEEDS, ids=SEED_IDS)
def test_validate_seed(tmp_path, seed, job):
    result = _invoke("validate", "-f", _file(tmp_path, seed, job))
    assert (result.exit_code, result.output) == (0, "")


def _port(value):
    return rspec(template=pod_template(container(ports=[{"name": "tfjob-port", "containerPort": value}])))


# (description, job, [(field, message)])
BAD_TABLE = [
    ("two chiefs", tfjob({"Chief": 1, "Master": 1, "Worker": 1}),
     [("spec.tfReplicaSpecs", "spec.tfReplicaSpecs may have only one Chief or Master; remove the other")]),
    ("no image", tfjob({"Worker": rspec(template=pod_template({"name": "tensorflow"}))}),
     [("spec.tfReplicaSpecs.Worker.template.spec.containers[0].image", "is empty: every container needs an image")]),
    ("bad name", tfjob(name="Bad_Name"),
     [("metadata.name", "metadata.name must be a DNS-1035 label: at most 63 lower-case letters, digits or '-', "
                        "starting with a letter and ending with a letter or digit")]),
    ("unknown restart policy", tfjob({"Worker": rspec(restart_policy="Sometimes")}),
     [("spec.tfReplicaSpecs.Worker.restartPolicy",
       'Unsupported value: "Sometimes": supported values: "Always", "OnFailure", "Never", "ExitCode"')]),
    ("containerPort abc (v1)", tfjob({"Worker": _port("abc")}),
     [("spec.tfReplicaSpecs.Worker.template.spec.containers[0].ports[0].containerPort",
       'Invalid value: "abc": must be of type integer')]),
    ("containerPort abc (v1alpha2)", tfjob({"Worker": _port("abc")}, version="v1alpha2"),
     [("spec.tfReplicaSpecs.Worker.template.spec.containers[0].ports[0].containerPort",
       'Invalid value: "abc": must be of type integer')]),
    ("no tensorflow container", tfjob({"PS": rspec(template=pod_template(container(name="main")))}),
     [("spec.tfReplicaSpecs.PS.template.spec.containers",
       "needs exactly one container named 'tensorflow' (found 0): TF_CONFIG and the tfjob-port go to that container")]),
    ("replica spec not an object", tfjob({"Worker": "abc"}),
     [("spec.tfReplicaSpecs.Worker", 'Invalid value: "abc": must be of type object')]),
    ("containers not a list", tfjob({"Worker": {"template": {"spec": {"containers": {"name": "tensorflow"}}}}}),
     [("spec.tfReplicaSpecs.Worker.template.spec.containers",
       'Invalid value: {"name": "tensorflow"}: must be of type array')]),
    ("runPolicy not an object", tfjob(runPolicy="x"),
     [("spec.runPolicy", 'Invalid value: "x": must be of type object')]),
]


@pytest.mark.parametrize("desc,job,expected", BAD_TABLE, ids=[r[0] for r in BAD_TABLE])
def test_validate_bad(tmp_path, desc, job, expected):
    path = _file(tmp_path, "bad", job)
    result = _invoke("validate", "-f", path)
    assert result.exit_code == 1
    name = job["metadata"]["name"]
    assert result.output.splitlines() == [f"{path}: {name}: {field}: {message}" for field, message in expected]


def test_validate_reports_every_job_of_every_file(tmp_path):
    good = _file(tmp_path, "good", tfjob({"Worker": 1}, name="ok"))
    bad = _file(tmp_path, "bad", tfjob({"Worker": rspec(replicas=-1)}, name="neg"), tfjob(name="Bad_Name"))
    result = _invoke("validate", "-f", good, "-f", bad)
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert [line.split(": ")[:3] for line in lines] == [
        [bad, "neg", "spec.tfReplicaSpecs.Worker.replicas"], [bad, "Bad_Name", "metadata.name"]]


def test_validate_stdin():
    result = CliRunner().invoke(cli, ["validate", "-f", "-"], input=yaml.safe_dump(tfjob({"Worker": 2})))
    assert (result.exit_code, result.output) == (0, "")
