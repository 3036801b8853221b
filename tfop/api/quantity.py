"""Exact Kubernetes resource quantities: parse, add, write back canonically.

Fractions, not floats: a gang's minResources is compared by the scheduler
against node capacity, so "0.1" + "0.2" cpu must be exactly "300m".
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any

_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}  # powers of 1024
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}

# Bounds no real resource comes near (bytes reach 1e18 with E, CPUs go down to 1e-9 with n), checked
# before any arithmetic: "1e10000000" is a valid Kubernetes quantity, and exact arithmetic on it
# costs seconds of CPU per parse (the operator parses a job's quantities on every pass). The CRD
# refuses the same strings at admission (QUANTITY_PATTERN, MAX_QUANTITY_LENGTH).
MAX_QUANTITY_LENGTH = 64  # characters; the longest sensible quantity ("0.000000001", "9223372036854775807") is ~20
MAX_EXPONENT_DIGITS = 2  # "1e99" at most: 99 decimal places either way
_INTEGER_LIMIT = 10**MAX_QUANTITY_LENGTH  # an integer quantity has at most as many digits as a string

_NUMBER = r"[+-]?(?:\d+\.?\d*|\.\d+)"
_SUFFIX = "Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E"
# The suffix alternatives are tried before the exponent form, so "1E" is exa and
# "1E3" (no suffix fits the whole string) falls through to the exponent.
_QUANTITY = re.compile(rf"({_NUMBER})(?:({_SUFFIX})|[eE]([+-]?\d+))?")
# What the CRD admits for a quantity string: none whose exponent has more than MAX_EXPONENT_DIGITS
# digits (each e or E is followed by at most two digits, signed or not, then by no digit or sign).
# Nothing else: a string that is no quantity at all ("abc") is the operator's to report, naming the
# field; admission bounds only what is costly. RE2 (the apiserver's) and Python read it alike.
QUANTITY_PATTERN = rf"^(?:[^eE]|(?:[eE][+-]?[0-9]{{0,{MAX_EXPONENT_DIGITS}}})+(?:[^0-9eE+-]|$))*$"
QUANTITY_BOUNDS = (f"at most {MAX_QUANTITY_LENGTH} characters and an exponent of at most "
                   f"{MAX_EXPONENT_DIGITS} digits")

# Resources Kubernetes counts in bytes; written back in binary units.
_BYTE_RESOURCES = ("memory", "ephemeral-storage", "storage")


def parse_quantity(value: Any) -> Fraction:
    """"2500m" -> 5/2; raises ValueError for anything Kubernetes would reject, and at once for
    quantities beyond QUANTITY_BOUNDS (whatever their length, before any arithmetic)."""
    if isinstance(value, bool):
        raise ValueError(f"not a quantity: {value!r}")
    if isinstance(value, int):
        if abs(value) >= _INTEGER_LIMIT:
            raise ValueError(f"quantity out of bounds: {QUANTITY_BOUNDS}")
        return Fraction(value)
    if isinstance(value, float):
        return Fraction(str(value))  # the YAML literal, not its binary approximation
    if not isinstance(value, str):
        raise ValueError(f"not a quantity: {value!r}")
    if len(value) > MAX_QUANTITY_LENGTH:
        raise ValueError(f"quantity out of bounds ({len(value)} characters): {QUANTITY_BOUNDS}")
    m = _QUANTITY.fullmatch(value.strip())
    if not m:
        raise ValueError(f"not a quantity: {value!r}")
    number, suffix, exponent = m.groups()
    if exponent is not None and len(exponent.lstrip("+-")) > MAX_EXPONENT_DIGITS:
        raise ValueError(f"quantity out of bounds: {value!r}: {QUANTITY_BOUNDS}")
    n = Fraction(number)
    if exponent is not None:
        return n * Fraction(10) ** int(exponent)
    if suffix in _BINARY:
        return n * 1024 ** _BINARY[suffix]
    return n * Fraction(10) ** _DECIMAL[suffix or ""]


def is_byte_resource(name: str) -> bool:
    return name in _BYTE_RESOURCES or name.startswith("hugepages-")


def _decimal(value: Fraction) -> str:
    # Whole numbers as plain digits (GPUs and pods read best that way);
    # fractions in the largest sub-unit that is exact (m, u, n). Below a
    # nanounit Kubernetes rounds up, and so do we.
    if value.denominator == 1:
        return str(value.numerator)
    for suffix, exp in (("m", 3), ("u", 6), ("n", 9)):
        scaled = value * 10**exp
        if scaled.denominator == 1:
            return f"{scaled.numerator}{suffix}"
    scaled = value * 10**9
    return f"{-((-scaled.numerator) // scaled.denominator)}n"


def _binary(value: Fraction) -> str:
    if value.denominator != 1 or value == 0:
        return _decimal(value)
    for suffix, power in sorted(_BINARY.items(), key=lambda kv: -kv[1]):
        unit = 1024**power
        if value.numerator % unit == 0:
            return f"{value.numerator // unit}{suffix}"
    return str(value.numerator)


def _decimal_suffixed(value: Fraction) -> str:
    if value.denominator != 1 or value == 0:
        return _decimal(value)
    for suffix, exp in (("E", 18), ("P", 15), ("T", 12), ("G", 9), ("M", 6), ("k", 3)):
        if value.numerator % 10**exp == 0:
            return f"{value.numerator // 10**exp}{suffix}"
    return str(value.numerator)


def format_quantity(value: Fraction, resource: str = "cpu") -> str:
    """Canonical text for `value` of `resource`.

    Byte resources use the largest exact binary unit ("3Gi", "1536Mi"),
    unless a decimal unit is strictly shorter ("2G" rather than
    "1953125Ki"), so users who write decimal sizes get them back.
    Everything else is a plain number or m/u/n ("3", "2500m").
    """
    if not is_byte_resource(resource):
        return _decimal(value)
    binary, decimal = _binary(value), _decimal_suffixed(value)
    return decimal if len(decimal) < len(binary) else binary


def add_resources(maps: Iterable[Mapping[str, Fraction]]) -> dict[str, Fraction]:
    total: dict[str, Fraction] = {}
    for m in maps:
        for name, qty in m.items():
            total[name] = total.get(name, Fraction(0)) + qty
    return total


def format_resources(resources: Mapping[str, Fraction]) -> dict[str, str]:
    """Sorted by name so rendered objects compare equal across reconciles."""
    return {name: format_quantity(resources[name], name) for name in sorted(resources)}
