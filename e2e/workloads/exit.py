"""Holds a pod for a while, then exits with a chosen code: for exit-code policy and capacity tests.

    python3 /workload/exit.py [--sleep SECONDS] [--code N]

--sleep 0 (the default) exits at once; --sleep inf holds the pod until it is
deleted. SIGTERM ends it at once with 143 (Python as PID 1 ignores SIGTERM
without a handler). No TensorFlow: it starts in a fraction of a second and
takes a few MB. Lines, on stdout:

    tfop-exit start sleep=SECONDS code=N time=1714000000.123
    tfop-exit exit code=N time=1714000030.125      (or: tfop-exit terminated signal=SIGTERM time=...)
"""
import argparse
import os
import signal
import sys
import time


def say(event: str, **fields) -> None:
    words = ["tfop-exit", event, *(f"{key}={value}" for key, value in fields.items()), f"time={time.time():.3f}"]
    print(" ".join(words), flush=True)


def on_sigterm(signum, frame) -> None:
    say("terminated", signal="SIGTERM")
    os._exit(143)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Sleep, then exit with a chosen code.")
    parser.add_argument("--sleep", type=float, default=0.0, help="seconds to wait first (inf: until deleted)")
    parser.add_argument("--code", type=int, default=0, help="the exit code (0-255)")
    args = parser.parse_args(argv)
    if not 0 <= args.code <= 255:
        parser.error(f"--code {args.code}: an exit code is 0 to 255")
    signal.signal(signal.SIGTERM, on_sigterm)
    say("start", sleep=args.sleep, code=args.code)
    deadline = time.monotonic() + args.sleep
    while (left := deadline - time.monotonic()) > 0:
        time.sleep(min(left, 3600))  # the handler runs as soon as a signal arrives
    say("exit", code=args.code)
    return args.code


if __name__ == "__main__":
    sys.exit(main())
