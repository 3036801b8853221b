"""Helpers for the migration test: the upstream training-operator's CRD and binary, the user's
commands for handing TFJobs from one operator to the other, and what a handover must not change.

The commands are the ones the README's "Migrating from training-operator" section gives users,
run here through the built kubectl against the local control plane:

- upstream's TFJob CRD, from the pinned module's `manifests/base/crds/`, applied the way upstream's
  README installs it (`kubectl apply --server-side`), and the `kubeflow` Namespace its overlay makes;
- `tfop manifests --enable-gang-scheduling --gang-scheduler-name volcano | kubectl apply
  --server-side --force-conflicts -f -` (without the Deployment: the operator runs here as a
  process, e2e/harness/tfop_operator.py), which takes the CRD's fields over;
- upstream's CRD applied again with `--force-conflicts` to go back.

A `Snapshot` records the uid of every pod, service, PodGroup and TFJob of a namespace and every
job's status; `recreated` and `status_regressions` say what a handover changed that it must not.
"""
from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import pytest
import yaml

from e2e import build
from e2e.pytest_plugin import _in_ci
from e2e.harness.tfop_operator import DEPLOYED_GANG, OPERATOR_ACCOUNT, OPERATOR_NAMESPACE, wait_established

COMPONENT = "training-operator"
UPSTREAM_MODULE = "github.com/kubeflow/training-operator"
UPSTREAM_CRD = "manifests/base/crds/kubeflow.org_tfjobs.yaml"  # inside the module, as pinned
CRD_NAME = "tfjobs.kubeflow.org"
# The ValidatingWebhookConfiguration upstream's manifests install (and its cert rotator fills in).
UPSTREAM_WEBHOOK = "validator.training-operator.kubeflow.org"
TFOP_USER = f"system:serviceaccount:{OPERATOR_NAMESPACE}:{OPERATOR_ACCOUNT}"
KINDS = ("pods", "services", "podgroups.scheduling.volcano.sh", "tfjobs.kubeflow.org")
COUNTERS = ("active", "succeeded", "failed")
UNCOMPARED = ("lastReconcileTime",)  # rewritten by every pass of either operator
WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection"}


# -- the upstream operator --------------------------------------------------------------------
def require_upstream_binary() -> None:
    """Build training-operator on demand (minutes the first time, cached after). Without Go and
    without a cached binary the test is skipped, except in CI, where that and a failed build fail."""
    if build.is_built(COMPONENT):
        return
    if build.go_exe() is None:
        msg = f"Go toolchain not found and {COMPONENT} not built: cannot run the migration test"
        if _in_ci():
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg + f" (install Go, then `python -m e2e.build --components {COMPONENT}`)")
    try:
        build.ensure([COMPONENT])
    except build.BuildError as err:
        pytest.fail(f"building {COMPONENT} failed: {err}", pytrace=False)


def upstream_crd() -> Path:
    return build.module_dir(COMPONENT, UPSTREAM_MODULE) / UPSTREAM_CRD


def install_upstream(cluster) -> None:
    """What tfop finds of an upstream install: the `kubeflow` Namespace its standalone overlay
    creates (where tfop's manifests put the operator) and its TFJob CRD."""
    cluster.kubectl("create", "namespace", OPERATOR_NAMESPACE)
    install_upstream_crd(cluster)


def install_upstream_crd(cluster, force_conflicts: bool = False) -> None:
    """`kubectl apply --server-side -f kubeflow.org_tfjobs.yaml`, as upstream installs it."""
    flags = ["--force-conflicts"] if force_conflicts else []
    cluster.kubectl("apply", "--server-side", *flags, "-f", str(upstream_crd()), timeout=120)
    wait_established(cluster, CRD_NAME)


# -- tfop -------------------------------------------------------------------------------------
def tfop_manifests(gang: str) -> list[dict]:
    """`tfop manifests --enable-gang-scheduling --gang-scheduler-name GANG`, as the user runs it."""
    out = subprocess.run([sys.executable, "-m", "tfop", "manifests", "--enable-gang-scheduling",
                          "--gang-scheduler-name", gang], capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0, f"tfop manifests failed ({out.returncode}): {out.stderr}"
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def take_over(cluster, gang: str) -> list[dict]:
    """Apply tfop's manifests over upstream's CRD, server-side, taking the fields over. The
    Deployment is left out: here the operator runs as a local process. Returns what was applied."""
    objects = [o for o in tfop_manifests(gang) if o["kind"] != "Deployment"]
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-",
                    input=yaml.safe_dump_all(objects), timeout=120)
    wait_established(cluster, CRD_NAME)
    setattr(cluster, DEPLOYED_GANG, gang)  # the OperatorProcess need not apply them again
    return objects


def crd_differences(cluster, wanted: Mapping[str, Any]) -> list[str]:
    """Where the live CRD's versions differ from `wanted`'s (names, schema, columns, subresources)."""
    live = json.loads(cluster.kubectl("get", "crd", CRD_NAME, "-o", "json").stdout)
    have = {v["name"]: v for v in live["spec"]["versions"]}
    want = {v["name"]: v for v in wanted["spec"]["versions"]}
    problems = [f"CRD versions are {sorted(have)}, not {sorted(want)}"] if set(have) != set(want) else []
    for name in set(have) & set(want):
        for key in sorted(set(have[name]) | set(want[name])):
            if have[name].get(key) != want[name].get(key):
                problems.append(f"CRD version {name}: {key} differs from the applied manifest")
    return problems


# -- what a handover must not change ----------------------------------------------------------
@dataclass(frozen=True)
class Snapshot:
    uids: dict[tuple[str, str], str]  # (kind, name) -> uid
    deleting: frozenset[tuple[str, str]]  # (kind, name) with a deletionTimestamp
    jobs: dict[str, dict]  # job name -> the whole TFJob

    def dump(self, path: Path) -> None:
        """For a failure's post-mortem: every uid and every job's status, as JSON."""
        path.write_text(json.dumps({"uids": {f"{k} {n}": u for (k, n), u in sorted(self.uids.items())},
                                    "status": {n: j.get("status") for n, j in self.jobs.items()}}, indent=1))

    def status(self, job: str) -> dict:
        return self.jobs[job].get("status") or {}

    def of_job(self, job: str) -> dict[tuple[str, str], str]:
        """The job's pods, services and PodGroup (ones named after it: `<job>-...` or `<job>`)."""
        return {k: u for k, u in self.uids.items()
                if k[0] != "tfjobs.kubeflow.org" and (k[1] == job or k[1].startswith(job + "-"))}


def snapshot(cluster, namespace: str) -> Snapshot:
    uids, deleting, jobs = {}, set(), {}
    for kind in KINDS:
        items = json.loads(cluster.kubectl("get", kind, "-n", namespace, "-o", "json").stdout)["items"]
        for item in items:
            meta = item["metadata"]
            uids[(kind, meta["name"])] = meta["uid"]
            if meta.get("deletionTimestamp"):
                deleting.add((kind, meta["name"]))
            if kind == "tfjobs.kubeflow.org":
                jobs[meta["name"]] = item
    return Snapshot(uids, frozenset(deleting), jobs)


def recreated(before: Snapshot, after: Snapshot, keys) -> list[str]:
    """Objects of `before` (among `keys`) that are gone, replaced (another uid) or being deleted."""
    problems = []
    for key in sorted(keys):
        uid = after.uids.get(key)
        if uid is None:
            problems.append(f"{key[0]} {key[1]} is gone (was uid {before.uids[key]})")
        elif uid != before.uids[key]:
            problems.append(f"{key[0]} {key[1]} was re-created (uid {before.uids[key]} -> {uid})")
        elif key in after.deleting:
            problems.append(f"{key[0]} {key[1]} is being deleted")
    return problems


def status_regressions(job: str, before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """What `after` lost or changed of `before`: every condition as it was (type, status, reason,
    message, times), startTime and completionTime, every replica counter (absent = 0). Fields
    `before` lacks may be added."""
    problems = []
    new_conditions = {c.get("type"): c for c in after.get("conditions") or []}
    for cond in before.get("conditions") or []:
        now = new_conditions.get(cond.get("type"))
        if now is None:
            problems.append(f"{job}: condition {cond.get('type')} is gone")
            continue
        changed = {k: (v, now.get(k)) for k, v in cond.items() if now.get(k) != v}
        if changed:
            problems.append(f"{job}: condition {cond.get('type')} changed: {changed}")
    for key in ("startTime", "completionTime"):
        if key in before and after.get(key) != before[key]:
            problems.append(f"{job}: {key} {before[key]} -> {after.get(key)}")
    for rtype, counts in (before.get("replicaStatuses") or {}).items():
        now = (after.get("replicaStatuses") or {}).get(rtype) or {}
        for counter in COUNTERS:
            if int(now.get(counter) or 0) != int(counts.get(counter) or 0):
                problems.append(f"{job}: replicaStatuses.{rtype}.{counter} {counts.get(counter) or 0} -> "
                                f"{now.get(counter) or 0}")
    return problems


# -- what tfop did (the apiserver's audit log: tfop runs as its ServiceAccount) ----------------
def tfop_child_writes(cluster, since: int, namespace: str) -> list[tuple[str, str, str, int]]:
    """(verb, resource, name, response code) of every write tfop sent to a pod, service or PodGroup
    of the namespace since the audit log's byte offset `since`, dry runs left out."""
    writes = []
    for entry in cluster.audit_entries(since):
        ref = entry.get("objectRef") or {}
        if ((entry.get("user") or {}).get("username") != TFOP_USER or entry.get("verb") not in WRITE_VERBS
                or ref.get("namespace") != namespace or ref.get("resource") not in ("pods", "services", "podgroups")
                or "dryRun" in entry.get("requestURI", "")):
            continue
        writes.append((entry["verb"], ref["resource"], ref.get("name", ""),
                       int((entry.get("responseStatus") or {}).get("code") or 0)))
    return writes


def tfop_events(cluster, namespace: str, job: str) -> list[tuple[str, str]]:
    """(reason, message) of the Events tfop posted on a TFJob."""
    items = json.loads(cluster.kubectl("get", "events", "-n", namespace, "--field-selector",
                                       f"involvedObject.kind=TFJob,involvedObject.name={job}",
                                       "-o", "json").stdout)["items"]
    return [(e.get("reason", ""), e.get("message", "")) for e in items
            if (e.get("source") or {}).get("component") == "tfop" or e.get("reportingComponent") == "tfop"]
