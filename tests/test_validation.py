"""One table of spec rules (tfop.api.rules), the shared checks, and what `tfop validate` reports."""
import pytest
import yaml
from click.testing import CliRunner

from core_fixtures import container, pod_template, rspec, tfjob
from gang_fixtures import job, replica, seed003, template
from tfop.api import rules
from tfop.api.normalize import normalize
from tfop.api.validation import ERROR, WARNING, Problem, quantity_problems, template_quantity_problems
from tfop.gang.shape import shape_problems
from tfop.tools.offline import crd
from tfop.tools.cli import cli


# ------------------------------------------------------------ the table and the CRD
def _schema_node(path):
    node = crd.schema_for("v1")
    for key in filter(None, path.split(".")):
        node = node["properties"][key]
    return node


@pytest.mark.parametrize("rule", rules.RULES, ids=[r.message[:40] for r in rules.RULES])
def test_every_rule_is_in_the_crd_where_the_table_says(rule):
    want = {"rule": rule.cel, "message": rule.message}
    if rule.message_cel:
        want["messageExpression"] = rule.message_cel
    if rule.field_path:
        want["fieldPath"] = rule.field_path
    for at in rule.at:
        assert want in _schema_node(at)["x-kubernetes-validations"], at


def test_the_crd_has_no_rule_outside_the_table():
    in_table = {(at, r.cel, r.message) for r in rules.RULES for at in r.at}
    in_table |= {(at, r["rule"], r["message"]) for at, table in rules.TRANSITION_RULES.items() for r in table}
    in_crd = {(at, v["rule"], v["message"]) for at in ("", rules.REPLICA_SPECS, rules.RUN_POLICY)
              for v in _schema_node(at).get("x-kubernetes-validations", [])}
    assert in_crd == in_table
    schema_text = str(crd.schema_for("v1"))
    assert schema_text.count("x-kubernetes-validations") == 3  # the TFJob's, tfReplicaSpecs' and runPolicy's only


def test_managed_by_is_fixed_at_creation_by_a_transition_rule():
    (rule,) = _schema_node(rules.RUN_POLICY)["x-kubernetes-validations"]
    assert rule == rules.MANAGED_BY_IMMUTABLE and "oldSelf" in rule["rule"]
    assert rule["fieldPath"] == ".managedBy" and "managedBy" in _schema_node(rules.RUN_POLICY)["properties"]


# (rule, node, does the Python twin hold)
HOLDS = [
    (rules.NAME, {"metadata": {"name": "mnist-1"}}, True),
    (rules.NAME, {"metadata": {}}, True),  # !has(self.metadata.name)
    (rules.NAME, {"metadata": {"name": "Mnist"}}, False),
    (rules.NAME, {"metadata": {"name": "mnist-"}}, False),
    (rules.NAME, {"metadata": {"name": "a" * 63}}, True),
    (rules.NAME, {"metadata": {"name": "a" * 64}}, False),
    (rules.NOT_EMPTY, {}, False),
    (rules.NOT_EMPTY, {"Worker": {}}, True),
    (rules.KNOWN_KEYS, {"Worker": {}, "ps": {}}, True),
    (rules.KNOWN_KEYS, {"WORKER": {}, "Ps": {}, "cHiEf": {}, "EVALUATOR": {}, "mastER": {}}, True),
    (rules.KNOWN_KEYS, {"Workers": {}}, False),
    (rules.KNOWN_KEYS, {" Worker": {}}, False),
    (rules.KNOWN_KEYS, {"\u0130S": {}}, False),  # lowerAscii folds A-Z only: "İS" is no "ps"
    (rules.KNOWN_KEYS, {1: {}}, False),  # a YAML key that is no string (tfop validate only)
    (rules.ONE_SPELLING, {"Worker": {}, "worker": {}}, False),
    (rules.ONE_SPELLING, {"WORKER": {}, "ps": {}, "wOrKeR": {}}, False),
    (rules.ONE_SPELLING, {"Worker": {}, "ps": {}, "CHIEF": {}}, True),
    (rules.ONE_SPELLING, {"Foo": {}, "FOO": {}}, False),  # unknown too, and named twice
    (rules.ONE_CHIEF, {"chief": {}, "Master": {}}, False),
    (rules.ONE_CHIEF, {"CHIEF": {}, "chief": {}}, False),
    (rules.ONE_CHIEF, {"Chief": {}, "Worker": {}}, True),
    (rules.ONE_CHIEF_REPLICA, {"MASTER": {"replicas": 2}}, False),
    (rules.ONE_CHIEF_REPLICA, {"chief": {"replicas": 1}, "Worker": {"replicas": 9}}, True),
    (rules.ONE_CHIEF_REPLICA, {"Chief": {}}, True),
    (rules.ONE_CHIEF_REPLICA, {"Chief": {"replicas": "2"}}, True),  # the schema's to report
    (rules.ONE_CHIEF_REPLICA, {"Chief": None}, True),  # pruned by the apiserver
    (rules.ONE_EVALUATOR_REPLICA, {"evaluator": {"replicas": 0}}, True),
    (rules.ONE_EVALUATOR_REPLICA, {"EVALUATOR": {"replicas": 3}}, False),
    (rules.TOTAL_REPLICAS, {"PS": {"replicas": 4999}, "worker": {}}, True),  # unset counts 1
    (rules.TOTAL_REPLICAS, {"PS": {"replicas": 4999}, "worker": {}, "Chief": {}}, False),
    (rules.TOTAL_REPLICAS, {"Foo": {"replicas": 5000}, "PS": {}}, False),  # every key counts, as in CEL
]


@pytest.mark.parametrize("rule,node,holds", HOLDS)
def test_python_twin(rule, node, holds):
    assert rule.holds(node) is holds


# (description, raw job, fields crd.rule_problems names, fields normalize names)
SHARED = [
    ("two chiefs", tfjob({"Chief": 1, "Master": 1}),
     ["spec.tfReplicaSpecs"], ["spec.tfReplicaSpecs"]),
    ("chief replicas 2", tfjob({"Chief": 2, "Worker": 1}),
     ["spec.tfReplicaSpecs.Chief.replicas"], ["spec.tfReplicaSpecs.Chief.replicas"]),
    ("lower-case evaluator replicas 2", tfjob({"evaluator": 2, "Worker": 1}),
     ["spec.tfReplicaSpecs.evaluator.replicas"], ["spec.tfReplicaSpecs.evaluator.replicas"]),
    ("no replica types", tfjob({}), ["spec.tfReplicaSpecs"], ["spec.tfReplicaSpecs"]),
    ("bad name", tfjob(name="Bad_Name"), ["metadata.name"], ["metadata.name"]),
    ("upper-case key", tfjob({"WORKER": 1}), [], []),
    ("mixed-case chief replicas 2", tfjob({"CHIEF": 2, "Ps": 1}),
     ["spec.tfReplicaSpecs.CHIEF.replicas"], ["spec.tfReplicaSpecs.CHIEF.replicas"]),
    ("unknown key", tfjob({"Workers": 1}), ["spec.tfReplicaSpecs.Workers"], ["spec.tfReplicaSpecs.Workers"]),
    ("chief and master in lower case", tfjob({"chief": 1, "master": 1}),
     ["spec.tfReplicaSpecs"], ["spec.tfReplicaSpecs"]),
    ("one type in two cases", tfjob({"Worker": 1, "worker": 1}),
     ["spec.tfReplicaSpecs"], ["spec.tfReplicaSpecs.worker"]),
    ("no name", tfjob(name=None), [], ["metadata.name"]),
]


@pytest.mark.parametrize("desc,obj,crd_fields,normalize_fields", SHARED, ids=[r[0] for r in SHARED])
def test_crd_rules_and_normalize_share_the_table(desc, obj, crd_fields, normalize_fields):
    assert [p.field for p in crd.rule_problems(obj)] == crd_fields
    assert [p.field for p in normalize(obj).problems] == normalize_fields


# ------------------------------------------------------------ quantities, checked in one place
F = "spec.tfReplicaSpecs.Worker.template"
QUANTITIES = [
    ({"spec": {"containers": [container(resources={"limits": {"cpu": "2", "memory": "1Gi"}})]}}, []),
    ({"spec": {"containers": [container(resources={"limits": {"cpu": "x"}, "requests": {"cpu": 1.5}})]}},
     [Problem(f"{F}.spec.containers[0].resources.limits.cpu", "'x' is not a Kubernetes quantity")]),
    ({"spec": {"containers": [container()],
               "initContainers": [container(name="init", resources={"requests": {"memory": "1 Gi"}})]}},
     [Problem(f"{F}.spec.initContainers[0].resources.requests.memory", "'1 Gi' is not a Kubernetes quantity")]),
    ({"spec": {"containers": [container(resources="lots")]}}, []),  # a mistyped resources is the schema's
    ({}, []),
]


@pytest.mark.parametrize("tmpl,expected", QUANTITIES)
def test_template_quantity_problems(tmpl, expected):
    assert template_quantity_problems(F, tmpl) == expected


def test_quantity_problems_with_examples():
    assert quantity_problems("x", {"cpu": True}, examples=True) == [
        Problem("x.cpu", "True is not a Kubernetes quantity (e.g. 500m, 2, 1Gi)")]


# ------------------------------------------------------------ the gang shape offline
PRIO = {"high": 1000}
MIN_AVAILABLE = Problem("spec.runPolicy.schedulingPolicy.minAvailable",
                        "minAvailable 6 exceeds the job's 5 replicas, so the gang could never start; "
                        "set it to at most 5 or remove it", WARNING)


def _pc(name):
    return template(priorityClassName=name)


# (description, job, priority values or None when unknown, [(field, severity)])
SHAPE = [
    ("minAvailable too high, cluster unknown", seed003(min_available=6), None, [MIN_AVAILABLE]),
    ("missing PriorityClass, cluster known", seed003(priority_class="vip"), PRIO,
     [Problem("spec.runPolicy.schedulingPolicy.priorityClass",
              "PriorityClass vip not found; create it or remove it", WARNING)]),
    ("missing PriorityClass, cluster unknown", seed003(priority_class="vip"), None, []),
    ("template PriorityClass, cluster unknown",
     job(replica("PS", 1, _pc("gone")), replica("Worker", 1, _pc("gone"))), None, []),
    ("mixed priorities block even offline",
     job(replica("PS", 1, _pc("high")), replica("Worker", 1, _pc(None))), None,
     [Problem("spec.tfReplicaSpecs.Worker.template.spec.priorityClassName",
              "pods of one gang must share one priority, but Worker uses none and PS uses 'high'; "
              "give every replica type the same priorityClassName, or none", ERROR)]),
]


@pytest.mark.parametrize("desc,tfjob_,values,expected", SHAPE, ids=[r[0] for r in SHAPE])
def test_shape_problems_with_and_without_the_cluster(desc, tfjob_, values, expected):
    assert shape_problems(tfjob_, values) == expected


# ------------------------------------------------------------ `tfop validate`
GANG = "spec.runPolicy.schedulingPolicy"
PRIORITY = "spec.tfReplicaSpecs.{}.template.spec.priorityClassName"
TOO_MANY = ("minAvailable 3 exceeds the job's 2 replicas, so the gang could never start; "
            "set it to at most 2 or remove it")
MIXED = ("pods of one gang must share one priority, but Worker uses none and PS uses 'high'; "
         "give every replica type the same priorityClassName, or none")

# (description, job, exit code, [(field, printed message)])
VALIDATE = [
    ("minAvailable above the replicas: a warning only",
     tfjob({"Worker": 2}, run_policy={"schedulingPolicy": {"minAvailable": 3}}), 0,
     [(f"{GANG}.minAvailable", f"warning: {TOO_MANY}")]),
    ("PriorityClasses are not checked offline",
     tfjob({"Worker": rspec(2, template=pod_template(priorityClassName="vip"))},
           run_policy={"schedulingPolicy": {"priorityClass": "vip"}}), 0, []),
    ("minResources that is no quantity",
     tfjob({"Worker": 2}, run_policy={"schedulingPolicy": {"minResources": {"memory": "1 Gi"}}}), 1,
     [(f"{GANG}.minResources.memory", "'1 Gi' is not a Kubernetes quantity")]),
    ("mixed priorities",
     tfjob({"PS": rspec(1, template=pod_template(priorityClassName="high")), "Worker": 1}), 1,
     [(PRIORITY.format("Worker"), MIXED)]),
    ("a warning and an error",
     tfjob({"Worker": 2}, run_policy={"schedulingPolicy": {"minAvailable": 3, "minResources": {"cpu": "many"}}}),
     1, [(f"{GANG}.minAvailable", f"warning: {TOO_MANY}"),
         (f"{GANG}.minResources.cpu", "'many' is not a Kubernetes quantity")]),
    ("a bad pod quantity is reported once, at the key as written",
     tfjob({"worker": rspec(template=pod_template(container(resources={"limits": {"cpu": "x"}})))}), 1,
     [("spec.tfReplicaSpecs.worker.template.spec.containers[0].resources.limits.cpu",
       "'x' is not a Kubernetes quantity (e.g. 500m, 2, 1Gi)")]),
]


@pytest.mark.parametrize("desc,obj,code,expected", VALIDATE, ids=[r[0] for r in VALIDATE])
def test_validate_reports_the_gang_shape(tmp_path, desc, obj, code, expected):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(obj))
    result = CliRunner().invoke(cli, ["validate", "-f", str(path), "--gang-scheduler-name", "volcano"])
    name = obj["metadata"]["name"]
    assert result.output.splitlines() == [f"{path}: {name}: {field}: {message}" for field, message in expected]
    assert result.exit_code == code


@pytest.mark.parametrize("desc,obj,code,expected", VALIDATE[:4], ids=[r[0] for r in VALIDATE[:4]])
def test_validate_without_gang_flags_skips_the_gang_rules(tmp_path, desc, obj, code, expected):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(obj))
    result = CliRunner().invoke(cli, ["validate", "-f", str(path)])
    assert (result.output, result.exit_code) == ("", 0)


# ------------------------------------------------------------ malformed jobs: problems, never exceptions
def _worker_template(**spec):
    return {"spec": {"containers": [container()], **spec}}


# (description, the job, [(field, message)] normalize reports: the schema's words, and nothing under them)
MALFORMED = [
    ("template not an object", tfjob({"Worker": rspec(template="pod")}),
     [("spec.tfReplicaSpecs.Worker.template", 'Invalid value: "pod": must be of type object')]),
    ("template metadata a list", tfjob({"Worker": rspec(template={"metadata": [1], **_worker_template()})}),
     [("spec.tfReplicaSpecs.Worker.template.metadata", "Invalid value: [1]: must be of type object")]),
    ("containerPort a word", tfjob({"Worker": rspec(template=pod_template(container(
        ports=[{"name": "tfjob-port", "containerPort": "twenty"}])))}),
     [("spec.tfReplicaSpecs.Worker.template.spec.containers[0].ports[0].containerPort",
       'Invalid value: "twenty": must be of type integer')]),
    ("a container not an object: the others keep their index",
     tfjob({"Worker": rspec(template={"spec": {"containers": [5, {"name": "tensorflow"}]}})}),
     [("spec.tfReplicaSpecs.Worker.template.spec.containers[0]", "Invalid value: 5: must be of type object"),
      ("spec.tfReplicaSpecs.Worker.template.spec.containers[1].image", "is empty: every container needs an image")]),
    ("a null container", tfjob({"Worker": rspec(template={"spec": {"containers": [None, container()]}})}),
     [("spec.tfReplicaSpecs.Worker.template.spec.containers[0]", "Invalid value: null: must be of type object")]),
    ("spec a list", {**tfjob(), "spec": [1, 2]}, [("spec", "Invalid value: [1, 2]: must be of type object")]),
    ("metadata a string", {**tfjob(), "metadata": "x"}, [("metadata", 'Invalid value: "x": must be of type object')]),
    ("tfReplicaSpecs a number", tfjob(tfReplicaSpecs=7),
     [("spec.tfReplicaSpecs", "Invalid value: 7: must be of type object")]),
    ("a replica spec a list", tfjob({"Worker": [1]}),
     [("spec.tfReplicaSpecs.Worker", "Invalid value: [1]: must be of type object")]),
    ("a replica type that is a number", tfjob({"Worker": 1, 7: rspec()}),
     [("spec.tfReplicaSpecs.7", "unknown replica type 7: use one of Chief, Master, PS, Worker, Evaluator")]),
    ("restartPolicy a list: normalize's own check", tfjob({"Worker": rspec(restart_policy=["Never"])}),
     [("spec.tfReplicaSpecs.Worker.restartPolicy", "['Never'] is unknown: use one of Always, OnFailure, Never, "
                                                   "ExitCode")]),
    ("runPolicy a string", tfjob(run_policy="all"),
     [("spec.runPolicy", 'Invalid value: "all": must be of type object')]),
    ("schedulingPolicy minResources a list", tfjob(run_policy={"schedulingPolicy": {"minResources": ["cpu"]}}),
     [("spec.runPolicy.schedulingPolicy.minResources", 'Invalid value: ["cpu"]: must be of type object')]),
    ("generation a word", tfjob(generation="third"),
     [("metadata.generation", 'Invalid value: "third": must be of type integer')]),
    ("a label not a string", {**tfjob(), "metadata": {"name": "tf-job", "labels": {"a": {"b": 1}}}},
     [("metadata.labels.a", 'Invalid value: {"b": 1}: must be of type string')]),
    ("creationTimestamp not a time", {**tfjob(), "metadata": {"name": "tf-job", "creationTimestamp": "yesterday"}},
     [("metadata.creationTimestamp",
       'Invalid value: "yesterday": must be a time like 2024-05-01T12:00:00Z (UTC, whole seconds)')]),
    ("the last-applied annotation nested too deep for JSON",
     tfjob(annotations={"kubectl.kubernetes.io/last-applied-configuration": "[" * 100000}), []),
    ("status conditions an object", tfjob(status={"conditions": {"type": "Created"}}),
     [("status.conditions", 'Invalid value: {"type": "Created"}: must be of type array')]),
    ("status not an object", tfjob(status=["Running"]),
     [("status", 'Invalid value: ["Running"]: must be of type object')]),
    ("a mistyped status comes after the spec's mistyped values and before the other problems",
     tfjob({"Worker": rspec(restart_policy="Sometimes")}, generation="third", status={"restartCount": "two"}),
     [("metadata.generation", 'Invalid value: "third": must be of type integer'),
      ("status.restartCount", 'Invalid value: "two": must be of type integer'),
      ("spec.tfReplicaSpecs.Worker.restartPolicy", "'Sometimes' is unknown: use one of Always, OnFailure, Never, "
                                                   "ExitCode")]),
    ("enableDynamicWorker a string", tfjob(enableDynamicWorker="false"),
     [("spec.enableDynamicWorker", 'Invalid value: "false": must be of type boolean')]),
    ("a long value is cut", tfjob({"Worker": rspec(template=_worker_template(schedulerName=["x" * 500]))}),
     [("spec.tfReplicaSpecs.Worker.template.spec.schedulerName",
       'Invalid value: ["' + "x" * 95 + '...: must be of type string')]),
]


@pytest.mark.parametrize("desc,obj,expected", MALFORMED, ids=[r[0] for r in MALFORMED])
def test_normalize_reports_malformed_jobs(desc, obj, expected):
    assert [(p.field, p.message) for p in normalize(obj).problems] == expected


def test_a_well_formed_job_is_read_as_it_is():
    from tfop.api.wellformed import checked

    obj = tfjob({"Worker": 2, "PS": 1}, run_policy={"schedulingPolicy": {"minAvailable": 2}},
                status={"conditions": [], "startTime": "2024-05-01T12:00:00Z"})
    assert checked(obj) == (obj, [])
    assert checked(obj)[0] is obj  # not even copied
