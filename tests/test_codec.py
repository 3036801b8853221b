"""tfop.api.codec: orjson's speed without an object it cannot read or write."""
import json

import pytest

from tfop.api import codec

CASES = [
    {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a", "labels": {"x": "é"}}},
    {"big": 2 ** 70, "small": -(2 ** 70)},  # beyond 64 bits: the standard library reads and writes it
    [1, 2.5, None, True, "s"],
    {"nested": [{"a": [1e300]}]},
]


@pytest.mark.parametrize("value", CASES)
def test_round_trip_matches_the_standard_library(value):
    text = codec.dumps(value)
    assert isinstance(text, bytes)
    assert json.loads(text) == value
    assert codec.loads(text) == value
    assert codec.loads(text.decode()) == value


def test_a_key_orjson_refuses_is_written_as_the_standard_library_writes_it():
    assert codec.loads(codec.dumps({1: "a"})) == {"1": "a"}


@pytest.mark.parametrize("bad", [b"", b"{", b"nope", b'{"a":}'])
def test_malformed_json_is_a_value_error(bad):
    with pytest.raises(ValueError):
        codec.loads(bad)
