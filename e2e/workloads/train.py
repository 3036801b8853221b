"""Trains y = 3x + 2 (plus noise) across a TFJob's pods, the strategy chosen from TF_CONFIG.

    python3 /workload/train.py [--steps 50] [--target-loss 0.02] [--checkpoint-dir DIR] ...

- No "ps" task in the cluster: MultiWorkerMirroredStrategy. Every chief and
  worker task trains (synchronous SGD, gradients averaged over all of them) and
  exits when the step counter reaches --steps.
- "ps" tasks: ParameterServerStrategy. The chief coordinates (a
  ClusterCoordinator schedules the steps on the workers, the variables live on
  the ps tasks) and exits when done. ps and worker tasks serve until they are
  stopped: the TFJob succeeds with its chief, then cleanPodPolicy Running or
  All deletes them (with the v1 default None they keep running).
- No TF_CONFIG (a one-pod job): trains alone.

Peers are reached the way TensorFlow reaches them, with no waiting of our own
for names to resolve or ports to open.

Exit codes: 0 the final loss is at most --target-loss; 1 it is above;
2 a TF_CONFIG this script cannot run; 138 (--peer-lost-code) a peer was lost,
so every task must restart and resume from the checkpoint (retryable under
restartPolicy ExitCode); 143 SIGTERM. Progress lines: see
progress_log.py. Runs with /workload (this file's directory) as sys.path[0],
importing nothing else of the repository.
"""
import argparse
import os
import re
import sys
import time

from progress_log import emit, emit_error, exit_on_sigterm, timestamp
from tf_config import COORDINATE, IDLE, SERVE, Task, task_from_tf_config

TRUE_W, TRUE_B, NOISE = 3.0, 2.0, 0.1  # the loss floor is NOISE**2 = 0.01
BATCH, EVAL_BATCH = 64, 1024
EVAL_SEED = (-1, 0)  # training batches use (step, replica): never this one


exit_on_sigterm()
_import_started = time.monotonic()
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")  # TensorFlow's warnings and errors, not its INFO lines
import tensorflow as tf  # noqa: E402  (after the SIGTERM mask, see above)

IMPORT_SECONDS = time.monotonic() - _import_started
# How TensorFlow reports a peer that went away (MWMS collectives, a PS coordinator losing a ps task).
PEER_LOST = (tf.errors.UnavailableError, tf.errors.AbortedError)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Train y = 3x + 2 across a TFJob's pods (see the file's docstring).")
    parser.add_argument("--steps", type=int, default=50, help="train until the step counter reaches this (default 50)")
    parser.add_argument("--target-loss", type=float, default=0.02,
                        help="exit 1 when the final evaluation loss is above this (default 0.02; the floor is 0.01)")
    parser.add_argument("--learning-rate", type=float, default=0.5)
    parser.add_argument("--log-every", type=int, default=1, help="a step line every N steps (default 1)")
    parser.add_argument("--checkpoint-dir", help="a directory that outlives pods: resume from its latest checkpoint")
    parser.add_argument("--checkpoint-every", type=int, default=10, help="save every N steps, and at the end")
    parser.add_argument("--step-delay", type=float, default=0.0, help="seconds to sleep after each step (longer runs)")
    parser.add_argument("--peer-lost-code", type=int, default=138,
                        help="exit code when a peer is lost (default 138, which restartPolicy ExitCode retries)")
    parser.add_argument("--threads", type=int, default=1,
                        help="TensorFlow's intra-op threads (default 1); inter-op threads are this but at least 2")
    return parser.parse_args(argv)


def inter_op_threads(args) -> int:
    """A PS job's worker server with a single inter-op thread never runs the chief's first step."""
    return max(2, args.threads)


# -- the model ------------------------------------------------------------------------
def batch(seed, size: int):
    """size samples of y = 3x + 2 + noise, x in [-1, 1]: the same for the same seed on every task."""
    x_seed, noise_seed = tf.unstack(tf.random.experimental.stateless_split(seed, num=2))
    x = tf.random.stateless_uniform([size, 1], seed=x_seed, minval=-1.0, maxval=1.0)
    noise = tf.random.stateless_normal([size, 1], seed=noise_seed, stddev=NOISE)
    return x, TRUE_W * x + TRUE_B + noise


class LinearModel:
    """w, b and the step counter, starting from `start` (a checkpoint's values) or zeros.

    Created in a strategy's scope. Under MultiWorkerMirroredStrategy every task
    takes the chief's initial values (TensorFlow broadcasts them), so all resume
    from the chief's checkpoint even if the others cannot see it."""

    def __init__(self, start: dict):
        mean = tf.VariableAggregation.MEAN  # an update in replica context is averaged over all replicas
        self.w = tf.Variable(start.get("w", 0.0), dtype=tf.float32, aggregation=mean, name="w")
        self.b = tf.Variable(start.get("b", 0.0), dtype=tf.float32, aggregation=mean, name="b")
        self.step = tf.Variable(start.get("step", 0), dtype=tf.int64,
                                aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA, name="step")
        self.checkpoint = tf.train.Checkpoint(w=self.w, b=self.b, step=self.step)

    def loss(self, x, y):
        return tf.reduce_mean(tf.square(self.w * x + self.b - y))


def make_train_step(strategy, model: LinearModel, learning_rate: float):
    @tf.function
    def train_step(step):
        def replica_step():
            replica = tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.int64)
            x, y = batch(tf.stack([step, replica]), BATCH)
            with tf.GradientTape() as tape:
                loss = model.loss(x, y)
            grad_w, grad_b = tape.gradient(loss, [model.w, model.b])
            model.w.assign_sub(learning_rate * grad_w)
            model.b.assign_sub(learning_rate * grad_b)
            return loss

        losses = strategy.run(replica_step)
        model.step.assign_add(1)
        return strategy.reduce(tf.distribute.ReduceOp.MEAN, losses, axis=None)

    return train_step


def make_evaluate(model: LinearModel):
    @tf.function
    def evaluate():
        x, y = batch(tf.constant(EVAL_SEED, tf.int64), EVAL_BATCH)
        return model.loss(x, y)

    return evaluate


# -- checkpoints ----------------------------------------------------------------------
def latest_values(directory: str | None) -> dict:
    """The latest checkpoint's w, b and step, or {} when there is none."""
    path = tf.train.latest_checkpoint(directory) if directory else None
    if path is None:
        return {}
    reader = tf.train.load_checkpoint(path)
    return {name: reader.get_tensor(f"{name}/.ATTRIBUTES/VARIABLE_VALUE") for name in ("w", "b", "step")}


class Checkpoints:
    """The chief saves the model into --checkpoint-dir every --checkpoint-every steps and at the end.

    Under MultiWorkerMirroredStrategy every task must save (saving may take part
    in collectives): a non-chief writes into a directory of its own and deletes
    it, as TensorFlow's multi-worker guide does."""

    def __init__(self, directory: str | None, task: Task, model: LinearModel):
        self.directory, self.task, self.model = directory, task, model
        self.manager = (tf.train.CheckpointManager(model.checkpoint, directory, max_to_keep=2)
                        if directory and task.is_chief else None)

    def save(self, step: int) -> None:
        if not self.directory:
            return
        if self.manager is not None:
            path = self.manager.save(checkpoint_number=step)
            emit("checkpoint", step=step, path=path)
            return
        scratch = os.path.join(self.directory, f".scratch-{self.task.type}-{self.task.index}")
        self.model.checkpoint.write(os.path.join(scratch, "ckpt"))
        tf.io.gfile.rmtree(scratch)


# -- the training loop, shared by every strategy -------------------------------------
def training_loop(args, model: LinearModel, checkpoints: Checkpoints, run_step, fetch=float,
                  barrier=lambda: None) -> int:
    """Runs run_step(step) until the step counter reaches --steps; fetch turns its result into a
    loss, barrier waits for the steps scheduled so far. Returns the exit code."""
    evaluate = make_evaluate(model)
    step = int(model.step.numpy())
    if step:
        emit("restored", step=step)
    started = False
    while step < args.steps:
        result = run_step(step)
        step += 1
        if not started or step % args.log_every == 0 or step == args.steps:
            loss = fetch(result)
            now = timestamp()
            if not started:
                emit("first-step", step=step, time=now)
                started = True
            emit(None, step=step, loss=loss, time=now)
        if step % args.checkpoint_every == 0 or step == args.steps:
            barrier()
            checkpoints.save(step)
        if args.step_delay:
            time.sleep(args.step_delay)
    barrier()
    loss = float(evaluate())
    emit("done", steps=step, loss=loss, time=timestamp())
    if loss > args.target_loss:
        emit_error(f"final loss {loss:.6g} is above the target {args.target_loss:g} after {step} steps")
        return 1
    return 0


def cluster_resolver(task: Task):
    return tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(task.cluster), task_type=task.type, task_id=task.index, rpc_layer="grpc")


def train(task: Task, args) -> int:
    """Alone, or one of the chief and worker tasks of MultiWorkerMirroredStrategy."""
    if task.type:
        strategy = tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=cluster_resolver(task))
    else:
        strategy = tf.distribute.get_strategy()
    with strategy.scope():
        model = LinearModel(latest_values(args.checkpoint_dir))
    train_step = make_train_step(strategy, model, args.learning_rate)
    return training_loop(args, model, Checkpoints(args.checkpoint_dir, task, model),
                         run_step=lambda step: train_step(tf.constant(step, tf.int64)))


def coordinate(task: Task, args) -> int:
    """The chief of a ParameterServerStrategy job: schedules every step on some worker."""
    strategy = tf.distribute.experimental.ParameterServerStrategy(cluster_resolver(task))
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        model = LinearModel(latest_values(args.checkpoint_dir))
    train_step = make_train_step(strategy, model, args.learning_rate)
    return training_loop(args, model, Checkpoints(args.checkpoint_dir, task, model),
                         run_step=lambda step: coordinator.schedule(train_step, args=(tf.constant(step, tf.int64),)),
                         fetch=lambda remote: float(remote.fetch()), barrier=coordinator.join)


def serve(task: Task, args) -> None:
    """A ps or worker task of a ParameterServerStrategy job: serves the chief until stopped."""
    threads = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=inter_op_threads(args),
                                       intra_op_parallelism_threads=args.threads)
    server = tf.distribute.Server(tf.train.ClusterSpec(task.cluster), job_name=task.type, task_index=task.index,
                                  protocol="grpc", config=threads, start=True)
    emit("serve", task=task.name, target=server.target, time=timestamp())
    server.join()


def error_summary(error) -> str:
    """The line of a TensorFlow error that tells what happened (it often starts with a node's stack)."""
    lines = [line.strip() for line in (error.message or "").splitlines() if line.strip()]
    telling = [line for line in lines if not line.startswith("File ")
               and re.search(r"peer|connect|abort|unavailable|socket", line, re.IGNORECASE)]
    return (telling or lines or ["no message"])[0]


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        task = task_from_tf_config(os.environ.get("TF_CONFIG"))
    except ValueError as error:
        emit_error(str(error))
        return 2
    tf.config.threading.set_inter_op_parallelism_threads(inter_op_threads(args))
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    emit("start", task=task.name, strategy=task.strategy, duty=task.duty, steps=args.steps,
         tensorflow=tf.__version__, import_seconds=round(IMPORT_SECONDS, 2), time=timestamp())
    if task.duty == IDLE:
        emit("idle", task=task.name)
        return 0
    if task.duty == SERVE:
        serve(task, args)
        return 0
    try:
        code = coordinate(task, args) if task.duty == COORDINATE else train(task, args)
    except PEER_LOST as error:
        # TensorFlow cannot continue without the peer: it wants every task restarted, and the
        # job resumes from its last checkpoint. Exit 1 would make restartPolicy ExitCode fail the job.
        emit_error(f"lost a peer ({type(error).__name__}: {error_summary(error)}); exiting {args.peer_lost_code}")
        code = args.peer_lost_code
    if task.duty == COORDINATE:
        # Once a worker was lost, the ClusterCoordinator's teardown waits for it forever, even
        # with every step done: leave without tearing down.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
