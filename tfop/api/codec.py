"""JSON in and out of the apiserver: orjson (a C codec, ~5x the standard library's speed on pod-sized
objects), with the standard library for what orjson refuses (an integer beyond 64 bits, which an
unstructured field of a user's template may hold), so no object is unreadable for the speed."""
from __future__ import annotations

import json
from typing import Any

import orjson


def dumps(value: Any) -> bytes:
    try:
        return orjson.dumps(value)
    except (TypeError, orjson.JSONEncodeError):
        return json.dumps(value, separators=(",", ":")).encode()


def loads(data: bytes | str) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)
