"""The `kubernetes` backend on Kubernetes' own gang scheduling: kube-scheduler v1.37.2 with the
GenericWorkload gate on and scheduling.k8s.io/v1beta1 served (e2e.harness.cluster, kubernetes="1.37"), no
other scheduler. The seeds' scenarios: a gang of N where N-2 fit stays whole and Pending and says
why; room added, all start; a member lost, the gang restarts whole on a new PodGroup; the
sentence for pods kube-scheduler holds silently until every member exists; a high-priority gang
preempting a low one whole, which tfop restarts whole and which finishes.

The control plane is this module's own (a second one beside the session cluster): the batch
schedulers the session cluster runs are built against older Kubernetes libraries.
"""
from __future__ import annotations

import time

import pytest

from e2e.pytest_plugin import own_cluster
from e2e.tests.gang_helpers import (
    POLL,
    Api,
    all_running,
    condition,
    expected_pods,
    gang_status,
    new_namespace,
    operator,
    phases,
    pool,
    prepare_job,
    seed,
    submit,
    wait_all_running,
    wait_until,
    watch_gang_waits,
)
from e2e.tests.audit_helpers import (KUBERNETES, AuditedOperator, assert_gang_operator_exact,
                                       kueue_kinds_served, priority_class_made)
from tfop.gang.backends.kubernetes import scheduled_condition

pytestmark = [pytest.mark.cluster, pytest.mark.builds("kubernetes-1.37")]


@pytest.fixture(scope="module")
def native(tmp_path_factory):
    # No GPU nodes: each test adds its own pool.
    with own_cluster(tmp_path_factory.mktemp("e2e-native-gang"), ("default",), gpu_nodes=0,
                     kubernetes="1.37") as c:
        yield c, Api(c)


@pytest.fixture
def namespace(native, request):
    cluster, _ = native
    ns = new_namespace(cluster, request.node.name)
    yield ns
    cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def podgroup(api: Api, ns: str, name: str) -> dict | None:
    return api.group("kubernetes", ns, name)


def test_gang_of_n_where_n_minus_2_fit_waits_whole_says_why_then_runs(native, namespace):
    cluster, api = native
    with pool(cluster, api, namespace) as p, operator(cluster, namespace, "kubernetes") as op:
        p.add(2, gpus=1)
        # Seed 002's job (Worker 1 GPU, PS cpu) with 4 workers: N=5, and PS + 2 workers (N-2) fit.
        job = prepare_job(seed("002-0"), namespace, p, replicas={"Worker": 4})
        name = job["metadata"]["name"]
        submit(cluster, job)
        watch_gang_waits(api, job)

        group = podgroup(api, namespace, name)
        assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 5}}
        assert group["spec"]["disruptionMode"] == {"all": {}}
        assert group["metadata"]["ownerReferences"][0]["kind"] == "TFJob"
        for pod in api.pods(namespace, name):
            assert pod["spec"]["schedulingGroup"] == {"podGroupName": name}
            assert pod["spec"]["schedulerName"] == "default-scheduler"

        def explained():
            gang = gang_status(api, namespace, name)
            return gang if "cannot be satisfied" in gang.get("schedulerMessage", "") else None
        gang = wait_until(explained, 30, "status.gang with kube-scheduler's verdict",
                          lambda: gang_status(api, namespace, name))
        assert gang["backend"] == "kubernetes" and gang["group"] == name
        assert gang["reason"] == "InsufficientResources", gang
        assert gang["message"] == ("waiting for 4 nvidia.com/gpu for 5 pods as one gang; 2 are free on 2 nodes "
                                   "(at most 1 on one node)"), gang
        assert scheduled_condition(podgroup(api, namespace, name))["status"] == "False"

        p.add(2, gpus=1)
        assert len(wait_all_running(api, job, timeout=60)) == 5
        assert scheduled_condition(podgroup(api, namespace, name))["status"] == "True"
        wait_until(lambda: "message" not in gang_status(api, namespace, name), 20,
                   "status.gang to stop reporting a wait", lambda: gang_status(api, namespace, name))
        errors = [line for line in op.log_path.read_text().splitlines() if " ERROR " in line]
        assert not errors, errors  # the API served: no start-up error


def test_a_lost_member_restarts_the_gang_whole_on_a_new_podgroup(native, namespace):
    cluster, api = native
    with pool(cluster, api, namespace) as p, operator(cluster, namespace, "kubernetes"):
        p.add(2, gpus=1)
        job = prepare_job(seed("002-0"), namespace, p, replicas={"Worker": 2}, name="gang-restart")
        name = job["metadata"]["name"]
        submit(cluster, job)
        wait_all_running(api, job)
        # A member lost before the job is Running is only recreated; after, the gang restarts.
        wait_until(lambda: condition(api.tfjob(namespace, name), "Running"), 20, "job Running")
        before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in api.pods(namespace, name)}
        first_group = podgroup(api, namespace, name)["metadata"]["uid"]

        cluster.kubectl("delete", "pod", f"{name}-worker-1", "-n", namespace, "--wait=false")

        def recreated():
            pods = {p["metadata"]["name"]: p for p in api.pods(namespace, name)}
            return set(pods) == set(before) and all(
                pods[n]["metadata"]["uid"] != before[n] and pods[n]["status"].get("phase") == "Running"
                and not pods[n]["metadata"].get("deletionTimestamp") for n in before)
        wait_until(recreated, 60, "every member recreated (new uid) and Running again",
                   lambda: {**phases(api, namespace, name), "group": podgroup(api, namespace, name)})
        group = podgroup(api, namespace, name)
        assert group["metadata"]["uid"] != first_group, "the gang restarted on the spent PodGroup"
        assert scheduled_condition(group)["status"] == "True"
        obj = api.tfjob(namespace, name)
        assert obj["status"]["restartCount"] == 1 and not condition(obj, "Failed")
        assert [e for e in api.events(namespace, "GangRestart") if e["involvedObject"]["name"] == name]


def test_pods_kube_scheduler_holds_until_all_exist_are_named(native, namespace):
    """A quota lets 2 of 3 pods be created: kube-scheduler places neither and says nothing; tfop says
    the gang waits for pods (and Blocked says why they are missing). Quota raised: all run."""
    cluster, api = native
    with pool(cluster, api, namespace) as p, operator(cluster, namespace, "kubernetes"):
        p.add(3, gpus=1)
        quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "pods", "namespace": namespace},
                 "spec": {"hard": {"pods": "2"}}}
        cluster.apply(quota)
        job = prepare_job(seed("002-0"), namespace, p, replicas={"Worker": 3}, name="short")
        del job["spec"]["tfReplicaSpecs"]["PS"]  # a gang of 3 workers
        name = job["metadata"]["name"]
        submit(cluster, job)

        def held():
            gang = gang_status(api, namespace, name)
            return gang if gang.get("message", "").startswith("waiting for pods: 2 of the gang's 3 exist") else None
        gang = wait_until(held, 30, "status.gang naming the missing pods", lambda: gang_status(api, namespace, name))
        assert gang["message"] == "waiting for pods: 2 of the gang's 3 exist, and kubernetes places none of them until all do"
        assert condition(api.tfjob(namespace, name), "Blocked")
        assert all(v == "Pending" for v in phases(api, namespace, name).values())
        for pod in api.pods(namespace, name):
            conds = pod.get("status", {}).get("conditions") or []
            assert not [c for c in conds if c["type"] == "PodScheduled"], "kube-scheduler said something: " + str(conds)

        quota["spec"]["hard"]["pods"] = "10"
        cluster.apply(quota)
        assert len(wait_all_running(api, job, timeout=90)) == len(expected_pods(job))


def test_doctor_and_auto_find_the_api_and_the_gate(native, namespace, request):
    """doctor's checks of the built-in API against the real apiserver (served, and the gate keeping a
    pod's spec.schedulingGroup on a dry run), and `auto` picking the backend by discovery."""
    from tfop.gang import registry
    from tfop.kube.blocking import BlockingClient
    from tfop.kube.credentials import load_credentials
    from tfop.runtime import discovery
    from tfop.tools.doctor import checks as doctor

    cluster, _ = native
    api_client = BlockingClient(load_credentials(str(cluster.kubeconfig))).__enter__()
    request.addfinalizer(api_client.close)
    backend, _ = registry.load_backend("kubernetes")
    checks = doctor.builtin_api_checks(doctor.Cluster(api_client), backend, namespace)
    assert [(c.title, c.ok) for c in checks] == [
        ("the apiserver serves podgroups in scheduling.k8s.io/v1beta1", True),
        ("pods keep spec.schedulingGroup (feature gate GenericWorkload on)", True)]
    assert not cluster.kubectl("get", "pods", "-n", namespace, "-o", "name").stdout.strip()  # a dry run
    served = api_client.call(discovery.served_group_apis)
    assert served == {"podgroups.scheduling.k8s.io/v1beta1"}
    picked, why = registry.load_backend("auto", installed_crds=doctor.Cluster(api_client).gang_apis())
    assert picked.name == "kubernetes", why


def test_a_high_priority_gang_preempts_a_low_one_whole_which_comes_back_whole(native, namespace):
    """Two GPUs held by a low-priority gang; a high-priority gang of two arrives. kube-scheduler
    evicts the low gang as a unit (its PodGroup's disruptionMode: all), never leaving it part of its
    GPUs; tfop counts one gang restart, a disruption (the scheduler's DisruptionTarget: never against
    backoffLimit), and says why, makes it anew whole on a new PodGroup, where it waits for the high gang to finish, then
    runs whole and finishes."""
    cluster, api = native
    classes = {"tfop-native-low": 10, "tfop-native-high": 1000}
    cluster.apply([{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": n},
                    "value": v} for n, v in classes.items()])
    try:
        with pool(cluster, api, namespace) as p, operator(cluster, namespace, "kubernetes"):
            p.add(2, gpus=1)
            low, high = (prepare_job(seed("004-1"), namespace, p, name=n, replicas={"Worker": 2, "PS": 1})
                         for n in ("low", "high"))
            for job, cls in ((low, "tfop-native-low"), (high, "tfop-native-high")):
                for rspec in job["spec"]["tfReplicaSpecs"].values():
                    rspec["template"]["spec"]["priorityClassName"] = cls
            submit(cluster, low)
            wait_all_running(api, low)
            wait_until(lambda: condition(api.tfjob(namespace, "low"), "Running"), 20, "low Running")
            first_group = podgroup(api, namespace, "low")["metadata"]["uid"]
            first_pods = {p["metadata"]["uid"] for p in api.pods(namespace, "low")}

            submit(cluster, high)
            in_flight, partial_since, t0 = 3.0, None, time.monotonic()  # evictions land pod by pod
            while not all_running(api, high):
                now = time.monotonic() - t0
                assert now < 60, f"high not Running: {phases(api, namespace, 'high')}"
                bound = [n for n, v in phases(api, namespace, "low").items() if "-worker-" in n and "@" in v]
                if len(bound) == 1:
                    partial_since = partial_since if partial_since is not None else now
                    assert now - partial_since <= in_flight, f"low has held 1 of its 2 GPUs since {partial_since:.1f}s"
                else:
                    partial_since = None
                time.sleep(POLL)

            def made_anew_and_waiting():
                pods = [p for p in api.pods(namespace, "low") if not p["metadata"].get("deletionTimestamp")]
                return ({p["metadata"]["name"] for p in pods} == set(expected_pods(low))
                        and not {p["metadata"]["uid"] for p in pods} & first_pods
                        and all(p["status"].get("phase") == "Pending" and not p["spec"].get("nodeName") for p in pods))
            wait_until(made_anew_and_waiting, 60, "low's pods made anew, all Pending",
                       lambda: {**phases(api, namespace, "low"), "status": api.tfjob(namespace, "low")["status"]})
            assert podgroup(api, namespace, "low")["metadata"]["uid"] != first_group
            assert not condition(api.tfjob(namespace, "low"), "Failed")
            # Preemption is the cluster's doing: one restart, a disruption, never counted against backoffLimit.
            low_status = api.tfjob(namespace, "low")["status"]
            assert not low_status.get("restartCount") and low_status.get("disruptionCount") == 1, low_status
            restarts = [e["message"] for e in api.events(namespace, "GangRestart")
                        if e["involvedObject"]["name"] == "low"]
            assert len(restarts) == 1, restarts
            assert restarts[0].startswith(f"TFJob {namespace}/low restarts its whole gang because of a disruption: ") \
                and "PreemptionByScheduler" in restarts[0] and "not counted against backoffLimit" in restarts[0], restarts

            api.exit_pod(namespace, "high-worker-0", 0)
            wait_until(lambda: condition(api.tfjob(namespace, "high"), "Succeeded"), 30, "high Succeeded")
            wait_all_running(api, low, timeout=60)
            api.exit_pod(namespace, "low-worker-0", 0)
            wait_until(lambda: condition(api.tfjob(namespace, "low"), "Succeeded"), 30, "low Succeeded")
    finally:
        cluster.kubectl("delete", "priorityclass", *classes, "--ignore-not-found")


def test_the_operator_uses_exactly_its_role(native, namespace):
    """`tfop manifests --gang-scheduler-name kubernetes` grants exactly what the backend uses, read
    from the audit log as test_rbac_exact does for the other backends: the PodGroup created, read
    when another object holds its name, patched on an edit and an adoption, deleted when spent by a
    gang restart or a suspend, and made anew. The operator runs with `kubernetes`, as those manifests'
    Deployment does: `auto` lists CRDs first, which this role does not grant."""
    cluster, api = native
    with pool(cluster, api, namespace) as p, kueue_kinds_served(cluster), \
            priority_class_made(cluster, f"{namespace}-high") as priority_class:
        p.add(1, gpus=1)
        assert_gang_operator_exact(cluster, namespace, "kubernetes", KUBERNETES, priority_class, place=p.place,
                                   by_auto=False)


def test_auto_under_the_backends_own_role_finds_it_by_discovery(native, namespace):
    """`tfop gang enable --gang-scheduler-name auto` keeps `auto` in the Deployment's args and grants
    the rules of the backend it found: for this one, no CRD rule. The operator cannot list CRDs,
    says so once, finds the API by discovery, and makes the job's gang."""
    cluster, api = native
    with pool(cluster, api, namespace) as p:
        p.add(1, gpus=1)
        op = AuditedOperator(cluster, [namespace], gang_scheduler_name="kubernetes")  # run with `auto`
        op.start()
        try:
            log = op.log_path.read_text()
            assert "cannot list CRDs" in log and "so kubernetes" in log, op.log_tail()
            job = prepare_job(seed("002-0"), namespace, p, replicas={"Worker": 1})
            submit(cluster, job)
            wait_until(lambda: podgroup(api, namespace, job["metadata"]["name"]), 20, "the job's PodGroup",
                       op.log_tail)
        finally:
            op.stop()
