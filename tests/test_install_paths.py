"""The three install paths render the same objects: `tfop manifests`, `kubectl kustomize
manifests/overlays/X` and `helm template charts/tfop`; the image pins its dependencies.

deploy_objects() is the reference. Every overlay is built with kubectl and every
chart variant rendered with helm (built from e2e/components/helm on demand), and
compared object by object, sorted by kind, namespace and name: nothing else is
normalised. Without helm or kubectl these tests skip; in CI (CI=true) they fail.

    .venv/bin/python tests/test_install_paths.py --write-constraints   # regenerate constraints.txt
"""
from __future__ import annotations

import configparser
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import distribution
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

import tfop
from tfop.core.settings import DEFAULT_IMAGE
from tfop.gang import registry
from tfop.tools.deploy import kustomize
from tfop.tools.deploy import manifests
from tfop.tools.deploy import rbac

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "charts" / "tfop"
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
VERSION = kubernetes_validate.utils.latest_version()
TOP_KIND = re.compile(r"^kind: (\S+)$", re.M)
pytestmark = pytest.mark.builds("helm")  # built in the background while the tests before these run


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _unavailable(message: str):
    if _in_ci():
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def helm() -> str:
    from e2e import build

    if not build.is_built("helm") and build.go_exe() is None:
        _unavailable("helm is not built and there is no Go to build it: python -m e2e.build --components helm")
    try:
        return str(build.built_binary("helm"))
    except build.BuildError as err:
        _unavailable(f"helm could not be built: {err}")


@pytest.fixture(scope="session")
def kubectl_bin() -> str:
    from e2e import build

    if build.is_built("kubernetes"):
        return str(build.binary("kubectl"))
    found = shutil.which("kubectl")
    if found is None:
        _unavailable("no kubectl: python -m e2e.build --components kubernetes")
    return found


def _key(obj: dict) -> tuple[str, str, str]:
    return obj["kind"], obj["metadata"].get("namespace") or "", obj["metadata"]["name"]


def _objects(text: str) -> tuple[list[dict], list[str]]:
    """(the objects but CRDs, sorted; the CRDs' text): a CRD is 1 MB of YAML, parsed once only."""
    objs, crds = [], []
    for doc in re.split(r"^---\s*$", text, flags=re.M):
        kind = TOP_KIND.search(doc)
        if kind is None:
            continue  # empty, or comments only
        if kind.group(1) == "CustomResourceDefinition":
            crds.append(doc)
        else:
            objs.append(yaml.load(doc, Loader=LOADER))
    return sorted(objs, key=_key), crds


def _want(options: dict) -> list[dict]:
    return sorted(manifests.deploy_objects(include_crds=False, **options), key=_key)


def _run(args: list[str]) -> str:
    out = subprocess.run(args, capture_output=True, text=True)
    assert out.returncode == 0, f"{' '.join(args)}:\n{out.stderr}"
    return out.stdout


# ------------------------------------------------------------------ generated files
def test_generated_files_are_current():
    assert kustomize.stale_files() == [], "manifests/ or the chart's CRD is stale: run python -m tfop.tools.deploy.kustomize"


def test_crd_copies_are_the_crd():
    crd = (ROOT / "crds" / "kubeflow.org_tfjobs.yaml").read_bytes()
    assert (ROOT / "manifests" / "base" / "crd.yaml").read_bytes() == crd
    assert (ROOT / kustomize.CHART_CRD).read_bytes() == crd


def test_every_backend_has_a_component_and_an_overlay():
    names = set(kustomize.overlays())
    assert {"standalone", "kubeflow", "namespaced"} <= names
    for backend in registry.backend_names():
        assert f"gang-{backend}" in names
        assert (ROOT / "manifests" / "components" / f"gang-{backend}" / "kustomization.yaml").is_file()


@pytest.mark.parametrize("old,new", [
    (["run", "--all-namespaces", "--leader-elect"], ["run", "--a", "--b", "--all-namespaces", "--leader-elect"]),
    (["run", "--all-namespaces", "--leader-elect"], ["run", "--namespace", "x", "--leader-elect"]),
    (["a", "b"], ["b"]),
    (["a"], ["a", "b", "c"]),
    ([{"x": 1}, {"y": [1, 2]}], [{"x": 1}, {"y": [1, 3], "z": "/~"}]),
])
def test_json_ops_turn_old_into_new(old, new):
    """The overlays' patches come from json_ops; applied here as kustomize would."""
    doc = {"spec": old}
    for op in kustomize.json_ops("", {"spec": old}, {"spec": new}):
        doc = _apply(doc, op)
    assert doc == {"spec": new}


def _apply(doc, op):
    """One RFC 6902 op (add, remove, replace, test) on a copy of doc."""
    import copy
    doc = copy.deepcopy(doc)
    *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
    node = doc
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    index = int(last) if isinstance(node, list) else last
    if op["op"] == "test":
        assert node[index] == op["value"]
    elif op["op"] == "remove":
        del node[index]
    elif op["op"] == "add" and isinstance(node, list):
        node.insert(index, op["value"])
    else:
        node[index] = op["value"]
    return doc


# ------------------------------------------------------------------ kustomize
@pytest.fixture(scope="session")
def built(kubectl_bin) -> dict[str, str]:
    """Overlay -> `kubectl kustomize` of it, built side by side (each reads the 1 MB CRD)."""
    def build(overlay: str) -> str:
        return _run([kubectl_bin, "kustomize", str(ROOT / "manifests" / "overlays" / overlay)])

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        return dict(zip(kustomize.overlays(), pool.map(build, kustomize.overlays())))


@pytest.mark.parametrize("overlay", sorted(kustomize.overlays()))
def test_overlay_is_tfop_manifests(built, overlay):
    objs, crds = _objects(built[overlay])
    assert objs == _want(dict(kustomize.overlays()[overlay].options))
    assert len(crds) == 1


def test_overlay_crd_is_the_crd(built):
    _objs, crds = _objects(built["standalone"])
    assert [yaml.load(crds[0], Loader=LOADER)] == manifests.deploy_objects()[:1]


def test_namespaced_overlay_has_no_cluster_wide_rights(built):
    objs, _crds = _objects(built["namespaced"])
    kinds = [o["kind"] for o in objs]
    assert "ClusterRole" not in kinds and "ClusterRoleBinding" not in kinds
    role = next(o for o in objs if o["kind"] == "Role" and o["metadata"]["name"] == "tfop")
    assert role["rules"] == rbac.operator_rules(None)


# ------------------------------------------------------------------ helm
def _helm_args(options: dict) -> list[str]:
    """`helm template` flags for deploy_objects() options."""
    args = ["--namespace", options.get("namespace", "kubeflow")]
    sets = {"enable_gang": "gang.enabled", "gang_scheduler_name": "gang.schedulerName",
            "scheduler_name": "schedulerName", "create_namespace": "createNamespace",
            "pod_monitor": "podMonitor.enabled"}
    for option, value in options.items():
        if option in sets:
            args += ["--set", f"{sets[option]}={str(value).lower() if isinstance(value, bool) else value}"]
        elif option == "watch_namespaces":
            args += ["--set", "watchNamespaces={" + ",".join(value) + "}"]
        elif option == "image":
            repository, _, tag = value.rpartition(":")
            args += ["--set", f"image.repository={repository}", "--set-string", f"image.tag={tag}"]
    return args


HELM_ONLY = {  # variants no overlay stands for
    "gang-default-backend": {"enable_gang": True},
    "gang-alias": {"gang_scheduler_name": "pdb"},
    "gang-other-name": {"gang_scheduler_name": "my-coscheduler"},
    "scheduler-name": {"enable_gang": True, "gang_scheduler_name": "volcano", "scheduler_name": "default-scheduler"},
    "namespaced-gang": {"watch_namespaces": ("team-a", "team-b", "team-a"), "gang_scheduler_name": "volcano"},
    "namespaced-no-crd-rules": {"watch_namespaces": ("team-a",), "gang_scheduler_name": "coscheduling"},
    "elsewhere": {"namespace": "ml", "image": "registry.example/tfop:1.10", "create_namespace": True},
    "pod-monitor": {"pod_monitor": True},
}
HELM_CASES = {**{name: dict(o.options) for name, o in kustomize.overlays().items()}, **HELM_ONLY}


def _template(helm: str, *args: str) -> str:
    return _run([helm, "template", "tfop", str(CHART), *args])


@pytest.mark.parametrize("case", sorted(HELM_CASES))
def test_chart_is_tfop_manifests(helm, case):
    options = HELM_CASES[case]
    objs, crds = _objects(_template(helm, *_helm_args(options)))
    assert objs == _want(options)
    assert crds == []  # CRDs come with --include-crds (helm install applies charts/tfop/crds itself)


def test_chart_crd_is_the_crd(helm):
    _objs, crds = _objects(_template(helm, "--namespace", "kubeflow", "--include-crds"))
    assert [yaml.load(doc, Loader=LOADER) for doc in crds] == manifests.deploy_objects()[:1]


def test_chart_lints(helm):
    _run([helm, "lint", "--strict", str(CHART)])
    _run([helm, "lint", "--strict", str(CHART), "--set", "gang.schedulerName=volcano,watchNamespaces={a}"])


@pytest.mark.parametrize("sets,message", [
    (["gang.schedulerName=auto"], "gang.schedulerName=auto"),
    (["leaderElection.enabled=false"], "replicas > 1 needs leaderElection.enabled"),
    (["podMonitor.enabled=true", "metrics.enabled=false"], "podMonitor.enabled needs metrics.enabled"),
    (["gang.enable=true"], "additional properties 'enable' not allowed"),
    (["watchNamespaces={Team_A}"], "does not match pattern"),
    (["replicas=0"], "minimum"),
])
def test_chart_refuses(helm, sets, message):
    args = [helm, "template", "tfop", str(CHART)] + [a for s in sets for a in ("--set", s)]
    out = subprocess.run(args, capture_output=True, text=True)
    assert out.returncode != 0 and message in out.stderr, out.stderr


def test_chart_values_beyond_tfop_manifests(helm):
    """Values `tfop manifests` has no flag for: each changes only its own field, and the result stays strict-valid."""
    objs, _crds = _objects(_template(
        helm, "--namespace", "kubeflow", "--set", "replicas=3,metrics.port=9090,priorityClassName=high",
        "--set", "nodeSelector.pool=ops,tolerations[0].key=ops,tolerations[0].operator=Exists",
        "--set", "imagePullSecrets[0].name=pull,resources.limits.memory=1Gi,image.pullPolicy=Always"))
    want = _want({})
    assert [_key(o) for o in objs] == [_key(o) for o in want]
    dep = next(o for o in objs if o["kind"] == "Deployment")
    pod = dep["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert dep["spec"]["replicas"] == 3
    assert container["ports"][1] == {"name": "metrics", "containerPort": 9090, "protocol": "TCP"}
    assert container["args"][-2:] == ["--metrics-bind-address", ":9090"]
    assert pod["nodeSelector"] == {"pool": "ops"} and pod["tolerations"] == [{"key": "ops", "operator": "Exists"}]
    assert pod["imagePullSecrets"] == [{"name": "pull"}] and pod["priorityClassName"] == "high"
    assert container["resources"]["limits"]["memory"] == "1Gi" and container["imagePullPolicy"] == "Always"
    for obj in objs:
        kubernetes_validate.validate(obj, VERSION, strict=True)
    assert [o for o in objs if o["kind"] != "Deployment"] == [o for o in want if o["kind"] != "Deployment"]


def test_chart_without_leader_election(helm):
    objs, _crds = _objects(_template(helm, "--set", "replicas=1,leaderElection.enabled=false"))
    assert not [o for o in objs if o["kind"] in ("Role", "RoleBinding")]
    dep = next(o for o in objs if o["kind"] == "Deployment")
    assert dep["spec"]["template"]["spec"]["containers"][0]["args"] == ["run", "--all-namespaces"]


def test_chart_without_metrics(helm):
    objs, _crds = _objects(_template(helm, "--set", "metrics.enabled=false"))
    container = next(o for o in objs if o["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert container["args"][-2:] == ["--metrics-bind-address", "0"]
    assert [p["name"] for p in container["ports"]] == ["health"]


def test_chart_pod_monitor(helm):
    objs, _crds = _objects(_template(helm, "--namespace", "kubeflow", "--set",
                                     "metrics.enabled=true,podMonitor.enabled=true,podMonitor.labels.release=prom"))
    monitor = next(o for o in objs if o["kind"] == "PodMonitor")
    dep = next(o for o in objs if o["kind"] == "Deployment")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["namespace"] == "kubeflow" and monitor["metadata"]["labels"]["release"] == "prom"
    assert monitor["spec"]["selector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]
    assert monitor["spec"]["podMetricsEndpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "30s"}]
    assert "metrics" in [p["name"] for p in dep["spec"]["template"]["spec"]["containers"][0]["ports"]]
    off = _objects(_template(helm, "--set", "metrics.enabled=true"))[0]
    assert "PodMonitor" not in [o["kind"] for o in off]


def test_chart_and_image_versions():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    assert chart["appVersion"] == tfop.__version__ == cfg["metadata"]["version"]
    assert f"{values['image']['repository']}:{chart['appVersion']}" == DEFAULT_IMAGE


def test_version_flag():
    from click.testing import CliRunner

    from tfop.tools.cli import cli

    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0 and result.output == f"tfop {tfop.__version__}\n"


# ------------------------------------------------------------------ the image's pins
def install_requires() -> list[Requirement]:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    return [Requirement(line) for line in cfg["options"]["install_requires"].splitlines() if line.strip()]


def resolved_closure() -> dict[str, str]:
    """Name -> installed version of every distribution install_requires pulls in, in this environment."""
    found: dict[str, str] = {}
    seen: set[tuple[str, frozenset]] = set()
    todo = [(r, frozenset()) for r in install_requires()]
    while todo:
        req, extras = todo.pop()
        if req.marker is not None and not any(req.marker.evaluate({"extra": e}) for e in ("", *extras)):
            continue
        name = canonicalize_name(req.name)
        if (name, frozenset(req.extras)) in seen:
            continue
        seen.add((name, frozenset(req.extras)))
        dist = distribution(name)
        found[name] = dist.version
        todo += [(Requirement(r), frozenset(req.extras)) for r in dist.requires or []]
    return dict(sorted(found.items()))


def constraints() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, sep, version = line.partition("==")
            assert sep and version, f"constraints.txt: {line!r} is not NAME==VERSION"
            pins[canonicalize_name(name)] = version
    return pins


def test_constraints_pin_what_setup_cfg_asks_for():
    pins = constraints()
    for req in install_requires():
        name = canonicalize_name(req.name)
        assert name in pins, f"constraints.txt does not pin {name}"
        assert req.specifier.contains(Version(pins[name]), prereleases=True), f"{name}=={pins[name]} vs {req}"


def test_constraints_cover_the_dependency_closure():
    """Every distribution the requirements pull in here is pinned (regenerate with --write-constraints)."""
    assert sorted(set(resolved_closure()) - set(constraints())) == []


def test_dockerfile_installs_with_the_constraints():
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^COPY [^\n]*constraints\.txt", text, re.M)
    assert re.search(r"pip wheel [^\n]*-c constraints\.txt", text)


def write_constraints() -> None:
    header = ("# The image's Python dependencies, pinned (the Dockerfile's `pip wheel -c constraints.txt`):\n"
              "# install_requires of setup.cfg and everything they pull in, at the versions the tests ran with.\n"
              "# Regenerate: .venv/bin/python tests/test_install_paths.py --write-constraints\n")
    (ROOT / "constraints.txt").write_text(header + "".join(f"{n}=={v}\n" for n, v in resolved_closure().items()))


if __name__ == "__main__":
    if sys.argv[1:] == ["--write-constraints"]:
        write_constraints()
    else:
        sys.exit(__doc__)
