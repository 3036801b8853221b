import itertools
import re
import time
from fractions import Fraction

import pytest

from tfop.api.quantity import (
    MAX_QUANTITY_LENGTH,
    QUANTITY_PATTERN,
    add_resources,
    format_quantity,
    format_resources,
    parse_quantity,
)

PARSE = [
    ("1", Fraction(1)),
    (1, Fraction(1)),
    (0.5, Fraction(1, 2)),
    ("2500m", Fraction(5, 2)),
    ("0.1", Fraction(1, 10)),
    (".5", Fraction(1, 2)),
    ("1.5Gi", Fraction(3 * 2**29)),
    ("1Ki", Fraction(1024)),
    ("2Mi", Fraction(2 * 2**20)),
    ("1Ti", Fraction(2**40)),
    ("1Pi", Fraction(2**50)),
    ("1Ei", Fraction(2**60)),
    ("1k", Fraction(1000)),
    ("1M", Fraction(10**6)),
    ("2G", Fraction(2 * 10**9)),
    ("1T", Fraction(10**12)),
    ("1P", Fraction(10**15)),
    ("1E", Fraction(10**18)),
    ("1e3", Fraction(1000)),
    ("1E3", Fraction(1000)),
    ("12e-3", Fraction(12, 1000)),
    ("100u", Fraction(1, 10**4)),
    ("5n", Fraction(5, 10**9)),
    ("+3", Fraction(3)),
    ("1e99", Fraction(10**99)),  # the largest exponent admitted
    ("1E-99", Fraction(1, 10**99)),
    (" 2 ", Fraction(2)),  # the apiserver trims a quantity's spaces too
    ("1" * 64, Fraction(int("1" * 64))),  # the longest string admitted
    (10**64 - 1, Fraction(10**64 - 1)),
]


@pytest.mark.parametrize("text,value", PARSE)
def test_parse(text, value):
    assert parse_quantity(text) == value


@pytest.mark.parametrize("bad", ["", "1.2.3", "1Kb", "abc", "1 Gi", "1i", None, True, [1]])
def test_parse_rejects(bad):
    with pytest.raises(ValueError):
        parse_quantity(bad)


# Valid Kubernetes quantities no real resource needs: exact arithmetic on them took seconds of CPU
# ("1e10000000": 8.8 s per parse; "1e100000000": over 120 s), on every pass of the operator.
ABSURD = ["1e100", "1E-100", "1e+100", "1e10000000", "1e100000000", "1e0000000000000000001",
          "1" * 65, "1" * 10_000_000, 10**64, -(10**64)]


@pytest.mark.parametrize("bad", ABSURD, ids=lambda v: repr(v)[:24])
def test_parse_refuses_absurd_quantities_at_once(bad):
    start = time.process_time()
    with pytest.raises(ValueError, match="quantity out of bounds"):
        parse_quantity(bad)
    assert time.process_time() - start < 0.05  # microseconds in fact; the bound is for a busy machine


def test_the_crd_pattern_admits_every_quantity_and_refuses_every_absurd_one():
    """The CRD's pattern (read alike by Go's RE2 and Python) bounds only what is costly: a string that
    is no quantity at all is the operator's to report, naming the field."""
    pattern = re.compile(QUANTITY_PATTERN)
    for text in [t for t, _ in PARSE if isinstance(t, str)] + ["1E", "1Ei", "12e-3", "abc", "1 Gi", "1e", "e+"]:
        assert pattern.search(text), text
    for text in [b for b in ABSURD if isinstance(b, str) and len(b) <= MAX_QUANTITY_LENGTH]:
        assert not pattern.search(text), text
    exponent = re.compile(r"[eE][+-]?[0-9]{3}")  # what parse_quantity refuses as out of bounds
    for n in range(7):  # every string of these characters up to 6 long: none with such an exponent admitted
        for chars in itertools.product("1eE+-x", repeat=n):
            text = "".join(chars)
            assert not (pattern.search(text) and exponent.search(text)), text


FORMAT = [
    ("cpu", "2500m", "2500m"),
    ("cpu", "3000m", "3"),
    ("cpu", "0.1", "100m"),
    ("cpu", "1k", "1000"),
    ("cpu", "100u", "100u"),
    ("cpu", "0.5n", "1n"),  # below a nanounit rounds up, as Kubernetes does
    ("nvidia.com/gpu", "8", "8"),
    ("memory", "1.5Gi", "1536Mi"),
    ("memory", "4096Mi", "4Gi"),
    ("memory", "1024", "1Ki"),
    ("memory", "1000", "1k"),  # decimal unit shorter than plain bytes
    ("memory", "2G", "2G"),  # shorter than 1953125Ki
    ("memory", "1e9", "1G"),
    ("memory", "0", "0"),
    ("memory", "0.5", "500m"),
    ("ephemeral-storage", "10Gi", "10Gi"),
    ("hugepages-2Mi", "4Mi", "4Mi"),
]


@pytest.mark.parametrize("resource,text,canonical", FORMAT)
def test_format(resource, text, canonical):
    assert format_quantity(parse_quantity(text), resource) == canonical


SUMS = [
    ("cpu", ["0.1", "0.2"], "300m"),
    ("cpu", ["500m", "500m", "2"], "3"),
    ("cpu", ["1", "1500m"], "2500m"),
    ("memory", ["1Gi", "512Mi"], "1536Mi"),
    ("memory", ["512Mi", "512Mi"], "1Gi"),
    ("memory", ["1G", "1G"], "2G"),
    ("memory", ["1Gi", "1"], "1073741825"),
    ("nvidia.com/gpu", [2, 2, 2, 2], "8"),
]


@pytest.mark.parametrize("resource,parts,total", SUMS)
def test_sums_are_exact(resource, parts, total):
    summed = add_resources({resource: parse_quantity(p)} for p in parts)
    assert format_resources(summed) == {resource: total}


def test_format_resources_sorted_by_name():
    out = format_resources({"memory": Fraction(2**30), "cpu": Fraction(1)})
    assert list(out) == ["cpu", "memory"]
