"""The layering contract: api <- gang <- children <- core <- runtime and tools; kube beside them.

kube is tfop's Kubernetes client library (client, informer, work queue, leader election,
Events, probes server, supervisor): it knows nothing of TFJobs, and runtime is the TFJob
wiring on top of it, as a controller on client-go.

Each layer imports only the layers listed for it, so the pure core never reaches
the API client and no layer imports one above it. Checked from the source text,
so a new upward import fails here before anyone runs it.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "tfop"
# layer -> the layers its modules may import (besides itself)
ALLOWED = {
    "api": set(),
    "gang": {"api"},
    "children": {"api", "gang"},
    "core": {"api", "gang", "children"},
    "kube": {"api"},
    "runtime": {"api", "gang", "children", "core", "kube"},
    "tools": {"api", "gang", "children", "core", "kube", "runtime"},
}
TOP_LEVEL_FILES = {"__init__.py", "__main__.py"}


def layer_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "tfop" else None


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from tfop import core` names the layer in the alias, `from tfop.core import x` in the module
            found.update(f"tfop.{a.name}" for a in node.names) if node.module == "tfop" else found.add(node.module)
    return found


def upward_imports(package: Path = PACKAGE) -> list[str]:
    wrong = []
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package)
        if len(relative.parts) == 1:
            continue
        layer = relative.parts[0]
        for module in sorted(imported_modules(path)):
            target = layer_of(module)
            if target is None or target == layer or target not in ALLOWED:
                continue
            if target not in ALLOWED[layer]:
                wrong.append(f"tfop/{relative}: imports {module} ({layer} may import {sorted(ALLOWED[layer])})")
    return wrong


def test_no_layer_imports_upward():
    assert upward_imports() == []


def test_every_layer_is_a_known_package():
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__"}
    files = {p.name for p in PACKAGE.iterdir() if p.is_file() and p.suffix == ".py"}
    assert folders == set(ALLOWED)
    assert files <= TOP_LEVEL_FILES


def test_an_upward_import_is_caught(tmp_path):
    (tmp_path / "core").mkdir()
    (tmp_path / "core" / "bad.py").write_text("from tfop.runtime.controller import Controller\n")
    assert upward_imports(tmp_path) == [
        "tfop/core/bad.py: imports tfop.runtime.controller (core may import ['api', 'children', 'gang'])"]


DOMAIN = re.compile(r"tfjob", re.IGNORECASE)
LIBRARY = "kube"


def library_leaks(package: Path = PACKAGE) -> list[str]:
    """What ties the client library to tfop's domain: an import of core, children, gang or runtime,
    or TFJob named anywhere in its text (code, strings or comments)."""
    found = [wrong for wrong in upward_imports(package) if wrong.startswith(f"tfop/{LIBRARY}/")]
    for path in sorted((package / LIBRARY).rglob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if DOMAIN.search(line):
                found.append(f"tfop/{path.relative_to(package)}:{number}: names TFJob")
    return found


def test_the_client_library_knows_no_tfjob():
    assert ALLOWED[LIBRARY] == {"api"}  # the wire codec only
    assert library_leaks() == []


def test_a_tfjob_in_the_client_library_is_caught(tmp_path):
    (tmp_path / LIBRARY).mkdir()
    (tmp_path / LIBRARY / "cache.py").write_text(
        "from tfop.runtime.jobs import JobKey\nfrom tfop.gang.base import GangBackend\n"
        "def key(obj):  # the TFJob that owns obj\n    return None\n")
    assert library_leaks(tmp_path) == [
        "tfop/kube/cache.py: imports tfop.gang.base (kube may import ['api'])",
        "tfop/kube/cache.py: imports tfop.runtime.jobs (kube may import ['api'])",
        "tfop/kube/cache.py:3: names TFJob"]


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_layer_has_a_docstring(layer):
    init = PACKAGE / layer / "__init__.py"
    assert ast.get_docstring(ast.parse(init.read_text())), f"tfop/{layer}/__init__.py should say what the layer is"


MAX_FUNCTION_LINES, MAX_CLASS_LINES = 60, 200  # a function reads on one screen, a class in one sitting


def oversized(package: Path = PACKAGE, label: str = "tfop") -> list[str]:
    found = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                limit = MAX_CLASS_LINES if isinstance(node, ast.ClassDef) else MAX_FUNCTION_LINES
                lines = node.end_lineno - node.lineno + 1
                if lines > limit:
                    found.append(f"{label}/{path.relative_to(package)}:{node.lineno} {node.name}: {lines} lines")
    return found


def test_functions_and_classes_stay_readable():
    assert oversized() == []


def test_an_oversized_function_is_caught(tmp_path):
    (tmp_path / "long.py").write_text("def long():\n" + "    x = 1\n" * 60)
    assert oversized(tmp_path) == ["tfop/long.py:1 long: 61 lines"]


# e2e/: the harness (a cluster and its components) is what tests and benchmarks stand on; it knows
# neither of them, nor of the experiments.
E2E = PACKAGE.parent / "e2e"
E2E_ABOVE_HARNESS = ("e2e.bench", "e2e.experiments", "e2e.tests", "e2e.demo", "e2e.pytest_plugin")


def harness_imports_above(harness: Path = E2E / "harness") -> list[str]:
    return [f"e2e/harness/{path.relative_to(harness)}: imports {module}"
            for path in sorted(harness.rglob("*.py")) for module in sorted(imported_modules(path))
            if module.startswith(E2E_ABOVE_HARNESS)]


def test_the_harness_imports_no_benchmark_experiment_or_test():
    assert harness_imports_above() == []


def test_a_harness_import_of_a_benchmark_is_caught(tmp_path):
    (tmp_path / "cluster.py").write_text("from e2e.bench.burst import percentile\n")
    assert harness_imports_above(tmp_path) == ["e2e/harness/cluster.py: imports e2e.bench.burst"]


def test_the_harness_stays_readable():
    assert oversized(E2E / "harness", "e2e/harness") == []
