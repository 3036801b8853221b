"""--event-loop: which loop runs the operator, and what happens when uvloop is asked but missing."""
import asyncio
import sys

import pytest
from click.testing import CliRunner

from tfop.tools.cli import cli
from tfop.runtime.event_loop import event_loop_runner


async def loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__.split(".")[0]


@pytest.mark.parametrize("choice, module", [("auto", "uvloop"), ("uvloop", "uvloop"), ("asyncio", "asyncio")])
def test_each_choice_runs_its_loop(choice, module):
    assert event_loop_runner(choice)(loop_module()) == module


def test_auto_falls_back_to_asyncio_without_uvloop(monkeypatch):
    monkeypatch.setitem(sys.modules, "uvloop", None)  # what `import uvloop` meets where it is not installed
    assert event_loop_runner("auto")(loop_module()) == "asyncio"
    with pytest.raises(ImportError, match="uvloop is not installed"):
        event_loop_runner("uvloop")


def test_asking_for_a_missing_uvloop_is_a_usage_error_before_connecting(monkeypatch):
    monkeypatch.setitem(sys.modules, "uvloop", None)
    result = CliRunner().invoke(cli, ["run", "--event-loop", "uvloop", "--kubeconfig", "/nonexistent"])
    assert result.exit_code == 2
    assert "--event-loop uvloop: uvloop is not installed" in result.output
