"""The ends of the supported Kubernetes range: 1.30 (the oldest) and 1.37 (the newest), each its own
control plane (e2e.harness.cluster, kubernetes="1.30"/"1.37": apiserver, controller manager, kube-scheduler of
that release; etcd, kubectl and kwok the harness's). The harness's own 1.34 runs the whole suite.

On each, one cluster for every check:
- tfop's CRD (crds/, through `tfop manifests`) applies and is stored with every CEL rule as
  shipped (an older apiserver drops what it does not know instead of refusing it), and the bad
  inputs of tests/test_crd.py (BAD_JOBS) are refused as the harness's 1.34 (the session cluster)
  refuses them: the same HTTP code, reason, field paths, cause reasons and messages, tfop's rule
  messages word for word; only the apiserver's own wording of a few errors differs by release
  (RENDERINGS, each listed); and runPolicy.managedBy cannot change once a job exists;
- every seed's TFJob YAML applies verbatim and the operator makes its pods and services;
- a job runs on kwok through restarts, suspends and adoption to Succeeded, the operator running
  with the ServiceAccount and ClusterRole `tfop manifests` renders, under --leader-elect;
- the apiserver's audit log shows every request of that operator served: none answered 400, 403,
  405, 5xx or 404 for a resource the apiserver does not serve (404 for an absent object and 409
  are normal), and its role is exact there too (test_rbac_exact's check).
"""
from __future__ import annotations

import json
import re
from collections import Counter

import pytest
import yaml

from e2e.harness.observed import AUDIT_LOG
from e2e.pytest_plugin import own_cluster
from e2e.tests.gang_helpers import Api
from e2e.tests.lifecycle_helpers import Env, condition, names, raw_seed_docs
from e2e.tests.audit_helpers import (AuditedOperator, AuditTail, assert_role_exact, code, describe, exercise,
                                       live_rules)
from e2e.tests.test_seeds_apply import expected_children
from e2e.harness.tfop_operator import deploy_manifests, wait_established
from tests.test_crd import BAD_JOBS, CEL_MESSAGES, _insertable, assert_managed_by_fixed, good_job, managed_by_updates
from tfop.children.resources import resource_path
from tfop.tools.offline import crd
from tfop.tools.deploy import rbac


OLDEST, NEWEST = "1.30", "1.37"
pytestmark = [pytest.mark.cluster, pytest.mark.builds("kubernetes-1.30", "kubernetes-1.37")]

CRD_NAME = "tfjobs.kubeflow.org"
REFUSAL_NS = "tfop-refusals"
JOB_NS = "tfop-versions"
# As tests/test_crd.py test_bad_jobs_rejected_by_apiserver: status is not written through the
# main resource, and v1alpha2 stands for the legacy versions (served from the same schema).
REFUSED = [b for b in BAD_JOBS if not b[2].startswith("status")]
REFUSAL_VERSIONS = ("v1", "v1alpha2")
SEEDS = raw_seed_docs()


def seed_namespace(seed_id: str, parsed: dict) -> str:
    return parsed["metadata"].get("namespace") or f"seed-{seed_id}"


# -- clusters ------------------------------------------------------------------------
@pytest.fixture(scope="module", params=[OLDEST, NEWEST], ids=lambda v: f"k8s-{v}")
def versioned(request, tmp_path_factory):
    """A control plane of this release, tfop's CRD and RBAC applied once as `tfop manifests` renders them."""
    version = request.param
    with own_cluster(tmp_path_factory.mktemp(f"e2e-k8s-{version}"), ("default",), gpu_nodes=2,
                     kubernetes=version) as c:
        served = c.kubectl("version", "-o", "json").stdout
        assert json.loads(served)["serverVersion"]["gitVersion"].startswith(f"v{version}."), served
        deploy_manifests(c, None)  # raises with kubectl's error if the apiserver refuses the CRD
        for ns in (REFUSAL_NS, JOB_NS, *{seed_namespace(sid, parsed) for sid, _, parsed in SEEDS}):
            c.kubectl("create", "namespace", ns, check=False)
        yield c


class VersionOperator(AuditedOperator):
    """The operator as deployed (its ServiceAccount, ClusterRole, --leader-elect), the manifests
    already applied by `versioned`."""

    deploys_manifests = False


@pytest.fixture(scope="module")
def audited(versioned):
    """One operator for the seeds and the job; the audit entries of its token from its start on."""
    namespaces = sorted({JOB_NS, *(seed_namespace(sid, parsed) for sid, _, parsed in SEEDS)})
    op = VersionOperator(versioned, namespaces)
    path = versioned.dir / AUDIT_LOG
    audit = AuditTail(path, "", path.stat().st_size)
    op.start()
    audit.credential = op.credential
    try:
        yield op, audit
    finally:
        op.stop()


# -- the CRD -------------------------------------------------------------------------
def validations(schema: dict, path: str = "") -> dict[str, list]:
    """Every x-kubernetes-validations list of a schema, by its path."""
    found = {}
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == "x-kubernetes-validations":
                found[path] = value
            else:
                found.update(validations(value, f"{path}.{key}"))
    elif isinstance(schema, list):
        for i, value in enumerate(schema):
            found.update(validations(value, f"{path}[{i}]"))
    return found


def test_crd_stored_with_every_rule_as_shipped(versioned):
    shipped = yaml.safe_load(resource_path("crds", crd.CRD_FILE).read_text())
    stored = json.loads(versioned.kubectl("get", "crd", CRD_NAME, "-o", "json").stdout)
    for want, got in zip(shipped["spec"]["versions"], stored["spec"]["versions"], strict=True):
        rules = validations(want["schema"])
        assert rules, "the shipped CRD has no CEL rules"
        assert validations(got["schema"]) == rules, f"{want['name']}: CEL rules stored differently"
        # Nothing else of the schema dropped (pruning of unknown JSONSchemaProps fields) or changed.
        assert got["schema"] == want["schema"], f"{want['name']}: schema stored differently"
    features = {key for rules in validations(shipped["spec"]["versions"][0]["schema"]).values()
                for rule in rules for key in rule}
    assert {"rule", "message", "messageExpression", "fieldPath"} <= features, features
    assert "lowerAscii()" in json.dumps(shipped)


def refusal(api: Api, version: str, change) -> dict:
    """What the apiserver answers a server-side apply (as `kubectl apply --server-side`: strict field
    validation), dry run, of good_job with `change`: code, reason, message, causes."""
    job = good_job(version)
    del job["status"]
    job["metadata"].pop("namespace")
    _insertable(change)(job)
    name = job["metadata"]["name"]
    r = api.session.patch(
        f"{api.base}/apis/kubeflow.org/{version}/namespaces/{REFUSAL_NS}/tfjobs/{name}",
        params={"fieldManager": "kubectl", "fieldValidation": "Strict", "dryRun": "All", "force": "true"},
        data=json.dumps(job), headers={"Content-Type": "application/apply-patch+yaml"}, timeout=30)
    status = r.json()
    causes = sorted((c.get("field", ""), c.get("reason", ""), c.get("message", ""))
                    for c in (status.get("details") or {}).get("causes") or [])
    return {"code": r.status_code, "reason": status.get("reason"), "message": status.get("message"),
            "causes": causes}


def refusals(cluster) -> dict[str, dict]:
    api = Api(cluster)
    return {f"{version}/{case}": refusal(api, version, change)
            for version in REFUSAL_VERSIONS for case, change, _, _ in REFUSED}


# How the apiserver words its own errors changes between releases; what it refuses, where (field
# paths, cause reasons) and tfop's messages do not. Each rendering seen, as a regex -> 1.34's wording;
# anything else that differs fails the test.
RENDERINGS = [
    # A CEL rule's error on an object (a map, the root): 1.30 and 1.34 show its value as the type,
    # 1.37 leaves it out. (tfop's rule messages start with the field they are about.)
    (r"Invalid value: (?=(spec\.tfReplicaSpecs|metadata\.name)\b)", 'Invalid value: "object": '),
    # The note after a schema error that some rules were not run: 1.30 quotes the null.
    (r'Invalid value: "null": ', "Invalid value: null: "),
    # maxLength: 1.30 says "may not be longer than 64", 1.34 "may not be more than 64 bytes".
    (r"Too long: may not be longer than (\d+)", r"Too long: may not be more than \1 bytes"),
    # Server-side apply's typed patch (structured-merge-diff) on a list-map element without its key.
    (r"""omits key field "(\w+)" \(and doesn't have default value\)""",
     r"""omits all key fields ["\1"] (and doesn't have default values for any key fields)"""),
]


def as_on_1_34(answer: dict) -> dict:
    def text(s: str) -> str:
        for pattern, wording in RENDERINGS:
            s = re.sub(pattern, wording, s)
        return s
    return {**answer, "message": text(answer["message"] or ""),
            "causes": [(field, reason, text(message)) for field, reason, message in answer["causes"]]}


_reference: dict[str, dict] = {}


@pytest.fixture
def refusals_on_1_34(request):
    """The harness's own apiserver's answers (the session cluster), once per session."""
    if not _reference:
        cluster = request.getfixturevalue("cluster")
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f",
                        str(resource_path("crds", crd.CRD_FILE)))
        wait_established(cluster, CRD_NAME)
        cluster.kubectl("create", "namespace", REFUSAL_NS, check=False)
        try:
            _reference.update(refusals(cluster))
        finally:
            cluster.kubectl("delete", "namespace", REFUSAL_NS, "--wait=false", check=False)
    return _reference


def test_bad_jobs_refused_as_on_1_34(versioned, refusals_on_1_34):
    got = refusals(versioned)
    for key, answer in refusals_on_1_34.items():  # the table holds on 1.34 (tests/test_crd.py)
        case = next(b for b in REFUSED if b[0] == key.split("/", 1)[1])
        # 422 Invalid; 500 for a field the schema does not declare (server-side apply's typed patch).
        assert answer["code"] in (422, 500), (key, answer)
        if case[3] in CEL_MESSAGES:  # reported at the rule's node, e.g. spec.tfReplicaSpecs
            assert case[3] in answer["message"], (key, case[3], answer)
        else:
            assert case[2].split("[")[0] in answer["message"], (key, case[2], answer)
    assert got.keys() == refusals_on_1_34.keys()
    differ = {key: {"1.34": want, "here": got[key]} for key, want in refusals_on_1_34.items()
              if as_on_1_34(got[key]) != want}
    assert not differ, json.dumps(differ, indent=1)
    verbatim = sum(got[key] == want for key, want in refusals_on_1_34.items())
    print(f"{versioned.state['kubernetes']}: {len(got)} refusals as on 1.34, {verbatim} word for word")


def test_managed_by_cannot_change_after_creation(versioned):
    """The CRD's transition rule (oldSelf), as on 1.34 (tests/test_crd.py)."""
    def kubectl(*args, input=None):
        return versioned.kubectl(*args, input=input, check=False)
    assert_managed_by_fixed(managed_by_updates(kubectl, REFUSAL_NS))


# -- the operator ----------------------------------------------------------------------
def test_seeds_apply_verbatim_and_get_their_children(versioned, audited, tmp_path):
    op, _ = audited
    applied = []
    for seed_id, text, parsed in SEEDS:
        ns = seed_namespace(seed_id, parsed)
        path = tmp_path / f"seed-{seed_id}.yaml"
        path.write_text(text)
        r = versioned.kubectl("apply", "-n", ns, "-f", str(path), check=False)
        assert r.returncode == 0, f"kubectl apply refused seed {seed_id}:\n{r.stderr}\n{text}"
        applied.append((seed_id, ns, parsed))
    for seed_id, ns, parsed in applied:
        env, name = Env(versioned, ns, op), parsed["metadata"]["name"]
        job = env.wait_condition(name, "Created")
        assert condition(job, "Created")["reason"] == "TFJobCreated", env.msg(name)
        children = expected_children(parsed)
        env.wait_children(name, children)
        assert names(env.services(name)) == children
        assert not condition(env.job(name), "Failed"), env.msg(name)
        version = parsed["apiVersion"].rpartition("/")[2]
        assert env.json("get", f"tfjobs.{version}.kubeflow.org", name)["apiVersion"] == f"kubeflow.org/{version}"


def test_job_runs_to_succeeded_under_the_operators_role(versioned, audited):
    """test_rbac_exact's workload: names held by others (409, then reads), adoption (patches), a
    restart, suspend and resume twice, Succeeded, deletion by TTL."""
    op, audit = audited
    exercise(Env(versioned, JOB_NS, op), audit, "plain", None)


def served_resources(api: Api, group: str, version: str, cache: dict) -> set[str]:
    """The resources (and subresources: pods/status) discovery lists for group/version."""
    key = (group, version)
    if key not in cache:
        got = api.get(f"/apis/{group}/{version}" if group else f"/api/{version}") or {}
        cache[key] = {r["name"] for r in got.get("resources") or []}
    return cache[key]


def unserved(api: Api, entries: list[dict]) -> list[str]:
    """Requests not served: anything but 2xx, 409 (conflict, already exists) and 404 for a named
    object of a resource discovery lists (the object is absent)."""
    cache: dict = {}
    out = []
    for e in entries:
        c = code(e)
        if 200 <= c < 300 or c == 409:
            continue
        if c == 404:
            ref = e.get("objectRef") or {}
            resource = (ref.get("resource") or "") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
            if ref.get("name") and ref.get("resource") and \
                    resource in served_resources(api, ref.get("apiGroup", ""), ref.get("apiVersion", ""), cache):
                continue
        out.append(describe(e))
    return out


def test_every_request_of_the_operator_served(versioned, audited):
    """Last: reads what the operator did in this module's tests (and in its start)."""
    op, audit = audited
    op.stop()
    entries = audit.read()
    assert entries, "no audit entries of the operator's token"
    codes = Counter(code(e) for e in entries)
    print(f"{versioned.state['kubernetes']}: {len(entries)} requests of the operator, by code: {dict(codes)}; "
          "not 2xx: " + "; ".join(describe(e) for e in entries if not 200 <= code(e) < 300))
    bad = unserved(Api(versioned), entries)
    assert not bad, f"requests of the operator not served (codes {dict(codes)}):\n" + "\n".join(bad[:40])
    assert codes[409], f"the workload's names held by others were never met (codes {dict(codes)})"
    rules = live_rules(Env(versioned, JOB_NS))
    assert rules == rbac.operator_rules(None)
    assert_role_exact(entries, rules, rbac.NAME)


class _Discovery:
    """Api.get of discovery only: pods (and pods/status) served in v1, nothing in other groups."""

    def get(self, path: str) -> dict | None:
        return {"resources": [{"name": "pods"}, {"name": "pods/status"}]} if path == "/api/v1" else None


def _entry(status: int, resource: str, name: str | None = None, group: str = "", sub: str | None = None) -> dict:
    ref = {"resource": resource, "apiVersion": "v1", **({"apiGroup": group} if group else {}),
           **({"name": name} if name else {}), **({"subresource": sub} if sub else {})}
    return {"verb": "get" if name else "list", "requestURI": f"/{group or 'api'}/v1/{resource}/{name or ''}",
            "objectRef": ref, "responseStatus": {"code": status}}


def test_unserved_tells_an_absent_object_from_an_unknown_resource():
    fine = [_entry(200, "pods"), _entry(404, "pods", "gone"), _entry(404, "pods", "gone", sub="status"),
            _entry(409, "pods", "taken")]
    assert unserved(_Discovery(), fine) == []
    bad = [_entry(404, "pods"), _entry(404, "podgroups", "x", group="scheduling.k8s.io"),
           _entry(404, "pods", "x", sub="eviction"), _entry(403, "pods", "x"), _entry(405, "pods", "x"),
           _entry(400, "pods"), _entry(500, "pods", "x"), _entry(503, "pods")]
    assert len(unserved(_Discovery(), bad)) == len(bad)
