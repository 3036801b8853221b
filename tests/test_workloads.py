"""e2e/workloads without TensorFlow: TF_CONFIG -> task, the progress lines and their parser, exit.py.

The training itself (train.py) needs TensorFlow and runs in the realnode e2e tests.
"""
from __future__ import annotations

import ast
import importlib.util
import signal
import subprocess
import sys
import time

import pytest

from core_fixtures import model, tfjob
from e2e.harness.training import WORKLOADS_DIR, parse_progress
from tfop.children.tfconfig import tf_config


def _load(name: str):
    """A workload module by file, as the pod runs it (they are not a package)."""
    spec = importlib.util.spec_from_file_location(f"workloads_{name}", WORKLOADS_DIR / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


tfc = _load("tf_config")
plog = _load("progress_log")


def _task(replicas: dict, rtype: str, index: int, **spec):
    """The task train.py makes of the TF_CONFIG tfop writes for one pod of a job."""
    return tfc.task_from_tf_config(tf_config(model(tfjob(replicas, **spec)), rtype, index))


# -- TF_CONFIG -> task -----------------------------------------------------------------
# (replicas, type, index) -> (task name, strategy, duty, is chief)
TASKS = [
    ({"Chief": 1, "Worker": 2}, "Chief", 0, ("chief:0", tfc.MIRRORED, tfc.TRAIN, True)),
    ({"Chief": 1, "Worker": 2}, "Worker", 1, ("worker:1", tfc.MIRRORED, tfc.TRAIN, False)),
    ({"Worker": 3}, "Worker", 0, ("worker:0", tfc.MIRRORED, tfc.TRAIN, True)),
    ({"Worker": 3}, "Worker", 2, ("worker:2", tfc.MIRRORED, tfc.TRAIN, False)),
    ({"Master": 1, "Worker": 1}, "Master", 0, ("chief:0", tfc.MIRRORED, tfc.TRAIN, True)),
    ({"Chief": 1, "Worker": 1, "Evaluator": 1}, "Evaluator", 0, ("evaluator:0", tfc.MIRRORED, tfc.IDLE, False)),
    ({"Chief": 1, "PS": 1, "Worker": 2}, "Chief", 0, ("chief:0", tfc.PARAMETER_SERVER, tfc.COORDINATE, True)),
    ({"Chief": 1, "PS": 1, "Worker": 2}, "PS", 0, ("ps:0", tfc.PARAMETER_SERVER, tfc.SERVE, False)),
    ({"Chief": 1, "PS": 2, "Worker": 2}, "Worker", 1, ("worker:1", tfc.PARAMETER_SERVER, tfc.SERVE, False)),
    ({"Master": 1, "PS": 1, "Worker": 1}, "Master", 0, ("chief:0", tfc.PARAMETER_SERVER, tfc.COORDINATE, True)),
]


@pytest.mark.parametrize("replicas,rtype,index,expected", TASKS)
def test_the_task_of_each_pod_of_a_job_follows_its_tf_config(replicas, rtype, index, expected):
    task = _task(replicas, rtype, index)
    assert (task.name, task.strategy, task.duty, task.is_chief) == expected


def test_a_one_pod_job_has_no_tf_config_and_trains_alone():
    assert tf_config(model(tfjob({"Worker": 1})), "Worker", 0) is None
    for text in (None, "", "  ", '{"cluster":{},"task":{}}'):
        task = tfc.task_from_tf_config(text)
        assert (task.name, task.strategy, task.duty, task.is_chief, task.cluster) == (
            "local", tfc.LOCAL, tfc.TRAIN, True, {})


# The seeds' TF 1 shape (train_between_graph.py): PS and Worker, no Chief; worker 0 is the chief.
BETWEEN_GRAPH_TASKS = [
    ({"PS": 1, "Worker": 2}, "Worker", 0, ("worker:0", tfc.TRAIN, True)),
    ({"PS": 1, "Worker": 2}, "Worker", 1, ("worker:1", tfc.TRAIN, False)),
    ({"PS": 2, "Worker": 1}, "PS", 1, ("ps:1", tfc.SERVE, False)),
]


@pytest.mark.parametrize("replicas,rtype,index,expected", BETWEEN_GRAPH_TASKS)
def test_a_between_graph_task_trains_or_serves_and_worker_0_is_its_chief(replicas, rtype, index, expected):
    task = tfc.between_graph_task_from_tf_config(tf_config(model(tfjob(replicas)), rtype, index))
    assert (task.name, task.duty, task.is_chief, task.strategy) == (*expected, tfc.BETWEEN_GRAPH)
    assert set(task.cluster) == {"ps", "worker"}


@pytest.mark.parametrize("replicas,rtype", [({"Chief": 1, "PS": 1, "Worker": 1}, "Worker"),
                                            ({"Worker": 2}, "Worker")])
def test_between_graph_replication_refuses_a_chief_or_a_job_without_ps(replicas, rtype):
    with pytest.raises(ValueError, match="needs PS and Worker replicas and no Chief"):
        tfc.between_graph_task_from_tf_config(tf_config(model(tfjob(replicas)), rtype, 0))


def test_the_training_cluster_renames_master_and_leaves_the_evaluator_out():
    task = _task({"Master": 1, "Worker": 2, "Evaluator": 1}, "Worker", 1)
    assert task.cluster == {
        "chief": ["tf-job-master-0.ml.svc:2222"],
        "worker": ["tf-job-worker-0.ml.svc:2222", "tf-job-worker-1.ml.svc:2222"],
    }


def test_the_sparse_tf_config_of_dynamic_workers_names_no_chief_to_coordinate():
    job = {"Chief": 1, "PS": 1, "Worker": 3}
    for rtype, index in (("Worker", 2), ("PS", 0)):
        with pytest.raises(ValueError, match="needs a Chief .* enableDynamicWorker"):
            _task(job, rtype, index, enableDynamicWorker=True)
    assert _task(job, "Chief", 0, enableDynamicWorker=True).strategy == tfc.LOCAL


@pytest.mark.parametrize("text,message", [
    ("{not json", "not JSON"),
    ('{"cluster":{"worker":["a:1"]},"task":{}}', "no task type"),
    ('{"cluster":{"worker":["a:1"]},"task":{"type":"chief","index":0}}', "not in its cluster"),
    ('{"cluster":{"worker":["a:1"]},"task":{"type":"worker","index":1}}', "no such index"),
    ('{"cluster":{"ps":["a:1"],"worker":["b:1"]},"task":{"type":"worker","index":0}}', "needs a Chief"),
    ('{"cluster":{"chief":["a:1"],"ps":["b:1"]},"task":{"type":"chief","index":0}}', "at least one Worker"),
])
def test_a_tf_config_the_script_cannot_run_is_refused_with_a_reason(text, message):
    with pytest.raises(ValueError, match=message):
        tfc.task_from_tf_config(text)


# -- progress lines ----------------------------------------------------------------
def _run_log(*lines) -> str:
    return "\n".join(lines) + "\n"


def test_the_lines_train_py_writes_parse_into_its_progress():
    log = _run_log(
        "2025-01-01 12:00:00.000 I tensorflow/core/...: noise from TensorFlow",
        plog.progress_line("start", task="worker:1", strategy="MultiWorkerMirroredStrategy", duty="train", steps=50,
                           tensorflow="2.20.0", import_seconds=4.1, time="1714000000.123"),
        plog.progress_line("restored", step=20),
        plog.progress_line("first-step", step=21, time="1714000004.567"),
        plog.progress_line(None, step=21, loss=0.0312, time="1714000004.567"),
        plog.progress_line("checkpoint", step=30, path="/ckpt/ckpt-30"),
        plog.progress_line(None, step=50, loss=0.0099, time="1714000005.000"),
        plog.progress_line("done", steps=50, loss=0.0101, time="1714000005.012"),
    )
    progress = parse_progress(log)
    assert (progress.runs, progress.task, progress.strategy, progress.duty) == (
        1, "worker:1", "MultiWorkerMirroredStrategy", "train")
    assert progress.started_time == 1714000000.123
    assert (progress.restored_from, progress.first_step, progress.first_step_time) == (20, 21, 1714000004.567)
    assert progress.losses == {21: 0.0312, 50: 0.0099}
    assert (progress.steps, progress.last_loss, progress.checkpoints, progress.last_checkpoint) == (
        50, 0.0099, [30], 30)
    assert (progress.done, progress.final_loss, progress.done_time) == (True, 0.0101, 1714000005.012)
    assert not progress.errors and not progress.terminated and not progress.serving


def test_floats_keep_six_significant_digits_and_values_no_spaces():
    assert plog.progress_line(None, step=3, loss=0.000123456789) == "tfop-train step=3 loss=0.000123457"
    assert plog.progress_line("checkpoint", path="/a b") == "tfop-train checkpoint path=/a_b"
    assert float(plog.timestamp()) == pytest.approx(time.time(), abs=5)


def test_a_failed_run_reports_its_error_and_a_restarted_log_its_last_run():
    log = _run_log(
        plog.progress_line("start", task="chief:0", time="10.0"),
        plog.progress_line("first-step", step=1, time="11.0"),
        "tfop-train error: lost a peer (UnavailableError: Connection reset by peer); exiting 138",
        "2025-01-01T12:00:05.000000000Z " + plog.progress_line("start", task="chief:0", time="20.0"),
        "2025-01-01T12:00:06.000000000Z " + plog.progress_line("restored", step=40),
        "2025-01-01T12:00:07.000000000Z tfop-train error: final loss 0.5 is above the target 0.02 after 40 steps",
    )
    progress = parse_progress(log)
    assert (progress.runs, progress.started_time, progress.restored_from, progress.steps) == (2, 20.0, 40, 40)
    assert progress.first_step is None and progress.last_checkpoint is None and not progress.done
    assert progress.errors == ["final loss 0.5 is above the target 0.02 after 40 steps"]


def test_a_parameter_server_task_serves_until_terminated():
    progress = parse_progress(_run_log(
        plog.progress_line("start", task="ps:0", strategy="ParameterServerStrategy", duty="serve", time="1.0"),
        plog.progress_line("serve", task="ps:0", target="grpc://tf-job-ps-0.ml.svc:2222", time="1.5"),
        plog.progress_line("terminated", signal="SIGTERM", time="9.0"),
    ))
    assert (progress.duty, progress.serving, progress.terminated, progress.done) == ("serve", True, True, False)


def test_a_log_without_progress_lines_parses_to_nothing():
    assert parse_progress("python3: can't open file '/workload/train.py'\n") == parse_progress("")
    assert parse_progress("").runs == 0


# -- what the pods mount and run ---------------------------------------------------------
def test_the_workloads_are_five_scripts_a_configmap_can_hold():
    # ConfigMap keys: [-._a-zA-Z0-9]+; the training scripts import tf_config and progress_log from their own
    # directory
    assert {path.name for path in WORKLOADS_DIR.iterdir() if path.suffix == ".py"} == {
        "train.py", "train_between_graph.py", "exit.py", "tf_config.py", "progress_log.py"}


def test_the_scripts_import_only_the_standard_library_tensorflow_and_each_other():
    siblings = {path.stem for path in WORKLOADS_DIR.glob("*.py")}
    allowed = set(sys.stdlib_module_names) | {"tensorflow"} | siblings
    for path in WORKLOADS_DIR.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            for name in names:
                assert name.split(".")[0] in allowed, f"{path.name} imports {name}"


# -- exit.py (no TensorFlow: it runs here) ---------------------------------------------------
def _exit_py(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(WORKLOADS_DIR / "exit.py"), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("code", [0, 3, 138])
def test_exit_py_exits_with_the_code_asked(code):
    proc = _exit_py("--code", str(code))
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == code
    assert f"tfop-exit exit code={code} " in out


def test_exit_py_refuses_a_code_out_of_range():
    proc = _exit_py("--code", "256")
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2 and "0 to 255" in err


def test_exit_py_leaves_on_sigterm_with_143_while_it_sleeps():
    proc = _exit_py("--sleep", "inf")
    assert proc.stdout.readline().startswith("tfop-exit start sleep=inf code=0 ")
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=10)
    assert proc.returncode == 143
    assert out.startswith("tfop-exit terminated signal=SIGTERM ")
