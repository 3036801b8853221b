"""What each backend reports while a gang waits, and when Volcano lets pods be created."""
import pytest

from tfop.gang.base import GangState
from tfop.gang.common import pending_reason
from tfop.gang.backends.coscheduling import CoschedulingLabelsBackend
from tfop.gang.backends.koordinator import KoordinatorBackend
from tfop.gang.backends.kube_batch import KubeBatchBackend
from tfop.gang.backends.kubernetes import KubernetesBackend
from tfop.gang.backends.pdb import PdbBackend
from tfop.gang.backends.scheduler_plugins import SchedulerPluginsBackend
from tfop.gang.backends.volcano import VolcanoBackend
from tfop.gang.backends.yunikorn import YunikornBackend

NO_FIT = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."


def pod(message=None, reason="Unschedulable", status="False"):
    conds = [] if message is None else [
        {"type": "PodScheduled", "status": status, "reason": reason, "message": message}]
    return {"status": {"phase": "Pending", "conditions": conds}}


def group(phase=None, conditions=(), **status):
    out = {"spec": {}, "status": dict(status)}
    if phase is not None:
        out["status"]["phase"] = phase
    if conditions:
        out["status"]["conditions"] = list(conditions)
    return out


GANG = "2/5 tasks in gang unschedulable: pod group is not ready, 3 Pending, 5 minAvailable"
UNSCHEDULABLE = {"type": "Unschedulable", "status": "True", "reason": "NotEnoughResources",
                 "message": GANG}

PENDING = [
    ([], ("", "")),
    ([pod(), pod()], ("", "")),
    ([pod(NO_FIT, reason="SchedulerError")], ("", "")),
    ([pod("x", status="True")], ("", "")),
    ([pod(NO_FIT), pod(NO_FIT), pod()], ("Unschedulable", f"2/3 pods unschedulable: {NO_FIT}")),
    ([pod("a"), pod(NO_FIT), pod(NO_FIT), pod("b")],
     ("Unschedulable", f"4/4 pods unschedulable: {NO_FIT} (and 2 other reasons)")),
    ([pod("a"), pod("b")], ("Unschedulable", "2/2 pods unschedulable: a (and 1 other reason)")),
    ([{"status": {"conditions": [{"type": "PodScheduled", "status": "False",
                                  "reason": "Unschedulable"}]}}],
     ("Unschedulable", "1/1 pods unschedulable: no reason given")),
]


@pytest.mark.parametrize("pods,expected", PENDING)
def test_pending_reason(pods, expected):
    assert pending_reason(pods) == expected


WAITING = [pod(NO_FIT)] * 5
POD_MSG = f"5/5 pods unschedulable: {NO_FIT}"
NOT_READY = "pod group is not ready, 5 Pending, 5 minAvailable; Pending: 5 Unschedulable"

VOLCANO = [
    (None, [], GangState(False, "", "PodGroupPending", "waiting for the PodGroup to be created")),
    (group(), [], GangState(False, "", "PodGroupPending",
                            "waiting for Volcano to pick up the PodGroup")),
    (group("Pending"), [], GangState(False, "Pending", "PodGroupPending", "PodGroup is Pending")),
    (group("Pending", [UNSCHEDULABLE]), [],
     GangState(False, "Pending", "NotEnoughResources", f"PodGroup is Pending: {GANG}")),
    # pods created before admission (no Volcano webhook) that the scheduler rejects: their reason wins
    (group("Pending"), WAITING, GangState(False, "Pending", "Unschedulable", f"PodGroup is Pending; {POD_MSG}")),
    # pods that only say the gang is not placed yet: still on its way, not a reason of their own
    (group("Pending"), [pod(NOT_READY)] * 5,
     GangState(False, "Pending", "PodGroupPending", f"PodGroup is Pending; 5/5 pods unschedulable: {NOT_READY}",
               explained=False)),
    (group("Inqueue"), [pod(NOT_READY)] * 5,
     GangState(True, "Inqueue", "", f"PodGroup is Inqueue; 5/5 pods unschedulable: {NOT_READY}", explained=False)),
    (group("Inqueue"), [], GangState(True, "Inqueue", "", "PodGroup is Inqueue")),
    (group("Inqueue", [UNSCHEDULABLE]), WAITING,
     GangState(True, "Inqueue", "NotEnoughResources", f"PodGroup is Inqueue: {GANG}; {POD_MSG}")),
    (group("Running"), [], GangState(True, "Running", "", "PodGroup is Running")),
    (group("Unknown"), [], GangState(True, "Unknown", "", "PodGroup is Unknown")),
    (group("Completed"), [], GangState(True, "Completed", "", "PodGroup is Completed")),
    # a resolved condition (status False) is history, not the reason
    (group("Running", [{**UNSCHEDULABLE, "status": "False"}]), [],
     GangState(True, "Running", "", "PodGroup is Running")),
]


@pytest.mark.parametrize("observed,pods,expected", VOLCANO)
def test_volcano_admits_only_after_pending(observed, pods, expected):
    assert VolcanoBackend().state(observed, pods) == expected


KUBE_BATCH = [
    (None, [], GangState(True)),
    (group("Pending", [UNSCHEDULABLE]), WAITING,
     GangState(True, "Pending", "NotEnoughResources", f"{GANG}; {POD_MSG}")),
    (group("Pending", [{"type": "Unschedulable", "status": "True", "message": "m"}]), [],
     GangState(True, "Pending", "Unschedulable", "m")),
    (group("Running"), [], GangState(True, "Running")),
]


@pytest.mark.parametrize("observed,pods,expected", KUBE_BATCH)
def test_kube_batch_state(observed, pods, expected):
    assert KubeBatchBackend().state(observed, pods) == expected


SCHEDULER_PLUGINS = [
    (None, [], GangState(True)),
    (group("Pending"), WAITING,
     GangState(True, "Pending", "Unschedulable", f"PodGroup is Pending; {POD_MSG}")),
    (group("Scheduling", scheduled=3), [],
     GangState(True, "Scheduling", "", "PodGroup is Scheduling (3 scheduled)")),
    (group("Running", scheduled=5, running=5), [],
     GangState(True, "Running", "", "PodGroup is Running (5 scheduled, 5 running)")),
    (group("Failed", failed=1, succeeded=2), [],
     GangState(True, "Failed", "", "PodGroup is Failed (2 succeeded, 1 failed)")),
]


ECHO = "0/1 nodes are available: 1 optimistic rejection in PostFilter."
CAUSE = ("0/6 nodes are available: 2 Insufficient nvidia.com/gpu, 4 node(s) didn't match Pod's node "
         "affinity/selector. PodGroup ns/tf-job gets rejected due to Pod tf-job-worker-1 is unschedulable "
         "even after PostFilter")
SCHEDULER_PLUGINS.append(  # seed 003 on the real scheduler: 4 echoes, 1 cause; the cause is shown
    (group("Scheduling"), [pod(ECHO), pod(ECHO), pod(CAUSE), pod("0/1 nodes are available: 1 rejection in "
                                                                   "Unreserve."), pod(ECHO)],
     GangState(True, "Scheduling", "Unschedulable",
               f"PodGroup is Scheduling; 5/5 pods unschedulable: {CAUSE} (and 2 other reasons)")))


SCHEDULER_PLUGINS.append(  # only echoes: the cause was on a pod retried since; not explained
    (group("Scheduling"), [pod(ECHO)] * 5,
     GangState(True, "Scheduling", "Unschedulable", f"PodGroup is Scheduling; 5/5 pods unschedulable: {ECHO}",
               explained=False)))


SIBLINGS = ("0/4 nodes are available: pre-filter pod tf-job-ps-0 cannot find enough sibling pods, current pods "
            "number: 4, minMember of group: 5.")
ARRIVING = f"PodGroup is Pending; 1/5 pods unschedulable: {SIBLINGS}"
SCHEDULER_PLUGINS += [  # seen on the real scheduler: its cache one pod behind the gang's creates
    # every member exists: an ordinary step, no reason of its own
    (dict(group("Pending"), spec={"minMember": 5}), [pod(SIBLINGS)] + [pod()] * 4,
     GangState(True, "Pending", "", ARRIVING)),
    # a member is missing (or going): the scheduler is right to say so
    (dict(group("Pending"), spec={"minMember": 5}), [pod(SIBLINGS)] + [pod()] * 3,
     GangState(True, "Pending", "Unschedulable", f"PodGroup is Pending; 1/4 pods unschedulable: {SIBLINGS}")),
    (dict(group("Pending"), spec={"minMember": 5}),
     [pod(SIBLINGS)] + [pod()] * 3 + [dict(pod(), metadata={"deletionTimestamp": "2024-05-01T11:00:00Z"})],
     GangState(True, "Pending", "Unschedulable", ARRIVING)),
    # a sibling says why it does not fit: that is the gang's reason
    (dict(group("Pending"), spec={"minMember": 5}), [pod(SIBLINGS), pod(NO_FIT)] + [pod()] * 3,
     GangState(True, "Pending", "Unschedulable",
               f"PodGroup is Pending; 2/5 pods unschedulable: {NO_FIT} (and 1 other reason)")),
]


@pytest.mark.parametrize("observed,pods,expected", SCHEDULER_PLUGINS)
def test_scheduler_plugins_state(observed, pods, expected):
    assert SchedulerPluginsBackend().state(observed, pods) == expected


@pytest.mark.parametrize("backend", [PdbBackend(), CoschedulingLabelsBackend(),
                                     KoordinatorBackend(), YunikornBackend()])
def test_groupless_backends_admit_and_surface_pod_reasons(backend):
    assert backend.state(None, []) == GangState(True)
    assert backend.state(None, WAITING) == GangState(True, "", "Unschedulable", POD_MSG)


def test_group_changes_default_patch():
    desired = {"spec": {"minMember": 3, "queue": "default"}}
    assert VolcanoBackend().group_changes({"spec": {"minMember": 5, "queue": "default"}},
                                          desired) == {"spec": {"minMember": 3}}
    assert VolcanoBackend().group_changes(desired, desired) is None


def test_volcano_pending_group_says_what_admission_waits_for():
    pending = group("Pending")
    pending["spec"] = {"minResources": {"nvidia.com/gpu": "8", "cpu": "5"}, "queue": "research"}
    state = VolcanoBackend().state(pending, [])
    assert state.message == ("PodGroup is Pending (Volcano admits it once its minResources, cpu 5, nvidia.com/gpu 8, "
                             "fit in the idle capacity of the cluster and of queue research)")


def native(minimum=3, condition=None, deleting=False):
    out = {"metadata": {"name": "j"}, "spec": {"schedulingPolicy": {"gang": {"minCount": minimum}}}, "status": {}}
    if condition is not None:
        out["status"]["conditions"] = [{"type": "PodGroupInitiallyScheduled", **condition}]
    if deleting:
        out["metadata"]["deletionTimestamp"] = "2026-11-27T00:00:00Z"
    return out


def live(n, message=None):
    return [pod(message) for _ in range(n)]


GONE = {"metadata": {"deletionTimestamp": "2026-11-27T00:00:00Z"}, "status": {"phase": "Running"}}
NATIVE_NO_FIT = "minCount (3) cannot be satisfied: 1 scheduled, 2 remaining"
KUBERNETES = [
    (None, [], GangState(False, "", "NotAdmitted", "waiting for the PodGroup to be created")),
    (native(deleting=True), [GONE],
     GangState(False, "", "NotAdmitted", "waiting for the previous PodGroup to be deleted: a gang restart needs a new one")),
    # PreEnqueue holds the pods until minCount exist, and writes nothing
    (native(), live(2), GangState(True, "", "", "waiting for kube-scheduler to try the gang")),
    (native(), live(3), GangState(True, "", "", "waiting for kube-scheduler to try the gang")),
    (native(condition={"status": "False", "reason": "Unschedulable", "message": NATIVE_NO_FIT}),
     live(3, NO_FIT),
     GangState(True, "", "Unschedulable", f"PodGroup not scheduled (Unschedulable): {NATIVE_NO_FIT}; "
                                          f"3/3 pods unschedulable: {NO_FIT}")),
    (native(condition={"status": "False", "reason": "SchedulerError"}), live(3),
     GangState(True, "", "SchedulerError", "PodGroup not scheduled (SchedulerError): no reason given")),
    (native(condition={"status": "True", "reason": "Scheduled"}), live(3),
     GangState(True, "", "", "PodGroup scheduled")),
    # placed once, its pods since deleted (a whole-gang restart): it judges no new gang, so it is made anew
    (native(condition={"status": "True", "reason": "Scheduled"}), [GONE, GONE],
     GangState(False, "", "NotAdmitted", "the PodGroup placed an earlier gang and judges no other: it is made anew",
               spent=True)),
    (native(condition={"status": "True", "reason": "Scheduled"}), [],
     GangState(False, "", "NotAdmitted", "the PodGroup placed an earlier gang and judges no other: it is made anew",
               spent=True)),
]


@pytest.mark.parametrize("observed,pods,expected", KUBERNETES)
def test_kubernetes_state(observed, pods, expected):
    assert KubernetesBackend().state(observed, pods) == expected
