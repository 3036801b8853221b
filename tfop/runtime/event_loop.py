"""Which event loop runs the operator: uvloop where it is installed, else asyncio's own.

Each kept-alive TLS connection to the apiserver costs ~320 KB of resident memory on asyncio's loop
(its TLS layer fills a 256 KiB buffer per connection) and ~70 KB on uvloop's, so the 64 request
connections alone are ~16 MB apart (measured: e2e/BENCHMARK.md).
"""
from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any


def event_loop_runner(choice: str) -> Callable[[Coroutine[Any, Any, Any]], Any]:
    """asyncio.run or uvloop.run for `choice` (auto, uvloop, asyncio); ImportError if uvloop is asked and missing.
    The operator logs the loop it runs on once it has started (tfop/runtime/main.py)."""
    if choice == "asyncio":
        return asyncio.run
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise ImportError("uvloop is not installed (pip install uvloop)") from None
        return asyncio.run
    return uvloop.run
