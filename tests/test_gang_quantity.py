from fractions import Fraction

import pytest

from tfop.api.quantity import add_resources, format_quantity, format_resources, parse_quantity

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
]


@pytest.mark.parametrize("text,value", PARSE)
def test_parse(text, value):
    assert parse_quantity(text) == value


@pytest.mark.parametrize("bad", ["", "1.2.3", "1Kb", "abc", "1 Gi", "1i", None, True, [1]])
def test_parse_rejects(bad):
    with pytest.raises(ValueError):
        parse_quantity(bad)


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
