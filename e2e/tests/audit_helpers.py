"""Reading the apiserver's audit log for one operator's requests, and the workload that makes the
operator use every permission it is granted: what test_rbac_exact, test_native_gang and
test_kubernetes_versions check a role with.

The harness's apiserver writes an audit log (Metadata level, ServiceAccount users only:
e2e/harness/control_plane.py AUDIT_POLICY). AuditTail reads the entries of one operator's own token;
assert_role_exact compares them with a role: every request allowed, every grant used.
"""
from __future__ import annotations

import base64
import contextlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import yaml

from e2e.harness.observed import AUDIT_LOG
from e2e.tests.lifecycle_helpers import Env, active, pod_names, replica, tfjob
from e2e.harness.tfop_operator import OperatorProcess, wait_established
from tfop.tools.deploy import rbac

Permission = tuple[str, str, str]  # (apiGroup, resource[/subresource], verb)
CREDENTIAL_ID = "authentication.kubernetes.io/credential-id"
# Not a request of its own: the admission plugin checks it on every create of a child, whose
# ownerReference has blockOwnerDeletion: true.
BLOCK_OWNER_DELETION = ("kubeflow.org", "tfjobs/finalizers", "update")
LEASES = ("coordination.k8s.io", "leases")
LEASE_NAME = rbac.LEADER_ELECTION_LEASE


class AuditedOperator(OperatorProcess):
    """The operator as deployed, remembering the token it runs with: its audit entries carry the
    token's id, so they are told from other operators of the same ServiceAccount. With a gang, it
    deploys that backend's manifests (`tfop manifests` cannot render `auto`) and runs with `auto`
    unless told to run with the backend's name, as those manifests' Deployment does."""

    credential = ""
    by_auto = True

    def args(self) -> list[str]:
        # As deployed: with leader election, on the Lease in the operator's namespace (made anew
        # each run, so that its create is exercised too).
        self.cluster.kubectl("delete", "lease", LEASE_NAME, "-n", "kubeflow", "--ignore-not-found")
        args = super().args() + ["--leader-elect"]
        if self.gang and self.by_auto:
            args[args.index("--gang-scheduler-name") + 1] = "auto"
        self.credential = credential_id(Path(args[args.index("--kubeconfig") + 1]))
        return args


def credential_id(kubeconfig: Path) -> str:
    """The apiserver's id of a ServiceAccount token: JTI=<its jti claim>."""
    token = yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]["token"]
    payload = token.split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return f"JTI={claims['jti']}"


# -- the audit log -------------------------------------------------------------------
class AuditTail:
    """The audit entries of one token, read as the apiserver appends them (from `offset` on)."""

    def __init__(self, path: Path, credential: str, offset: int):
        self.path, self.credential, self.offset = path, credential, offset
        self.entries: list[dict] = []

    def read(self) -> list[dict]:
        with open(self.path, "rb") as log:
            log.seek(self.offset)
            chunk = log.read()
        complete = chunk[:chunk.rfind(b"\n") + 1]  # a line being written is read next time
        self.offset += len(complete)
        for line in complete.splitlines():
            entry = json.loads(line)
            if ((entry.get("user") or {}).get("extra") or {}).get(CREDENTIAL_ID) == [self.credential]:
                self.entries.append(entry)
        return self.entries

    def read_by_name(self, perm: Permission, name: str) -> bool:
        """Has the operator made this request of the object `name` (answered 2xx)?"""
        return any(permission(e) == perm and (e.get("objectRef") or {}).get("name") == name
                   and 200 <= code(e) < 300 for e in self.read())


def permission(entry: dict) -> Permission | None:
    """What RBAC checked for a request; None for a non-resource URL (discovery: /api, /apis/...)."""
    ref = entry.get("objectRef") or {}
    if not ref.get("resource"):
        return None
    resource = ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else "")
    return ref.get("apiGroup", ""), resource, entry["verb"]


def code(entry: dict) -> int:
    return int((entry.get("responseStatus") or {}).get("code") or 0)


def describe(entry: dict) -> str:
    message = (entry.get("responseStatus") or {}).get("message", "")
    return f"{entry['verb']} {entry['requestURI']} -> {code(entry)} {message}"


def allowed_by(entry: dict) -> str:
    """The authorizer's reason: 'RBAC: allowed by ClusterRoleBinding "x" of ClusterRole "y" to ...'."""
    return (entry.get("annotations") or {}).get("authorization.k8s.io/reason", "")


def used_permissions(entries: list[dict]) -> set[Permission]:
    used = {p for p in map(permission, entries) if p is not None}
    # Children were created (2xx, not the dry-run probe), each with blockOwnerDeletion (exercise()
    # checks it), and the admission plugin checks tfjobs/finalizers for that (proven in the gang test).
    if any(permission(e) == ("", "pods", "create") and 200 <= code(e) < 300 and "dryRun" not in e["requestURI"]
           for e in entries):
        used.add(BLOCK_OWNER_DELETION)
    return used


def assert_lease_role_exact(entries: list[dict]) -> list[dict]:
    """The leader election's requests: allowed by its Role, every grant of which is used; the rest."""
    leases = [e for e in entries if (permission(e) or ("", ""))[:2] == LEASES]
    assert leases, "the operator (with --leader-elect) never touched its Lease"
    refused = [describe(e) for e in leases if code(e) == 403]
    assert not refused, "Lease requests refused:\n" + "\n".join(refused)
    elsewhere = {allowed_by(e) for e in leases if f'of Role "{rbac.LEADER_ELECTION_ROLE}"' not in allowed_by(e)}
    assert not elsewhere, f"Lease requests allowed by something else than Role {rbac.LEADER_ELECTION_ROLE}: {elsewhere}"
    named = {(permission(e)[2], (e.get("objectRef") or {}).get("name")) for e in leases}
    assert {verb for verb, _ in named} == {"create", "get", "update"}, named
    assert {name for _, name in named} == {LEASE_NAME}, named
    return [e for e in entries if e not in leases]


def assert_role_exact(entries: list[dict], rules: list[dict], role: str) -> None:
    assert entries, "no audit entries of the operator's token: is the audit log written?"
    entries = assert_lease_role_exact(entries)
    refused = [describe(e) for e in entries if code(e) == 403]
    assert not refused, "the operator was refused:\n" + "\n".join(refused)
    granted = set(rbac.permissions(rules))
    used = used_permissions(entries)
    beyond = sorted(used - granted)
    assert not beyond, f"the operator used permissions its ClusterRole does not grant: {beyond}"
    # Allowed by this ClusterRole, not by some other binding of the ServiceAccount.
    elsewhere = sorted({(permission(e), allowed_by(e)) for e in entries
                        if permission(e) is not None and f'of ClusterRole "{role}"' not in allowed_by(e)})
    assert not elsewhere, f"requests allowed by something other than ClusterRole {role}: {elsewhere}"
    unused = sorted(granted - used)
    assert not unused, (f"ClusterRole {role} grants permissions the operator never used: {unused}; "
                        f"used: {sorted(used)}")


# -- the workload ----------------------------------------------------------------------
@dataclass(frozen=True)
class GangGroup:
    """A backend's group object, as the workload meets it: its kubectl resource name, a group of no
    controller holding the job's name, and an edit of the job that changes the group."""
    resource: str
    squatter: dict
    edit: dict  # a merge patch of the job
    edited: Callable[[dict], bool]  # the group shows the edit


# Every key the computed minResources has.
VOLCANO_MIN_RESOURCES = {"cpu": "30m", "memory": "64Mi"}
VOLCANO = GangGroup(
    "podgroups.scheduling.volcano.sh",
    {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup", "spec": {"minMember": 1}},
    {"spec": {"runPolicy": {"schedulingPolicy": {"minResources": VOLCANO_MIN_RESOURCES}}}},
    lambda group: (group.get("spec") or {}).get("minResources") == VOLCANO_MIN_RESOURCES)
KUBERNETES = GangGroup(
    "podgroups.scheduling.k8s.io",
    {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
     "spec": {"schedulingPolicy": {"gang": {"minCount": 1}}}},
    {"spec": {"runPolicy": {"schedulingPolicy": {"minAvailable": 1}}}},
    lambda group: ((group.get("spec") or {}).get("schedulingPolicy") or {}).get("gang") == {"minCount": 1})


def owner_blocks_deletion(objects: list[dict]) -> bool:
    refs = [r for o in objects for r in o["metadata"].get("ownerReferences") or []]
    return bool(refs) and all(r["kind"] == "TFJob" and r.get("blockOwnerDeletion") is True for r in refs)


def podgroup(env: Env, gang: GangGroup, name: str) -> dict | None:
    got = env.kubectl("get", gang.resource, name, "-o", "json", check=False)
    return json.loads(got.stdout) if got.returncode == 0 else None


def edit_gang(env: Env, gang: GangGroup, name: str) -> None:
    """An edit of the job that changes its PodGroup: the operator merge-patches the group."""
    env.patch_job(name, gang.edit)
    env.wait(f"PodGroup {name} patched after the job's edit {gang.edit}",
             lambda: gang.edited(podgroup(env, gang, name) or {}), job=name)


def squat(env: Env, name: str, gang: GangGroup | None) -> dict[tuple[Permission, str], str]:
    """Objects of no controller, without the job's labels, holding names the job needs: the
    operator's create answers 409 and it reads the holder. (holder's get, its name) -> kubectl ref.
    Service 1 and pod 0 go in one batch of creates (services first, slow start 1, 2, 4...): one pass
    meets both, and a job blocked longer waits longer between tries (tfop/core/blockers.py)."""
    env.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"{name}-worker-0"},
               "spec": {"containers": [{"name": "web", "image": "registry.example/web:1"}]}},
              {"apiVersion": "v1", "kind": "Service", "metadata": {"name": f"{name}-worker-1"},
               "spec": {"clusterIP": "None", "ports": [{"port": 80}]}})
    held = {(("", "pods", "get"), f"{name}-worker-0"): f"pod/{name}-worker-0",
            (("", "services", "get"), f"{name}-worker-1"): f"service/{name}-worker-1"}
    if gang:
        env.apply({**gang.squatter, "metadata": {"name": name}})
        api_group = gang.squatter["apiVersion"].split("/")[0]
        held[((api_group, "podgroups", "get"), name)] = f"{gang.resource}/{name}"
    return held


def free_when_read(env: Env, audit: AuditTail, held: dict[tuple[Permission, str], str]) -> None:
    """Delete each squatter once the operator has read it, in whatever order it meets them."""
    left = dict(held)
    while left:
        read = env.wait(f"the operator reading whose names {sorted(left.values())} are",
                        lambda: [k for k in left if audit.read_by_name(*k)])
        env.kubectl("delete", *(left.pop(key) for key in read), "--wait=true")


def orphan_and_readopt(env: Env, name: str, refs: list[str]) -> None:
    """Someone strips the controller reference off children: the job adopts them back (a patch)."""
    uid = env.job(name)["metadata"]["uid"]
    for ref in refs:
        env.kubectl("patch", ref, "--type=json", "-p", '[{"op": "remove", "path": "/metadata/ownerReferences"}]')
    for ref in refs:
        env.wait(f"{ref} adopted by TFJob {name}", lambda r=ref: [
            o["uid"] for o in env.json("get", r)["metadata"].get("ownerReferences") or []] == [uid], job=name)


def unplaced(obj: dict) -> dict:
    return obj


def exercise(env: Env, audit: AuditTail, name: str, gang: GangGroup | None, priority_class: str | None = None,
             place: Callable[[dict], Any] = unplaced) -> None:
    """Every code path that needs a permission, on one job. `place` pins the TFJob to the test's
    nodes, where the cluster has no general ones."""
    worker = replica(2, restart_policy="ExitCode")
    if priority_class:
        worker["template"]["spec"]["priorityClassName"] = priority_class
    held = squat(env, name, gang)
    env.apply(place(tfjob(name, {"Worker": worker},
                          run_policy={"cleanPodPolicy": "All", "ttlSecondsAfterFinished": 2})))
    free_when_read(env, audit, held)
    everyone = pod_names(name, Worker=2)
    running = env.wait_pods_running(name, everyone, timeout=90)  # a missed retry waits 60 s
    assert owner_blocks_deletion(running + env.services(name)), env.msg(name)
    if gang:
        assert owner_blocks_deletion([podgroup(env, gang, name)]), podgroup(env, gang, name)
        edit_gang(env, gang, name)
    group = [f"{gang.resource}/{name}"] if gang else []
    orphan_and_readopt(env, name, [f"pod/{name}-worker-0", f"service/{name}-worker-0", *group])

    env.mark_exit(f"{name}-worker-1", 137)  # a signal: ExitCode restarts it
    env.wait_job(name, lambda j: (j.get("status") or {}).get("restartCount", 0) >= 1, "a member restarted")
    env.wait_pods_running(name, everyone)

    for _ in range(2):  # the second time, its Events repeat the first's: counted on them (a patch)
        env.patch_job(name, {"spec": {"runPolicy": {"suspend": True}}})
        env.wait_condition(name, "Suspended")
        env.wait_children(name, set(), set())
        if gang:
            env.wait(f"PodGroup {name} deleted", lambda: podgroup(env, gang, name) is None, job=name)
        env.patch_job(name, {"spec": {"runPolicy": {"suspend": False}}})
        env.wait_pods_running(name, everyone, timeout=60)

    env.mark_exit(f"{name}-worker-0", 0)  # worker 0 decides; cleanPodPolicy All deletes worker 1
    env.wait_condition(name, "Succeeded")
    env.wait(f"TFJob {name} deleted by its TTL", lambda: env.job(name) is None, timeout=30, job=name)
    assert not active(env.pods(name)), env.msg(name)


def assert_blockownerdeletion_needs_finalizers(env: Env, job: str) -> None:
    """The admission plugin is on: a ServiceAccount that may create and delete pods, but not
    update tfjobs/finalizers, cannot create a pod owned by a TFJob with blockOwnerDeletion."""
    probe = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "blocks-owner-deletion", "namespace": env.ns, "ownerReferences": [{
            "apiVersion": "kubeflow.org/v1", "kind": "TFJob", "name": job, "uid": env.job(job)["metadata"]["uid"],
            "controller": True, "blockOwnerDeletion": True}]},
        "spec": {"containers": [{"name": "c", "image": "registry.example/none:1"}]}}
    env.kubectl("create", "serviceaccount", "probe")
    env.kubectl("create", "role", "probe", "--verb=create,delete", "--resource=pods")
    env.kubectl("create", "rolebinding", "probe", "--role=probe", f"--serviceaccount={env.ns}:probe")
    kubeconfig = env.cluster.service_account_kubeconfig(env.ns, "probe")

    def create_probe():
        return env.cluster.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(probe),
                                   kubeconfig=kubeconfig, check=False)
    refused = create_probe()
    assert refused.returncode != 0 and "cannot set blockOwnerDeletion" in refused.stderr, refused
    finalizers = {"apiGroups": ["kubeflow.org"], "resources": ["tfjobs/finalizers"], "verbs": ["update"]}
    env.kubectl("patch", "role", "probe", "--type=json",
                "-p", json.dumps([{"op": "add", "path": "/rules/-", "value": finalizers}]))
    env.wait("the probe may set blockOwnerDeletion once granted tfjobs/finalizers update",
             lambda: create_probe().returncode == 0)


# -- the tests -------------------------------------------------------------------------
KUEUE_KINDS = {"workloads": "Workload", "localqueues": "LocalQueue"}


@contextlib.contextmanager
def kueue_kinds_served(cluster):
    """Kueue's Workload and LocalQueue served, so the operator's informers of them list and then watch:
    where the cluster runs no Kueue, stand-in CRDs of the same names (removed after)."""
    made = []
    for plural, kind in KUEUE_KINDS.items():
        name = f"{plural}.kueue.x-k8s.io"
        if cluster.kubectl("get", "crd", name, check=False).returncode == 0:
            continue
        cluster.apply({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                       "metadata": {"name": name}, "spec": {
                           "group": "kueue.x-k8s.io", "scope": "Namespaced",
                           "names": {"plural": plural, "singular": kind.lower(), "kind": kind},
                           "versions": [{"name": "v1beta1", "served": True, "storage": True, "schema": {
                               "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}})
        wait_established(cluster, name)
        made.append(name)
    try:
        yield
    finally:
        for name in made:
            cluster.kubectl("delete", "crd", name, "--ignore-not-found", check=False)


@contextlib.contextmanager
def priority_class_made(cluster, name: str):
    cluster.kubectl("create", "priorityclass", name, "--value=1000")
    try:
        yield name
    finally:
        cluster.kubectl("delete", "priorityclass", name, check=False)


def run_audited(op: AuditedOperator, workload: Callable[[AuditTail], None]) -> list[dict]:
    """Start the operator, run the workload, stop it; its audit entries. A workload that fails
    says which of the operator's requests were refused (a missing grant shows as a timeout)."""
    path = op.cluster.dir / AUDIT_LOG
    audit = AuditTail(path, "", path.stat().st_size)
    try:
        op.start()
        audit.credential = op.credential
        workload(audit)
    except AssertionError as err:
        refused = [describe(e) for e in audit.read() if code(e) == 403]
        if refused:
            raise AssertionError(f"{err}\nrequests of the operator refused:\n" + "\n".join(refused)) from err
        raise
    finally:
        op.stop()
    return audit.read()


def live_rules(env: Env) -> list[dict]:
    return env.json("get", "clusterrole", rbac.NAME)["rules"]


def assert_gang_operator_exact(cluster, namespace: str, picks: str, gang: GangGroup, priority_class: str,
                               place: Callable[[dict], Any] = unplaced, by_auto: bool = True) -> None:
    """The operator runs with the role `tfop manifests --gang-scheduler-name <picks>` renders, and
    with `--gang-scheduler-name auto` (which must pick `picks`) or <picks>; the workload uses every
    grant and no other."""
    from tfop.gang import registry

    op = AuditedOperator(cluster, [namespace], gang_scheduler_name=picks)
    op.by_auto = by_auto
    env = Env(cluster, namespace, op)

    def workload(audit: AuditTail) -> None:
        assert not by_auto or f"so {picks}" in op.log_path.read_text(), op.log_tail()
        exercise(env, audit, "gang", gang, priority_class=priority_class, place=place)
    entries = run_audited(op, workload)
    env.apply(tfjob("owner", {"Worker": replica(1)}))  # no operator runs now: an owner, no pods
    assert_blockownerdeletion_needs_finalizers(env, "owner")
    backend, _ = registry.load_backend(picks)
    rules = live_rules(env)
    assert rules == rbac.operator_rules(backend)
    assert_role_exact(entries, rules, rbac.NAME)
    patches = [describe(e) for e in entries if permission(e) == (backend.group_resource.group, "podgroups", "patch")]
    assert len(patches) == 2, f"one edit of the job and one adoption, two patches of its PodGroup: {patches[:5]}"
