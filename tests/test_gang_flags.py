"""One resolver, one meaning per gang flag: registry.backend_from_flags and the commands using it."""
import pytest
import yaml
from click.testing import CliRunner

from core_fixtures import tfjob
from tfop.gang import registry
from tfop.gang.registry import backend_from_flags
from tfop.tools import gang_flags
from tfop.tools.deploy import manifests
from tfop.tools.deploy import operator_args
from tfop.tools.cli import cli

VOLCANO_CRDS = {"podgroups.scheduling.volcano.sh", "queues.scheduling.volcano.sh"}
SP_CRDS = {"podgroups.scheduling.x-k8s.io"}

# enable, --gang-scheduler-name, installed CRDs -> backend name (None: gang off)
RESOLVE = [
    (False, None, None, None),
    (False, "", None, None),
    (True, None, None, "volcano"),
    (True, "", None, "volcano"),
    (False, "kube-batch", None, "kube-batch"),  # a name implies gang scheduling
    (True, "kube-batch", None, "kube-batch"),
    (False, "pdb", None, "kube-arbitrator"),
    (False, "my-coscheduler", None, "scheduler-plugins"),
    (False, "auto", SP_CRDS, "scheduler-plugins"),
    (True, "auto", VOLCANO_CRDS | SP_CRDS, "volcano"),
    (True, "auto", lambda: SP_CRDS, "scheduler-plugins"),  # a callable is read only for auto
]


@pytest.mark.parametrize("enable,name,crds,want", RESOLVE)
def test_backend_from_flags(enable, name, crds, want):
    backend, why = backend_from_flags(enable, name, None, installed_crds=crds)
    assert (backend.name if backend else None) == want
    assert why.startswith("gang scheduling is off") == (want is None)


def test_crds_are_listed_only_for_auto():
    def must_not_list():
        raise AssertionError("listed CRDs for a named backend")
    backend, _ = backend_from_flags(True, "volcano", installed_crds=must_not_list)
    assert backend.name == "volcano"


@pytest.mark.parametrize("crds,message", [
    (None, "there is no cluster here: name the backend"),  # render, manifests
    (set(), "no gang scheduler's CRDs are installed"),  # a cluster without any
])
def test_auto_without_a_scheduler(crds, message):
    with pytest.raises(ValueError, match=message):
        backend_from_flags(False, "auto", installed_crds=crds)


def test_off_says_where_pods_go():
    assert backend_from_flags(False, None, "my-sched")[1].endswith("pods use schedulerName 'my-sched'")


# Deployment args -> (gang on?, name): the operator's reading, shared by doctor and `tfop gang`
ARGS = [
    (["run", "--all-namespaces"], (False, None)),
    (["run", "--enable-gang-scheduling"], (True, None)),
    (["run", "--gang-scheduler-name", "volcano"], (True, "volcano")),  # implied, as in `tfop run`
    (["run", "--gang-scheduler-name=yunikorn"], (True, "yunikorn")),
    (["run", "--enable-gang-scheduling=false"], (False, None)),
    (["run", "--enable-gang-scheduling=true", "--gang-scheduler-name", "kube-batch"], (True, "kube-batch")),
]


@pytest.mark.parametrize("args,want", ARGS)
def test_gang_flags(args, want):
    assert operator_args.gang_flags(args) == want


@pytest.mark.parametrize("enable,name,sched", [
    (False, None, None), (True, None, None), (False, "volcano", None), (True, "coscheduling", "s"),
])
def test_run_args_read_back(enable, name, sched):
    args = operator_args.run_args(enable, name, sched)
    assert operator_args.gang_flags(args) == (registry.gang_enabled(enable, name), name)
    assert operator_args.flag_value(args, operator_args.SCHEDULER_NAME) == sched


def _help(*command):
    return CliRunner().invoke(cli, [*command, "--help"], terminal_width=200).output


def test_one_help_text_per_flag():
    for command in ("run", "render", "manifests"):
        text = " ".join(_help(command).split())
        for help_text in (gang_flags.ENABLE_HELP, gang_flags.GANG_NAME_HELP, gang_flags.SCHEDULER_NAME_HELP):
            assert " ".join(help_text.split()) in text, command


def _rules(objs):
    return next(o for o in objs if o["kind"] == "ClusterRole")["rules"]


def test_manifests_name_implies_gang():
    result = CliRunner().invoke(cli, ["manifests", "--gang-scheduler-name", "volcano"])
    assert result.exit_code == 0, result.output
    objs = list(yaml.safe_load_all(result.output))
    assert objs == manifests.deploy_objects(True, "volcano")
    dep = next(o for o in objs if o["kind"] == "Deployment")
    assert dep["spec"]["template"]["spec"]["containers"][0]["args"][:2] == ["run", "--enable-gang-scheduling"]


def test_render_name_implies_gang(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(tfjob({"Worker": 2})))
    result = CliRunner().invoke(cli, ["render", "-f", str(path), "--gang-scheduler-name", "volcano"])
    assert result.exit_code == 0, result.output
    assert [o["kind"] for o in yaml.safe_load_all(result.output)][0] == "PodGroup"


@pytest.mark.parametrize("command", [["manifests"], ["render", "-f", "-"]])
def test_auto_refused_offline_with_one_message(command):
    result = CliRunner().invoke(cli, [*command, "--gang-scheduler-name", "auto"],
                                input=yaml.safe_dump(tfjob({"Worker": 1})))
    assert result.exit_code == 2
    assert "there is no cluster here: name the backend" in result.output


@pytest.mark.parametrize("command", ["validate", "render"])
@pytest.mark.parametrize("name,warned", [("volcan", True), ("my-coscheduler", True), ("volcano", False),
                                         (None, False)])
def test_offline_commands_warn_about_an_unknown_backend_name(command, name, warned):
    flags = ["--gang-scheduler-name", name] if name else []
    result = CliRunner().invoke(cli, [command, "-f", "-", *flags], input=yaml.safe_dump(tfjob({"Worker": 1})))
    assert result.exit_code == 0, result.output
    warning = registry.flag_warning(name)
    assert (warning is not None) == warned
    assert result.stderr == (f"WARNING: {warning}\n" if warned else "")
