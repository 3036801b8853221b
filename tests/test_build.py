"""e2e.build without Go: cache keys and the coredns component's own main package."""
from __future__ import annotations

import re

import pytest

from e2e import build


def test_key_covers_go_sources_only_where_there_are_some(tmp_path, monkeypatch):
    monkeypatch.setattr(build, "COMPONENTS_DIR", tmp_path)
    comp = tmp_path / "c"
    comp.mkdir()
    (comp / "go.mod").write_text("module x\n")
    (comp / "go.sum").write_text("")
    tool_only = build.component_key("c")
    (comp / "README").write_text("not a Go file")
    assert build.component_key("c") == tool_only
    (comp / "main.go").write_text("package main\n")
    with_main = build.component_key("c")
    assert with_main != tool_only
    (comp / "main.go").write_text("package main\n\nfunc main() {}\n")
    assert build.component_key("c") != with_main


def test_coredns_is_its_own_main_package_built_by_default():
    assert build.COMPONENTS["coredns"] == {"coredns": "."}
    assert set(build.REAL_NODE_COMPONENTS) <= set(build.DEFAULT_COMPONENTS)
    assert "kubelet" in build.COMPONENTS["kubernetes"]
    # after kubernetes, whose compiled k8s.io packages it partly reuses
    assert build.DEFAULT_COMPONENTS.index("coredns") > build.DEFAULT_COMPONENTS.index("kubernetes")


def test_coredns_directives_are_the_imported_plugins():
    src = (build.COMPONENTS_DIR / "coredns" / "main.go").read_text()
    imported = re.findall(r'_ "github\.com/coredns/coredns/plugin/(\w+)"', src)
    directives = re.findall(r'"(\w+)"', re.search(r"Directives = \[\]string\{(.*?)\}", src, re.S).group(1))
    assert sorted(imported) == sorted(directives)
    assert len(directives) == len(set(directives))


@pytest.mark.parametrize("pkg,module,name", [
    ("k8s.io/kubernetes/cmd/kube-apiserver", "tfop.local/e2e/components/kubernetes", "kube-apiserver"),
    ("go.etcd.io/etcd/server/v3", "tfop.local/e2e/components/etcd", "server"),
    (".", "tfop.local/e2e/components/coredns", "coredns"),
    ("github.com/kubeflow/training-operator/cmd/training-operator.v1", "x", "training-operator.v1"),
])
def test_go_output_name(pkg, module, name):
    assert build.go_output_name(pkg, module) == name


def test_every_component_builds_distinct_files():
    """All of a component's binaries come from one `go build -o DIR/`: their files must not collide."""
    for component, binaries in build.COMPONENTS.items():
        module = build._module_path(component)
        files = [build.go_output_name(pkg, module) for pkg in binaries.values()]
        assert len(set(files)) == len(files), (component, files)
