"""TF_CONFIG -> what this process does in the training job.

Pure Python (no TensorFlow), so the e2e suite's unit tests can import it. The
rules follow TensorFlow's and TFJob's:

- no TF_CONFIG (tfop leaves it out of a one-pod job), or an empty cluster:
  train alone;
- the cluster has "ps" tasks: ParameterServerStrategy. The chief coordinates,
  ps and worker tasks serve until they are stopped;
- otherwise MultiWorkerMirroredStrategy: every chief and worker task trains;
- an evaluator has nothing to do here and exits 0.

enableDynamicWorker's sparse TF_CONFIG (a worker sees itself and the ps
tasks, the chief sees no one) leaves the chief nothing to coordinate: its
workers and ps tasks are refused, its chief trains alone.

The chief is the "chief" task (TFJob's Master is renamed to it: TensorFlow
knows no "master"), else worker 0. It writes the real checkpoints and is the
task whose success decides the TFJob's.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

# Strategies, by TensorFlow's class names ("local": tf.distribute's default strategy, one process)
LOCAL = "local"
MIRRORED = "MultiWorkerMirroredStrategy"
PARAMETER_SERVER = "ParameterServerStrategy"

TRAIN = "train"            # runs the training loop (every task under MWMS, or alone)
COORDINATE = "coordinate"  # the PS chief: drives workers through a ClusterCoordinator
SERVE = "serve"            # a PS job's ps or worker task: a tf.distribute.Server until stopped
IDLE = "idle"              # an evaluator: nothing to do

# TF 1's between-graph replication (train_between_graph.py): no tf.distribute strategy; each worker
# builds its own graph with the variables on the ps tasks (tf.compat.v1.train.replica_device_setter).
BETWEEN_GRAPH = "between-graph"

TRAINING_JOBS = ("chief", "worker", "ps")  # the evaluator is never part of the training cluster


@dataclass(frozen=True)
class Task:
    type: str    # chief, worker, ps or evaluator; "" when training alone
    index: int
    strategy: str
    duty: str
    is_chief: bool
    cluster: dict = field(default_factory=dict)  # the training cluster, as tf.train.ClusterSpec takes it

    @property
    def name(self) -> str:
        return f"{self.type}:{self.index}" if self.type else "local"


def _job_name(name: str) -> str:
    name = name.lower()
    return "chief" if name == "master" else name


def _addresses(tasks) -> list | dict:
    """A job's addresses: a list, or the sparse form {index: address} of enableDynamicWorker."""
    if isinstance(tasks, dict):
        return {int(index): address for index, address in tasks.items()}
    return list(tasks or [])


def task_from_tf_config(text: str | None) -> Task:
    """Parses TF_CONFIG's JSON text; raises ValueError when it describes no task this script can run."""
    if not text or not text.strip():
        return Task("", 0, LOCAL, TRAIN, True)
    try:
        config = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"TF_CONFIG is not JSON: {error}") from None
    cluster = {_job_name(job): _addresses(tasks) for job, tasks in (config.get("cluster") or {}).items()}
    cluster = {job: tasks for job, tasks in cluster.items() if job in TRAINING_JOBS and tasks}
    if not cluster:
        return Task("", 0, LOCAL, TRAIN, True)

    task = config.get("task") or {}
    task_type, index = _job_name(str(task.get("type") or "")), int(task.get("index") or 0)
    if not task_type:
        raise ValueError(f"TF_CONFIG names no task type: {text}")
    strategy = PARAMETER_SERVER if "ps" in cluster else MIRRORED
    is_chief = task_type == "chief" or (task_type == "worker" and index == 0 and "chief" not in cluster)
    if task_type == "evaluator":
        return Task(task_type, index, strategy, IDLE, False, cluster)
    if task_type not in cluster:
        raise ValueError(f"TF_CONFIG's task {task_type}:{index} is not in its cluster {sorted(cluster)}")
    if index not in (cluster[task_type] if isinstance(cluster[task_type], dict)
                     else range(len(cluster[task_type]))):
        raise ValueError(f"TF_CONFIG's task {task_type}:{index} is not in its cluster: no such index")

    if strategy == MIRRORED:
        return Task(task_type, index, strategy, TRAIN, is_chief, cluster)
    if "chief" not in cluster:
        raise ValueError("a parameter-server job needs a Chief (or Master) task to coordinate it "
                         "(the sparse TF_CONFIG of enableDynamicWorker names none)")
    if "worker" not in cluster:
        raise ValueError("a parameter-server job needs at least one Worker task")
    duty = COORDINATE if task_type == "chief" else SERVE
    return Task(task_type, index, strategy, duty, is_chief, cluster)


def between_graph_task_from_tf_config(text: str | None) -> Task:
    """The task of a TF 1 between-graph job, the seeds' shape: ps and worker tasks and no chief
    (worker 0 is TensorFlow's chief: it initializes, restores and saves). ps tasks serve, workers
    train. Raises ValueError for any other TF_CONFIG."""
    try:
        config = json.loads(text or "{}")
    except json.JSONDecodeError as error:
        raise ValueError(f"TF_CONFIG is not JSON: {error}") from None
    cluster = {_job_name(job): _addresses(tasks) for job, tasks in (config.get("cluster") or {}).items()}
    cluster = {job: tasks for job, tasks in cluster.items() if job in TRAINING_JOBS and tasks}
    if set(cluster) != {"ps", "worker"}:
        raise ValueError("between-graph replication needs PS and Worker replicas and no Chief or Master "
                         f"(worker 0 is the chief); TF_CONFIG's cluster has {sorted(cluster) or 'none'}")
    task = config.get("task") or {}
    task_type, index = _job_name(str(task.get("type") or "")), int(task.get("index") or 0)
    if task_type not in cluster or not 0 <= index < len(cluster[task_type]):
        raise ValueError(f"TF_CONFIG's task {task_type or '?'}:{index} is not in its cluster {sorted(cluster)}")
    return Task(task_type, index, BETWEEN_GRAPH, SERVE if task_type == "ps" else TRAIN,
                task_type == "worker" and index == 0, cluster)
