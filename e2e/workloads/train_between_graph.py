"""Trains y = 3x + 2 (plus noise) the TF 1 way: between-graph replication over PS and Worker tasks.

    python3 /workload/train_between_graph.py [--steps 60] [--checkpoint-dir DIR] ...

The seeds' shape: PS and Worker replicas and no Chief. Worker 0 is TensorFlow's chief. Each worker
builds its own graph (tf.compat.v1, graph mode), with the variables and the global step placed on
the ps tasks by tf.compat.v1.train.replica_device_setter, and trains asynchronously through a
tf.compat.v1.train.MonitoredTrainingSession. The chief initializes the variables or restores them
from --checkpoint-dir, writes graph.pbtxt there and saves every --checkpoint-every global steps.
Workers stop once the global step reaches --steps. A run that starts past step 0 (it resumed from
a checkpoint) stops after --resumed-steps more when that is given: a test's first run can outlast
an outage and the resumed run still ends soon. ps tasks serve until they are stopped (the TFJob
succeeds with worker 0, and cleanPodPolicy Running deletes them).

--fill-memory-mb N makes each worker fill an N MB tensor before training: with a container memory
limit below what TensorFlow then holds, the kernel's OOM killer ends the process (exit 137,
OOMKilled).

Exit codes: 0 the final loss is at most --target-loss; 1 it is above; 2 a TF_CONFIG of another shape;
138 (--peer-lost-code) a ps task was lost for good; 143 SIGTERM. Progress lines as train.py's
(progress_log.py), with strategy=between-graph.
"""
import argparse
import json
import os
import sys
import time

from progress_log import emit, emit_error, exit_on_sigterm, timestamp
from tf_config import SERVE, Task, between_graph_task_from_tf_config

exit_on_sigterm()  # before TensorFlow starts any thread (see progress_log.exit_on_sigterm)
_import_started = time.monotonic()
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
import tensorflow as tf  # noqa: E402  (after the SIGTERM mask)

tf1 = tf.compat.v1
IMPORT_SECONDS = time.monotonic() - _import_started
TRUE_W, TRUE_B, NOISE = 3.0, 2.0, 0.1  # the loss floor is NOISE**2 = 0.01
BATCH, EVAL_BATCH = 64, 1024
READY_POLL_SECONDS = 0.5


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="TF 1 between-graph training over PS and Worker tasks "
                                                 "(see the file's docstring).")
    parser.add_argument("--steps", type=int, default=60, help="stop when the global step reaches this (default 60)")
    parser.add_argument("--resumed-steps", type=int,
                        help="a run starting past step 0 stops this many global steps later (or at --steps)")
    parser.add_argument("--target-loss", type=float, default=0.05,
                        help="exit 1 when the final evaluation loss is above this (default 0.05; the floor is 0.01)")
    parser.add_argument("--learning-rate", type=float, default=0.2)
    parser.add_argument("--checkpoint-dir",
                        help="the chief restores from and saves into it (a volume that outlives pods)")
    parser.add_argument("--checkpoint-every", type=int, default=10, help="the chief saves every N global steps")
    parser.add_argument("--step-delay", type=float, default=0.0, help="seconds to sleep after each step (longer runs)")
    parser.add_argument("--fill-memory-mb", type=int, default=0, help="fill a tensor of this size before training")
    parser.add_argument("--peer-lost-code", type=int, default=138)
    return parser.parse_args(argv)


def batch(seed, size: int):
    """size samples of y = 3x + 2 + noise, x in [-1, 1], from a stateless seed."""
    x = tf.random.stateless_uniform([size, 1], seed=seed, minval=-1.0, maxval=1.0)
    noise = tf.random.stateless_normal([size, 1], seed=seed + [0, 1], stddev=NOISE)
    return x, TRUE_W * x + TRUE_B + noise


class Model:
    """The graph of one worker: the variables and global step on the ps tasks, the rest here."""

    def __init__(self, task: Task, cluster: tf.train.ClusterSpec, learning_rate: float):
        setter = tf1.train.replica_device_setter(cluster=cluster, worker_device=f"/job:worker/task:{task.index}")
        with tf1.device(setter):
            self.global_step = tf1.train.get_or_create_global_step()
            w = tf1.get_variable("w", [], initializer=tf1.zeros_initializer())
            b = tf1.get_variable("b", [], initializer=tf1.zeros_initializer())
            # Each step's batch differs by worker and step, so the two workers do not repeat each other.
            seed = tf.stack([tf.cast(self.global_step, tf.int32), tf.constant(task.index + 1)])
            x, y = batch(seed, BATCH)
            self.loss = tf.reduce_mean(tf.square(w * x + b - y))
            train = tf1.train.GradientDescentOptimizer(learning_rate).minimize(self.loss, global_step=self.global_step)
            with tf1.control_dependencies([train]):
                self.step_after = self.global_step.read_value()  # the global step this step made
            eval_x, eval_y = batch(tf.constant([-1, 0]), EVAL_BATCH)
            self.eval_loss = tf.reduce_mean(tf.square(w * eval_x + b - eval_y))


class LogSaves(tf1.train.CheckpointSaverListener):
    """A `checkpoint` progress line after each of the chief's saves."""

    def __init__(self, directory: str):
        self.directory = directory

    def after_save(self, session, global_step_value):
        emit("checkpoint", step=int(global_step_value), path=tf.train.latest_checkpoint(self.directory))


def session_config(task: Task) -> tf1.ConfigProto:
    # Device filters: a worker talks to the ps tasks and itself only, so it never waits for another
    # worker (the one a test kills, say).
    return tf1.ConfigProto(device_filters=["/job:ps", f"/job:worker/task:{task.index}"],
                           inter_op_parallelism_threads=2, intra_op_parallelism_threads=1)


def wait_for_chief(server, task: Task) -> None:
    """A non-chief worker's MonitoredTrainingSession checks that the chief has initialized (or restored)
    the variables, and sleeps 30 s between checks: it is asked here first, every 0.5 s."""
    uninitialized = tf1.report_uninitialized_variables()
    with tf1.Session(server.target, config=session_config(task)) as session:
        while len(session.run(uninitialized)):
            time.sleep(READY_POLL_SECONDS)


def fill_memory(megabytes: int, task: Task):
    """An op that fills a tensor of `megabytes` in this worker's process (not a ps task's)."""
    with tf1.device(f"/job:worker/task:{task.index}"):
        return tf.reduce_sum(tf.random.uniform([megabytes * 2**20 // 4]))


def train(task: Task, server, args) -> int:
    cluster = tf.train.ClusterSpec(task.cluster)
    model = Model(task, cluster, args.learning_rate)
    fill = fill_memory(args.fill_memory_mb, task) if args.fill_memory_mb else None
    hooks = []
    if task.is_chief and args.checkpoint_dir:
        # Our own saver hook, to log each save; it also writes graph.pbtxt into checkpoint_dir.
        hooks.append(tf1.train.CheckpointSaverHook(args.checkpoint_dir, save_steps=args.checkpoint_every,
                                                   listeners=[LogSaves(args.checkpoint_dir)]))
    elif not task.is_chief:
        wait_for_chief(server, task)
    with tf1.train.MonitoredTrainingSession(
            master=server.target, is_chief=task.is_chief, checkpoint_dir=args.checkpoint_dir,
            chief_only_hooks=hooks, save_checkpoint_secs=None, save_checkpoint_steps=None,
            save_summaries_steps=None, save_summaries_secs=None, log_step_count_steps=None,
            config=session_config(task)) as session:
        if fill is not None:
            emit("fill-memory", mb=args.fill_memory_mb, time=timestamp())
            session.run(fill)
        start = int(session.run(model.global_step))
        last = args.steps
        if start:
            emit("restored", step=start)
            if args.resumed_steps:
                last = min(last, start + args.resumed_steps)
        step, first = start, True
        while step < last:
            step, loss = session.run([model.step_after, model.loss])
            step = int(step)
            now = timestamp()
            if first:
                emit("first-step", step=step, time=now)
                first = False
            emit(None, step=step, loss=float(loss), time=now)
            if args.step_delay:
                time.sleep(args.step_delay)
        final = float(session.run(model.eval_loss))
    emit("done", steps=step, loss=final, time=timestamp())  # after the chief's last save, at close
    if final > args.target_loss:
        emit_error(f"final loss {final:.6g} is above the target {args.target_loss:g} at global step {step}")
        return 1
    return 0


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        task = between_graph_task_from_tf_config(os.environ.get("TF_CONFIG"))
    except ValueError as error:
        emit_error(str(error))
        return 2
    tf1.disable_eager_execution()
    emit("start", task=task.name, strategy=task.strategy, duty=task.duty, steps=args.steps,
         tensorflow=tf.__version__, import_seconds=round(IMPORT_SECONDS, 2), time=timestamp())
    server = tf1.train.Server(tf.train.ClusterSpec(task.cluster), job_name=task.type, task_index=task.index,
                              config=session_config(task) if task.duty != SERVE else
                              tf1.ConfigProto(inter_op_parallelism_threads=2, intra_op_parallelism_threads=1))
    if task.duty == SERVE:
        emit("serve", task=task.name, target=server.target, time=timestamp())
        server.join()
        return 0
    try:
        return train(task, server, args)
    except (tf.errors.UnavailableError, tf.errors.AbortedError) as error:
        # MonitoredTrainingSession already recreates its session on these; one that escapes means a
        # ps task is gone for good: every task must restart and resume from the checkpoint.
        emit_error(f"lost a peer ({type(error).__name__}); exiting {args.peer_lost_code}: "
                   f"{json.dumps(str(error).splitlines()[:1])}")
        return args.peer_lost_code


if __name__ == "__main__":
    sys.exit(main())
