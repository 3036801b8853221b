"""The progress lines train.py prints, one event a line, for the e2e tests to parse.

Format: `tfop-train [<event>] key=value ...`, values without spaces, times in
Unix seconds. The lines, in order (e2e/harness/training.py parses them):

    tfop-train start task=worker:1 strategy=MultiWorkerMirroredStrategy duty=train steps=50 tensorflow=2.20.0
        import_seconds=4.1 time=1714000000.123            (one line; printed once TensorFlow is imported)
    tfop-train restored step=20                          only when a checkpoint was found
    tfop-train first-step step=21 time=1714000004.567    the first step of this process is done
    tfop-train step=21 loss=0.0312 time=1714000004.567   every --log-every steps, and the first and last
    tfop-train checkpoint step=30 path=/ckpt/ckpt-30     the chief's saves
    tfop-train done steps=50 loss=0.0101 time=1714000005.012
                                                         loss: the evaluation that decides the exit code
    tfop-train error: <free text>                        on stderr: why the process exits non-zero
    tfop-train serve task=ps:0 target=grpc://... time=...  a PS job's ps and worker tasks, then nothing
    tfop-train idle task=evaluator:0
    tfop-train terminated signal=SIGTERM time=...        then exit 143

Pure Python, no TensorFlow: the unit tests check that what it writes parses. exit_on_sigterm is
here too, since it prints the `terminated` line (every training script calls it first).
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time

PREFIX = "tfop-train"


def timestamp() -> str:
    """Now, as Unix seconds with milliseconds: comparable with the apiserver's clock on the same host."""
    return f"{time.time():.3f}"


def _value(value) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value).replace(" ", "_")


def progress_line(event: str | None, **fields) -> str:
    words = [PREFIX] + ([event] if event else []) + [f"{key}={_value(value)}" for key, value in fields.items()]
    return " ".join(words)


def emit(event: str | None, **fields) -> None:
    print(progress_line(event, **fields), flush=True)


def emit_error(message: str) -> None:
    print(f"{PREFIX} error: {message}", file=sys.stderr, flush=True)


def exit_on_sigterm() -> None:
    """SIGTERM ends the process at once with 143, so a deleted pod goes within its grace period.

    Python as PID 1 ignores SIGTERM without a handler, and a Python handler only
    runs when the main thread is back in Python (server.join() never is). So
    SIGTERM is blocked here, before TensorFlow starts any thread (they inherit
    the mask), and a thread of ours waits for it."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})

    def wait() -> None:
        signal.sigwait({signal.SIGTERM})
        emit("terminated", signal="SIGTERM", time=timestamp())
        os._exit(143)

    threading.Thread(target=wait, name="sigterm", daemon=True).start()
