"""The generated TFJob CRD and the offline TFJob validation (tfop.tools.offline.crd)."""
import copy
import json
import os
import re
import subprocess
import time
import uuid

import pytest

from tests.seeds import seed_jobs
from tfop.api import rules as spec_rules
from tfop.api.validation import Problem
from tfop.tools.offline import crd
from tfop.tools.deploy import crdgen
from tfop.children.resources import resource_path

MAX_CRD_JSON_BYTES = int(1.3 * 1024 * 1024)  # etcd takes at most 1.5 MiB per request
VERSIONS = ["v1", "v1beta1", "v1alpha2"]


def _versions():
    return {v["name"]: v for v in crd.load_crd()["spec"]["versions"]}


def _nodes(schema, path="<root>"):
    yield path, schema
    for name, child in schema.get("properties", {}).items():
        yield from _nodes(child, f"{path}.{name}")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from _nodes(schema["additionalProperties"], f"{path}{{}}")
    if "items" in schema:
        yield from _nodes(schema["items"], f"{path}[]")


# ---------------------------------------------------------------- the CRD file
def test_committed_crd_matches_generator():
    assert resource_path("crds", crd.CRD_FILE).read_text() == crdgen.crd_file_text(), \
        "crds/ is stale: run python -m tfop.tools.deploy.crdgen"


def test_names_and_scope():
    spec = crd.load_crd()["spec"]
    assert crd.load_crd()["metadata"]["name"] == "tfjobs.kubeflow.org"
    assert spec["group"] == "kubeflow.org" and spec["scope"] == "Namespaced"
    assert spec["names"] == {"kind": "TFJob", "listKind": "TFJobList", "plural": "tfjobs",
                             "singular": "tfjob", "shortNames": ["tfjob"],
                             "categories": ["all", "kubeflow"]}
    assert spec["conversion"] == {"strategy": "None"}


@pytest.mark.parametrize("version", VERSIONS)
def test_version_flags(version):
    v = _versions()[version]
    assert v["served"] is True
    assert v["storage"] is (version == "v1")
    assert v["subresources"] == {"status": {}}  # no scale subresource
    cols = {c["name"]: c for c in v["additionalPrinterColumns"]}
    assert list(cols) == ["State", "Ready", "Gang", "Message", "Age"]
    assert cols["State"]["jsonPath"] == ".status.conditions[-1:].type"
    assert cols["Gang"]["priority"] == 1 and cols["Message"]["priority"] == 1


def test_only_v1_is_storage():
    assert [n for n, v in _versions().items() if v["storage"]] == ["v1"]


@pytest.mark.parametrize("version", VERSIONS)
def test_schema_is_structural(version):
    schema = crd.schema_for(version)
    assert "$ref" not in json.dumps(schema)
    for path, node in _nodes(schema):
        assert not {"oneOf", "anyOf", "allOf", "not"} & set(node), path
        if node.get("x-kubernetes-int-or-string"):
            assert "type" not in node, path
            continue
        assert "type" in node or node.get("x-kubernetes-preserve-unknown-fields"), path
        if "properties" in node or "additionalProperties" in node:
            assert node["type"] == "object", path
        if "items" in node:
            assert node["type"] == "array", path


def _replica_specs(version="v1"):
    return crd.schema_for(version)["properties"]["spec"]["properties"]["tfReplicaSpecs"]


def test_preserve_unknown_fields_only_where_meant():
    """Only object metadata keeps what it does not declare: every replica type's pod template,
    in any case, is checked."""
    paths = [p for p, n in _nodes(crd.schema_for("v1"))
             if n.get("x-kubernetes-preserve-unknown-fields")]
    assert paths and all(p.endswith(".metadata") for p in paths), paths


def test_replica_specs_map_any_key_to_one_replica_spec():
    """A map like upstream's: WORKER, Ps and chief reach the rules (tfop.api.rules), which read
    keys in any case; the pod template schema is written once, not once per spelling."""
    rs = _replica_specs()
    assert rs["type"] == "object" and "properties" not in rs
    assert "x-kubernetes-preserve-unknown-fields" not in rs
    assert rs["maxProperties"] == spec_rules.MAX_REPLICA_KEYS == 5
    spec = rs["additionalProperties"]
    assert list(spec["properties"]) == ["replicas", "restartPolicy", "template"]
    assert spec["properties"]["replicas"]["minimum"] == 0
    assert spec["properties"]["replicas"]["maximum"] == spec_rules.MAX_REPLICAS_PER_TYPE
    assert spec["properties"]["restartPolicy"]["enum"] == crdgen.RESTART_POLICIES
    assert "x-kubernetes-validations" not in spec  # a value cannot see its key: the map's rules do
    assert json.dumps(rs).count('"initContainers"') == 1  # one pod template schema


def test_run_policy_defaults_to_empty():
    """The Kubeflow SDK's model requires spec.runPolicy; a job written as v1beta1 or v1alpha2 has none.
    A structural default fills it on create and on every read of a job stored without it."""
    for version in VERSIONS:
        run_policy = crd.schema_for(version)["properties"]["spec"]["properties"]["runPolicy"]
        assert run_policy["default"] == {}
        assert "required" not in run_policy


@pytest.mark.parametrize("version", VERSIONS)
def test_every_version_prunes_alike(version):
    """conversion None: each version reads the stored object through its own schema, so the
    schemas must differ in descriptions only (a lower-case key survives every version)."""
    strip = crdgen.strip_descriptions
    assert strip(crd.schema_for(version)) == strip(crd.schema_for("v1"))


def test_pod_template_is_described_and_list_maps_survive():
    containers = _replica_specs()["additionalProperties"]["properties"]["template"][
        "properties"]["spec"]["properties"]["containers"]
    assert containers["description"]
    assert containers["x-kubernetes-list-type"] == "map"
    assert containers["x-kubernetes-list-map-keys"] == ["name"]
    port = containers["items"]["properties"]["ports"]["items"]["properties"]
    assert port["protocol"]["default"] == "TCP"  # list-map keys need a default
    assert port["containerPort"]["format"] == "int32"


def test_legacy_versions_are_v1_without_descriptions():
    v1 = crd.schema_for("v1")
    for version in ("v1beta1", "v1alpha2"):
        schema = crd.schema_for(version)
        assert '"description"' not in json.dumps(schema)
        assert schema == crdgen.strip_descriptions(v1)


def test_crd_size_fits_etcd():
    # ~0.44 MB: v1 ~0.31 MB (one described pod template), v1beta1 and v1alpha2 ~65 KB each
    # (undescribed). It was ~1.13 MB while tfReplicaSpecs declared a template per spelling.
    size = len(json.dumps(crd.load_crd(), separators=(",", ":")))
    assert size < MAX_CRD_JSON_BYTES, f"CRD is {size} bytes as JSON"


# ------------------------------------------------------------ seeds and bad jobs
SEEDS = seed_jobs()


def test_seeds_found():
    versions = {job["apiVersion"] for _, job in SEEDS}
    assert len(SEEDS) >= 5
    assert versions == {f"kubeflow.org/{v}" for v in VERSIONS}


@pytest.mark.parametrize("job", [j for _, j in SEEDS], ids=[i for i, _ in SEEDS])
def test_seed_jobs_are_valid(job):
    assert crd.schema_problems(job) == []


def good_job(version="v1"):
    container = {"name": "tensorflow", "image": "tf:latest",
                 "ports": [{"name": "tfjob-port", "containerPort": 2222}]}
    return {
        "apiVersion": f"kubeflow.org/{version}", "kind": "TFJob",
        "metadata": {"name": "mnist", "namespace": "default"},
        "spec": {
            "runPolicy": {"cleanPodPolicy": "Running", "backoffLimit": 3,
                          "schedulingPolicy": {"minAvailable": 3, "minResources": {"cpu": "3"}}},
            "tfReplicaSpecs": {
                "Chief": {"replicas": 1, "template": {"spec": {"containers": [container]}}},
                "Worker": {"replicas": 2, "restartPolicy": "ExitCode",
                           "template": {"metadata": {"labels": {"a": "b"}},
                                        "spec": {"containers": [container]}}},
            }},
        "status": {"conditions": [{"type": "Running", "status": "True",
                                   "lastTransitionTime": "2024-05-01T10:00:00Z"}],
                   "replicaStatuses": {"Worker": {"active": 2}}, "ready": "3/3",
                   "gang": {"backend": "volcano", "phase": "Running"}},
    }


def _renamed(rtype, key, **changes):
    """Change: spell replica type `rtype` as `key` (the operator reads it as rtype)."""
    def apply(job):
        specs = job["spec"]["tfReplicaSpecs"]
        specs[key] = {**specs.pop(rtype), **changes}
    return apply


def _lower_case(rtype, **changes):
    return _renamed(rtype, rtype.lower(), **changes)


def lower_case_job(version="v1"):
    job = good_job(version)
    _lower_case("Worker")(job)
    return job


def _set(path, value):
    def apply(job):
        *parents, last = path
        node = job
        for p in parents:
            node = node[p]
        node[last] = value
    return apply


RS = ("spec", "tfReplicaSpecs")


def _resources(rtype, resources):
    """Change: the resources of `rtype`'s tensorflow container (a copy: good_job's types share one)."""
    def apply(job):
        template = job["spec"]["tfReplicaSpecs"][rtype]["template"]["spec"]
        template["containers"] = [{**template["containers"][0], "resources": resources}]
    return apply

BAD_JOBS = [  # (id, change, field, message fragment)
    ("two-chiefs", _set(RS + ("Master",), {"replicas": 1}),
     "spec.tfReplicaSpecs", spec_rules.MSG_ONE_CHIEF),
    ("chief-replicas-2", _set(RS + ("Chief", "replicas"), 2),
     "spec.tfReplicaSpecs.Chief.replicas", spec_rules.MSG_CHIEF_REPLICAS),
    ("evaluator-replicas-2", _set(RS + ("evaluator",), {"replicas": 2}),
     "spec.tfReplicaSpecs.evaluator.replicas", spec_rules.MSG_EVALUATOR_REPLICAS),
    ("worker-replicas-negative", _set(RS + ("Worker", "replicas"), -1),
     "spec.tfReplicaSpecs.Worker.replicas", "should be greater than or equal to 0"),
    ("restart-policy-sometimes", _set(RS + ("Worker", "restartPolicy"), "Sometimes"),
     "spec.tfReplicaSpecs.Worker.restartPolicy", "Unsupported value: \"Sometimes\""),
    ("clean-pod-policy-maybe", _set(("spec", "runPolicy", "cleanPodPolicy"), "Maybe"),
     "spec.runPolicy.cleanPodPolicy", "Unsupported value: \"Maybe\""),
    ("legacy-clean-pod-policy-maybe", _set(("spec", "cleanPodPolicy"), "Maybe"),
     "spec.cleanPodPolicy", "Unsupported value: \"Maybe\""),
    ("unknown-replica-type", _set(RS + ("Foo",), {"replicas": 1}),
     "spec.tfReplicaSpecs.Foo", spec_rules.MSG_UNKNOWN),
    ("same-type-twice", _set(RS + ("worker",), {"replicas": 1}),
     "spec.tfReplicaSpecs", spec_rules.duplicate_message("Worker", "worker")),
    ("empty-replica-specs", _set(RS, {}), "spec.tfReplicaSpecs", spec_rules.MSG_EMPTY),
    ("bad-name", _set(("metadata", "name"), "My_Job"), "metadata.name", spec_rules.MSG_NAME),
    ("name-too-long", _set(("metadata", "name"), "a" * 64), "metadata.name", spec_rules.MSG_NAME),
    ("unknown-field", _set(("spec", "tfReplicaSpec"), {}), "spec.tfReplicaSpec", "unknown field"),
    ("success-policy", _set(("spec", "successPolicy"), "AnyWorker"),
     "spec.successPolicy", "Unsupported value"),
    ("replicas-not-int", _set(RS + ("Worker", "replicas"), "2"),
     "spec.tfReplicaSpecs.Worker.replicas", "must be of type integer"),
    ("duplicate-container", _set(RS + ("Worker", "template", "spec", "containers", 1),
                                 {"name": "tensorflow", "image": "x"}),
     "spec.tfReplicaSpecs.Worker.template.spec.containers[1]", "Duplicate value"),
    ("container-without-name", _set(RS + ("Worker", "template", "spec", "containers", 0),
                                    {"image": "x"}),
     "spec.tfReplicaSpecs.Worker.template.spec.containers[0].name", "Required value"),
    ("status-bad-time", _set(("status", "startTime"), "yesterday"),
     "status.startTime", "date-time"),
    ("lower-case-worker-replicas-negative", _lower_case("Worker", replicas=-1),
     "spec.tfReplicaSpecs.worker.replicas", "should be greater than or equal to 0"),
    ("lower-case-worker-restart-policy", _lower_case("Worker", restartPolicy="Sometimes"),
     "spec.tfReplicaSpecs.worker.restartPolicy", "Unsupported value: \"Sometimes\""),
    ("upper-case-type-twice", _set(RS + ("WORKER",), {"replicas": 1}),
     "spec.tfReplicaSpecs", spec_rules.duplicate_message("WORKER", "Worker")),
    ("unknown-type-in-capitals", _set(RS + ("WORKERS",), {"replicas": 1}),
     "spec.tfReplicaSpecs.WORKERS", spec_rules.MSG_UNKNOWN),
    ("mixed-case-chief-replicas-2", _renamed("Chief", "CHIEF", replicas=2),
     "spec.tfReplicaSpecs.CHIEF.replicas", spec_rules.MSG_CHIEF_REPLICAS),
    ("mixed-case-master-and-chief", _set(RS + ("mAsTeR",), {}),
     "spec.tfReplicaSpecs", spec_rules.MSG_ONE_CHIEF),
    # every key's pod template is checked: none is kept as written any more
    ("mixed-case-worker-bad-cpu", _renamed("Worker", "wORKER", template={"spec": {"containers": [
        {"name": "tensorflow", "image": "x", "resources": {"limits": {"cpu": "1e10000000"}}}]}}),
     "spec.tfReplicaSpecs.wORKER.template.spec.containers[0].resources.limits.cpu", "1e10000000"),
    ("chief-and-master-lower-case", _set(RS + ("master",), {}),
     "spec.tfReplicaSpecs", spec_rules.MSG_ONE_CHIEF),
    ("lower-case-chief-replicas-2", _lower_case("Chief", replicas=2),
     "spec.tfReplicaSpecs.chief.replicas", spec_rules.MSG_CHIEF_REPLICAS),
    # bounded input: no tenant's job can cost the operator (or etcd) without bound
    ("total-replicas-over-maximum", _set(RS + ("PS",), {"replicas": spec_rules.MAX_JOB_REPLICAS}),
     "spec.tfReplicaSpecs", spec_rules.MSG_TOTAL_REPLICAS),
    ("cpu-exponent-huge", _resources("Worker", {"limits": {"cpu": "1e10000000"}}),
     "spec.tfReplicaSpecs.Worker.template.spec.containers[0].resources.limits.cpu", "1e10000000"),
    ("memory-request-too-long", _resources("Chief", {"requests": {"memory": "1" * 65}}),
     "spec.tfReplicaSpecs.Chief.template.spec.containers[0].resources.requests.memory", "1" * 65),
    ("min-resources-too-long", _set(("spec", "runPolicy", "schedulingPolicy", "minResources", "cpu"), "1" * 65),
     "spec.runPolicy.schedulingPolicy.minResources.cpu", "1" * 65),
]


def _insertable(change):
    """_set on a list index appends when the index is the list's length."""
    def apply(job):
        try:
            change(job)
        except IndexError:
            containers = job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
            containers.append({"name": "tensorflow", "image": "x"})
    return apply


@pytest.mark.parametrize("version", VERSIONS)
def test_good_job_is_valid(version):
    assert crd.schema_problems(good_job(version)) == []


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("change,field,message", [b[1:] for b in BAD_JOBS],
                         ids=[b[0] for b in BAD_JOBS])
def test_bad_jobs_are_rejected(version, change, field, message):
    job = good_job(version)
    _insertable(change)(job)
    problems = crd.schema_problems(job)
    assert [p.field for p in problems] == [field], problems
    assert message in problems[0].message


@pytest.mark.parametrize("key", ["Worker", "ps"])
def test_replicas_above_the_maximum_are_refused_by_type_and_in_total(key):
    job = good_job()
    _set(RS + (key,), {"replicas": 100_000})(job)
    problems = crd.schema_problems(job)
    assert [p.field for p in problems] == [f"spec.tfReplicaSpecs.{key}.replicas", "spec.tfReplicaSpecs"]
    assert f"less than or equal to {spec_rules.MAX_REPLICAS_PER_TYPE}" in problems[0].message
    assert problems[1].message == spec_rules.MSG_TOTAL_REPLICAS


def test_replicas_at_the_maximum_are_valid():
    job = good_job()
    del job["spec"]["tfReplicaSpecs"]["Chief"]
    job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = spec_rules.MAX_JOB_REPLICAS
    assert crd.schema_problems(job) == []


# "abc" too: only what is costly is bounded at admission; the operator reports a non-quantity by field.
@pytest.mark.parametrize("value", ["500m", "1.5Gi", "1e3", "12e-3", "1e99", "1E", " 2 ", "+1", ".5", "abc"])
def test_quantities_within_the_bounds_are_valid(value):
    job = good_job()
    _resources("Worker", {"limits": {"cpu": value}, "requests": {"cpu": 1}})(job)
    assert crd.schema_problems(job) == []


@pytest.mark.parametrize("version", VERSIONS)
def test_lower_case_replica_types_are_valid(version):
    job = lower_case_job(version)
    job["spec"]["tfReplicaSpecs"]["ps"] = {"replicas": 2, "template": {"spec": {"containers": [
        {"name": "tensorflow", "image": "tf"}]}}}
    assert crd.schema_problems(job) == []


def mixed_case_job(version="v1"):
    """Keys as upstream v1.9 accepts them: any case."""
    job = good_job(version)
    _renamed("Worker", "WORKER")(job)
    _renamed("Chief", "chief")(job)
    job["spec"]["tfReplicaSpecs"]["Ps"] = copy.deepcopy(job["spec"]["tfReplicaSpecs"]["chief"])
    return job


@pytest.mark.parametrize("version", VERSIONS)
def test_mixed_case_replica_types_are_valid(version):
    assert crd.schema_problems(mixed_case_job(version)) == []


def test_every_pair_of_keys_of_one_type_is_refused_naming_both():
    job = good_job()
    specs = job["spec"]["tfReplicaSpecs"]
    specs.update({"WORKER": {}, "worker": {}})  # three spellings: the two smallest are named
    problems = crd.rule_problems(job)
    assert problems == [Problem("spec.tfReplicaSpecs", spec_rules.duplicate_message("WORKER", "Worker"))]
    assert "WORKER and Worker" in problems[0].message


def test_a_duplicate_message_unfit_to_show_is_the_static_one():
    """The apiserver shows the rule's message when its messageExpression yields a line break."""
    job = good_job()
    job["spec"]["tfReplicaSpecs"] = {"Worker\n": {}, "worker\n": {}}
    assert Problem("spec.tfReplicaSpecs", spec_rules.MSG_DUPLICATE) in crd.rule_problems(job)


def test_two_chiefs_named_in_any_case():
    job = good_job()
    job["spec"]["tfReplicaSpecs"]["master"] = {"replicas": 1}
    assert [p.field for p in crd.rule_problems(job)] == ["spec.tfReplicaSpecs"]


def six_keys_job():
    """Every type and one twice: over maxProperties, which stops the apiserver's rules."""
    job = good_job()
    del job["spec"]["tfReplicaSpecs"]["Chief"]
    job["spec"]["tfReplicaSpecs"].update({k: {} for k in ("Master", "PS", "Evaluator", "WORKER", "worker")})
    return job


BLOCKED = [  # (id, job, the only problem reported): no rule runs beside these errors
    ("too-many-keys", six_keys_job, ("spec.tfReplicaSpecs", "Too many: must have at most 5 items")),
    ("unsupported-and-twice", lambda: _changed(good_job(), _set(RS + ("Worker", "restartPolicy"), "Sometimes"),
                                               _set(RS + ("WORKER",), {})),
     ("spec.tfReplicaSpecs.Worker.restartPolicy", 'Unsupported value: "Sometimes"')),
]


def _changed(job, *changes):
    for change in changes:
        change(job)
    return job


@pytest.mark.parametrize("make,problem", [b[1:] for b in BLOCKED], ids=[b[0] for b in BLOCKED])
def test_blocking_schema_errors_stop_the_rules_like_the_apiserver(make, problem):
    problems = crd.schema_problems(make())
    assert [p.field for p in problems] == [problem[0]], problems
    assert problem[1] in problems[0].message
    assert crd.rule_problems(make())  # a rule fails too, but is not reported


def test_nulls_are_pruned_like_the_apiserver():
    job = good_job()
    job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["metadata"]["creationTimestamp"] = None
    job["spec"]["runPolicy"]["ttlSecondsAfterFinished"] = None
    assert crd.schema_problems(job) == []


def test_unknown_version_and_kind():
    job = good_job()
    job["apiVersion"] = "kubeflow.org/v2"
    assert [p.field for p in crd.schema_problems(job)] == ["apiVersion"]
    job = good_job()
    job["kind"] = "PyTorchJob"
    assert [p.field for p in crd.schema_problems(job)] == ["kind"]


def test_schema_for_returns_copies():
    crd.schema_for("v1")["properties"].clear()
    assert crd.schema_for("v1")["properties"]
    with pytest.raises(KeyError):
        crd.schema_for("v2")


def test_cel_rules_in_crd_match_python_messages():
    rs = _replica_specs()
    messages = [r["message"] for r in rs["x-kubernetes-validations"]]
    assert messages == [spec_rules.MSG_EMPTY, spec_rules.MSG_UNKNOWN, spec_rules.MSG_DUPLICATE,
                        spec_rules.MSG_ONE_CHIEF, spec_rules.MSG_CHIEF_REPLICAS,
                        spec_rules.MSG_EVALUATOR_REPLICAS, spec_rules.MSG_TOTAL_REPLICAS]
    with_expression = [r for r in rs["x-kubernetes-validations"] if "messageExpression" in r]
    assert [r["message"] for r in with_expression] == [spec_rules.MSG_DUPLICATE]
    assert all("fieldPath" not in r for r in rs["x-kubernetes-validations"])  # a map's key is not fixed


def test_good_job_deepcopy_is_untouched_by_validation():
    job = good_job()
    before = copy.deepcopy(job)
    crd.schema_problems(job)
    assert job == before


# ------------------------------------------------------------ on a real apiserver
# Uses the e2e plugin's `cluster` fixture when a conftest loads e2e.pytest_plugin,
# else an apiserver named by TFOP_TEST_KUBECONFIG; skipped when neither is there.
CEL_MESSAGES = {spec_rules.MSG_EMPTY, spec_rules.MSG_UNKNOWN, spec_rules.MSG_ONE_CHIEF,
                spec_rules.MSG_CHIEF_REPLICAS, spec_rules.MSG_EVALUATOR_REPLICAS, spec_rules.MSG_NAME,
                spec_rules.MSG_TOTAL_REPLICAS, spec_rules.duplicate_message("Worker", "worker"),
                spec_rules.duplicate_message("WORKER", "Worker")}


def _kubectl_for(request):
    path = os.environ.get("TFOP_TEST_KUBECONFIG")
    if path:
        return lambda *args, input=None: subprocess.run(
            ["kubectl", "--kubeconfig", path, *args], input=input, text=True,
            capture_output=True, timeout=120)
    try:
        cluster = request.getfixturevalue("cluster")
    except pytest.FixtureLookupError:
        pytest.skip("needs an apiserver: load e2e.pytest_plugin or set TFOP_TEST_KUBECONFIG")
    return lambda *args, input=None: cluster.kubectl(*args, input=input, check=False,
                                                     timeout=120)


@pytest.fixture(scope="module")
def kube(request):
    kubectl = _kubectl_for(request)
    r = kubectl("apply", "--server-side", "--force-conflicts", "-f",
                str(resource_path("crds", crd.CRD_FILE)))
    assert r.returncode == 0, r.stderr
    # poll: `kubectl wait` errors out while the new CRD has no status.conditions yet
    deadline = time.monotonic() + 60
    while kubectl("get", "crd", "tfjobs.kubeflow.org", "-o", "jsonpath={.status.conditions"
                  "[?(@.type=='Established')].status}").stdout != "True":
        assert time.monotonic() < deadline, "TFJob CRD not Established after 60s"
        time.sleep(0.2)
    ns = f"tfop-crd-{uuid.uuid4().hex[:8]}"
    assert kubectl("create", "namespace", ns).returncode == 0
    yield kubectl, ns
    kubectl("delete", "namespace", ns, "--wait=false")


@pytest.mark.cluster
@pytest.mark.parametrize("job", [j for _, j in SEEDS], ids=[i for i, _ in SEEDS])
def test_seeds_apply_on_apiserver(kube, job):
    kubectl, ns = kube
    job = copy.deepcopy(job)
    job["metadata"].pop("namespace", None)  # several seeds share a name: dry-run each
    r = kubectl("apply", "--server-side", "--dry-run=server", "-n", ns, "-f", "-",
                input=json.dumps(job))
    assert r.returncode == 0, r.stderr


@pytest.mark.cluster
@pytest.mark.parametrize("version", ["v1", "v1alpha2"])
@pytest.mark.parametrize("change,field,message", [b[1:] for b in BAD_JOBS
                                                  if not b[2].startswith("status")],
                         ids=[b[0] for b in BAD_JOBS if not b[2].startswith("status")])
def test_bad_jobs_rejected_by_apiserver(kube, version, change, field, message):
    kubectl, ns = kube
    job = good_job(version)
    del job["status"]
    job["metadata"].pop("namespace")
    _insertable(change)(job)
    r = kubectl("apply", "--server-side", "-n", ns, "-f", "-", input=json.dumps(job))
    assert r.returncode != 0, r.stdout
    if message in CEL_MESSAGES:  # reported at the rule's node, e.g. spec.tfReplicaSpecs
        assert message in r.stderr
    else:
        assert field.split("[")[0] in r.stderr


@pytest.mark.cluster
def test_kubectl_explain_shows_the_replica_spec_map(kube):
    """A map: `kubectl explain` shows its value's fields under tfReplicaSpecs (no key in the path)."""
    kubectl, _ = kube
    deadline = time.monotonic() + 60  # the apiserver publishes a new CRD's OpenAPI lazily
    while (r := kubectl("explain", "tfjob.spec.tfReplicaSpecs", "--api-version=kubeflow.org/v1")).returncode != 0:
        assert time.monotonic() < deadline, r.stderr
        time.sleep(1)
    assert re.search(r"FIELD:\s+tfReplicaSpecs\s+<map\[string\]Object>", r.stdout), r.stdout
    assert re.findall(r"^  (\w+)\t", r.stdout, re.M) == ["replicas", "restartPolicy", "template"], r.stdout
    assert "in any case" in r.stdout
    r = kubectl("explain", "tfjob.spec.tfReplicaSpecs.template.spec.containers")
    assert re.search(r"FIELD:\s+containers\s+<\[\]Object>", r.stdout), r.stdout
    assert "List of containers belonging to the pod" in r.stdout
    assert re.search(r"^VERSION:\s+v1$", r.stdout, re.M), r.stdout  # v1 is the preferred version


@pytest.mark.cluster
def test_mixed_case_replica_types_round_trip_through_every_version(kube):
    kubectl, ns = kube
    job = mixed_case_job("v1beta1")
    del job["status"]
    del job["spec"]["runPolicy"]
    job["spec"]["cleanPodPolicy"] = "All"  # the legacy place, kept beside the defaulted runPolicy
    job["metadata"] = {"name": f"mixed-{uuid.uuid4().hex[:6]}"}
    worker = job["spec"]["tfReplicaSpecs"]["WORKER"]
    worker["template"]["spec"]["containers"][0]["env"] = [{"name": "A", "value": "1"}]
    r = kubectl("apply", "--server-side", "-n", ns, "-f", "-", input=json.dumps(job))
    assert r.returncode == 0, r.stderr
    worker = copy.deepcopy(worker)  # every key's template is checked, so defaulted: ports' protocol
    worker["template"]["spec"]["containers"][0]["ports"][0]["protocol"] = "TCP"
    for version in VERSIONS:  # conversion None: each reads the stored object via its schema
        r = kubectl("get", f"tfjobs.{version}.kubeflow.org", job["metadata"]["name"],
                    "-n", ns, "-o", "json")
        assert r.returncode == 0, r.stderr
        got = json.loads(r.stdout)
        assert got["apiVersion"] == f"kubeflow.org/{version}"
        assert set(got["spec"]["tfReplicaSpecs"]) == {"chief", "WORKER", "Ps"}, version
        assert got["spec"]["tfReplicaSpecs"]["WORKER"] == worker, version
        assert got["spec"]["runPolicy"] == {}, version  # defaulted: the Kubeflow SDK requires it
        assert got["spec"]["cleanPodPolicy"] == "All", version


@pytest.mark.cluster
@pytest.mark.parametrize("make,problem", [b[1:] for b in BLOCKED], ids=[b[0] for b in BLOCKED])
def test_blocking_schema_errors_stop_the_rules_on_apiserver(kube, make, problem):
    kubectl, ns = kube
    job = make()
    del job["status"]
    job["metadata"].pop("namespace")
    r = kubectl("apply", "--server-side", "-n", ns, "-f", "-", input=json.dumps(job))
    assert r.returncode != 0 and problem[0] in r.stderr and problem[1].split(":")[0] in r.stderr, r.stderr
    assert "some validation rules were not checked" in r.stderr, r.stderr
    assert "differ only in case" not in r.stderr, r.stderr


@pytest.mark.cluster
def test_duplicate_keys_refused_naming_both(kube):
    kubectl, ns = kube
    job = good_job()
    del job["status"]
    job["metadata"].pop("namespace")
    job["spec"]["tfReplicaSpecs"].update({"WORKER": {}, "worker": {}})  # 4 keys: within maxProperties
    r = kubectl("apply", "--server-side", "-n", ns, "-f", "-", input=json.dumps(job))
    assert r.returncode != 0, r.stdout
    assert spec_rules.duplicate_message("WORKER", "Worker") in r.stderr, r.stderr
    assert [p.message for p in crd.schema_problems(job)] == [spec_rules.duplicate_message("WORKER", "Worker")]


# (case, managedBy stored, managedBy after an update; None: unset, refused?)
MANAGED_BY_UPDATES = [
    ("set", None, "kueue.x-k8s.io/multikueue", True),
    ("removed", "kueue.x-k8s.io/multikueue", None, True),
    ("changed", "kueue.x-k8s.io/multikueue", "tfop", True),
    ("emptied", "tfop", "", True),
    ("kept", "tfop", "tfop", False),  # another field of runPolicy changes
    ("unset kept", None, None, False),
]


def managed_by_updates(kubectl, ns: str) -> dict[str, tuple[int, str]]:
    """Each case's (kubectl's return code, its stderr): a suspended job created with the stored
    managedBy, then merge-patched to the other and a new backoffLimit."""
    answers = {}
    for i, (case, before, after, _) in enumerate(MANAGED_BY_UPDATES):
        job = good_job()
        del job["status"]
        job["metadata"] = {"name": f"managed-by-{i}"}
        job["spec"]["runPolicy"]["suspend"] = True  # no operator on the cluster runs it
        if before is not None:
            job["spec"]["runPolicy"]["managedBy"] = before
        r = kubectl("apply", "--server-side", "-n", ns, "-f", "-", input=json.dumps(job))
        assert r.returncode == 0, (case, r.stderr)
        patch = {"spec": {"runPolicy": {"managedBy": after, "backoffLimit": 4}}}
        r = kubectl("patch", "tfjob", f"managed-by-{i}", "-n", ns, "--type=merge", "-p", json.dumps(patch))
        answers[case] = (r.returncode, r.stderr)
    return answers


def assert_managed_by_fixed(answers: dict[str, tuple[int, str]]) -> None:
    for case, _, _, refused in MANAGED_BY_UPDATES:
        code, err = answers[case]
        if refused:
            assert code != 0 and "spec.runPolicy.managedBy" in err and spec_rules.MSG_MANAGED_BY in err, (case, err)
        else:
            assert code == 0, (case, err)


@pytest.mark.cluster
def test_managed_by_cannot_change_after_creation(kube):
    kubectl, ns = kube
    assert_managed_by_fixed(managed_by_updates(kubectl, ns))
