import pytest

from tfop.gang import registry
from tfop.gang.backends.coscheduling import CoschedulingLabelsBackend
from tfop.gang.backends.kube_batch import KubeBatchBackend
from tfop.gang.backends.pdb import PdbBackend
from tfop.gang.registry import backend_names, detect_backend, load_backend
from tfop.gang.backends.scheduler_plugins import SchedulerPluginsBackend
from tfop.gang.backends.volcano import VolcanoBackend

NAMES = ["coscheduling", "koordinator", "kube-arbitrator", "kube-batch", "scheduler-plugins",
         "volcano", "yunikorn"]


def test_builtin_names_without_install():
    assert set(NAMES) <= set(backend_names())


def test_builtin_table_matches_setup_cfg_entry_points():
    import configparser
    from pathlib import Path
    cfg = configparser.ConfigParser()
    cfg.read(Path(__file__).resolve().parents[1] / "setup.cfg")
    lines = cfg["options.entry_points"]["tfop.gang_backends"].strip().splitlines()
    declared = dict(line.replace(" ", "").split("=", 1) for line in lines)
    assert declared == registry.BUILTIN


# flag value, --scheduler-name -> class, pods' schedulerName, why
LOAD = [
    (None, None, VolcanoBackend, "volcano",
     "no --gang-scheduler-name given, so volcano (upstream's default); "
     "pods use schedulerName 'volcano'"),
    ("", None, VolcanoBackend, "volcano",
     "no --gang-scheduler-name given, so volcano (upstream's default); "
     "pods use schedulerName 'volcano'"),
    ("volcano", "volcano-gpu", VolcanoBackend, "volcano-gpu",
     "--gang-scheduler-name=volcano; pods use schedulerName 'volcano-gpu' (from --scheduler-name)"),
    ("pdb", None, PdbBackend, "kube-batchd",
     "--gang-scheduler-name=pdb selects kube-arbitrator; pods use schedulerName 'kube-batchd'"),
    ("kube-batch", None, KubeBatchBackend, "kube-batch",
     "--gang-scheduler-name=kube-batch; pods use schedulerName 'kube-batch'"),
    ("coscheduling", None, CoschedulingLabelsBackend, None,
     "--gang-scheduler-name=coscheduling; pods use the cluster's default scheduler"),
    ("scheduler-plugins", None, SchedulerPluginsBackend, "scheduler-plugins-scheduler",
     "--gang-scheduler-name=scheduler-plugins; pods use schedulerName "
     "'scheduler-plugins-scheduler'"),
    ("my-coscheduler", None, SchedulerPluginsBackend, "my-coscheduler",
     "'my-coscheduler' is not a known backend, so scheduler-plugins with pods' schedulerName "
     "'my-coscheduler', as upstream v1.7+ does"),
    ("my-coscheduler", "other", SchedulerPluginsBackend, "other",
     "'my-coscheduler' is not a known backend, so scheduler-plugins with pods' schedulerName "
     "'other', as upstream v1.7+ does"),
]


@pytest.mark.parametrize("name,scheduler,cls,pod_scheduler,why", LOAD)
def test_load_backend(name, scheduler, cls, pod_scheduler, why):
    backend, got_why = load_backend(name, scheduler)
    assert type(backend) is cls
    assert backend.scheduler_name == pod_scheduler
    assert got_why == why


VOLCANO = {"podgroups.scheduling.volcano.sh", "queues.scheduling.volcano.sh"}
SP = {"podgroups.scheduling.x-k8s.io"}
KB = {"podgroups.scheduling.incubator.k8s.io"}
KOORD = {"reservations.scheduling.koordinator.sh"}
NATIVE = {"podgroups.scheduling.k8s.io/v1beta1"}  # discovery lists Kubernetes' own PodGroups (served_key)
DETECT = [
    (VOLCANO | SP | KB | KOORD, "volcano"),
    (VOLCANO | NATIVE, "volcano"),  # a batch scheduler installed on purpose wins over the built-in API
    (KOORD | NATIVE, "koordinator"),
    (SP | KB | KOORD, "scheduler-plugins"),
    (KB | KOORD | {"tfjobs.kubeflow.org"}, "kube-batch"),
    (KOORD, "koordinator"),
    ({"podgroups.scheduling.volcano.sh"} | SP, "scheduler-plugins"),  # half a Volcano install
]


@pytest.mark.parametrize("crds,expected", DETECT)
def test_detect_backend(crds, expected):
    name, why = detect_backend(crds)
    assert name == expected
    assert why.startswith("--gang-scheduler-name=auto: found ") and why.endswith(f"so {expected}")


def test_detect_kubernetes_own_gangs_by_discovery():
    assert registry.served_keys() == {"podgroups.scheduling.k8s.io/v1beta1": ("scheduling.k8s.io/v1beta1", "podgroups")}
    name, why = detect_backend(NATIVE | {"tfjobs.kubeflow.org", "podgroups.scheduling.k8s.io/v1alpha2"})
    assert (name, why) == ("kubernetes", "--gang-scheduler-name=auto: no batch scheduler's CRDs, and the apiserver "
                                         "serves podgroups.scheduling.k8s.io/v1beta1, so kubernetes")
    with pytest.raises(ValueError, match="nor is a built-in gang API served; looked for .*, "
                                         "podgroups.scheduling.k8s.io/v1beta1$"):
        detect_backend({"podgroups.scheduling.k8s.io/v1alpha2"})  # 1.36's API: not what the backend writes


def test_auto_through_load_backend():
    backend, why = load_backend("auto", installed_crds=SP)
    assert type(backend) is SchedulerPluginsBackend
    assert why == ("--gang-scheduler-name=auto: found podgroups.scheduling.x-k8s.io, so "
                   "scheduler-plugins; pods use schedulerName 'scheduler-plugins-scheduler'")


def test_auto_errors():
    with pytest.raises(ValueError, match="looked for podgroups.scheduling.volcano.sh, "
                       "queues.scheduling.volcano.sh, podgroups.scheduling.x-k8s.io, "
                       "podgroups.scheduling.incubator.k8s.io, "
                       "reservations.scheduling.koordinator.sh"):
        detect_backend({"tfjobs.kubeflow.org"})
    with pytest.raises(ValueError, match="needs the list of installed CRDs"):
        load_backend("auto")


def test_bad_names(monkeypatch):
    with pytest.raises(ValueError, match="neither a known backend"):
        load_backend("Not A Scheduler!")
    monkeypatch.setitem(registry.BUILTIN, "broken", "tfop.gang.nowhere:Nothing")
    with pytest.raises(ValueError, match="'broken' .* cannot be loaded"):
        load_backend("broken")
    monkeypatch.setitem(registry.BUILTIN, "not-a-backend", "tfop.api.quantity:parse_quantity")
    with pytest.raises(ValueError, match="not a GangBackend subclass"):
        load_backend("not-a-backend")
    # a broken plugin does not stop auto detection
    assert detect_backend(SP)[0] == "scheduler-plugins"


def test_entry_points_extend_and_override(monkeypatch):
    class EP:
        def __init__(self, name, value):
            self.name, self.value = name, value

    monkeypatch.setattr(registry, "entry_points", lambda group: [
        EP("third-party", "tfop.gang.backends.kube_batch:KubeBatchBackend"),
        EP("volcano", "tfop.gang.backends.kube_batch:KubeBatchBackend")])
    assert "third-party" in backend_names()
    assert type(load_backend("third-party")[0]) is KubeBatchBackend
    assert type(load_backend("volcano")[0]) is KubeBatchBackend


KNOWN = ("coscheduling, koordinator, kube-arbitrator, kube-batch, kubernetes, scheduler-plugins, volcano, yunikorn")


@pytest.mark.parametrize("name,scheduler,warning", [
    (None, None, None), ("", None, None), ("auto", None, None), ("volcano", None, None), ("pdb", None, None),
    ("Not A Scheduler!", None, None),  # refused by load_backend with its own error, not warned about
    ("my-coscheduler", None,
     f"--gang-scheduler-name='my-coscheduler' is not a known backend ({KNOWN}): using scheduler-plugins with "
     "pods' schedulerName 'my-coscheduler', as upstream v1.7+ does; its pods wait unless a scheduler named "
     "'my-coscheduler' runs"),
    ("volcan", None,
     f"--gang-scheduler-name='volcan' is not a known backend ({KNOWN}): using scheduler-plugins with pods' "
     "schedulerName 'volcan', as upstream v1.7+ does; its pods wait unless a scheduler named 'volcan' runs; "
     "did you mean volcano?"),
    ("my-coscheduler", "sp-sched",
     f"--gang-scheduler-name='my-coscheduler' is not a known backend ({KNOWN}): using scheduler-plugins with "
     "pods' schedulerName 'sp-sched', as upstream v1.7+ does; its pods wait unless a scheduler named "
     "'sp-sched' runs"),
])
def test_flag_warning(name, scheduler, warning):
    assert registry.flag_warning(name, scheduler) == warning


@pytest.mark.parametrize("name,hint", [
    ("kube-batcher", "did you mean kube-batch?"), ("yunicorn", "did you mean yunikorn?"),
    ("kube", "did you mean kube-arbitrator or kube-batch or kubernetes?"), ("coscheduling-v2", "did you mean coscheduling?"),
    ("my-scheduler", None),
])
def test_flag_warning_suggests_the_backend_meant(name, hint):
    warning = registry.flag_warning(name)
    assert (warning.rpartition("; ")[2] if hint else warning.endswith(f"named {name!r} runs")) == (hint or True)


def test_flag_warning_knows_third_party_backends(monkeypatch):
    class EP:
        name, value = "third-party", "tfop.gang.backends.kube_batch:KubeBatchBackend"

    monkeypatch.setattr(registry, "entry_points", lambda group: [EP()])
    assert registry.flag_warning("third-party") is None
