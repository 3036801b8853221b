"""The TFJob CRD as shipped, and offline validation of TFJob objects against it.

schema_problems() reports what the apiserver would reject: the version's
openAPIV3Schema (checked with jsonschema, strict about unknown fields like
`kubectl apply`'s default field validation) plus the CEL rules, evaluated by
their Python twins from the same table (tfop.api.rules) with the same messages.
"""
import copy
import datetime
import functools
import json
from collections.abc import Mapping
from typing import Any

import jsonschema
import yaml

from tfop.api.constants import GROUP, KIND, PLURAL
from tfop.api.rules import RULES
from tfop.api.validation import SHOWN_MAX, Problem, shown
from tfop.children.resources import resource_path

CRD_FILE = f"{GROUP}_{PLURAL}.yaml"


@functools.lru_cache(maxsize=1)
def _crd() -> dict:
    with open(resource_path("crds", CRD_FILE)) as f:
        return yaml.load(f, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def load_crd() -> dict:
    """The packaged CustomResourceDefinition (a fresh copy each call)."""
    return copy.deepcopy(_crd())


def served_versions() -> list[str]:
    return [v["name"] for v in _crd()["spec"]["versions"] if v["served"]]


def _version(version: str) -> dict:
    for v in _crd()["spec"]["versions"]:
        if v["name"] == version:
            return v
    raise KeyError(f"{GROUP}/{version} {KIND} is not served; "
                   f"served: {', '.join(served_versions())}")


def schema_for(version: str) -> dict:
    """The openAPIV3Schema of one served version (a fresh copy)."""
    return copy.deepcopy(_version(version)["schema"]["openAPIV3Schema"])


# ------------------------------------------------------------ jsonschema
def _strict(node: dict) -> dict:
    """Close objects the apiserver would close: unknown fields are errors, not kept."""
    out = dict(node)
    if "properties" in node:
        out["properties"] = {k: _strict(v) for k, v in node["properties"].items()}
        if ("additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")):
            out["additionalProperties"] = False
    if isinstance(node.get("additionalProperties"), dict):
        out["additionalProperties"] = _strict(node["additionalProperties"])
    if "items" in node:
        out["items"] = _strict(node["items"])
    return out


def _validation_schema(version: str) -> dict:
    schema = schema_for(version)
    metadata = schema["properties"]["metadata"]  # open: the rest of ObjectMeta is checked elsewhere
    schema = _strict(schema)
    schema["properties"]["metadata"] = metadata
    return schema


def _int_or_string(validator, value, instance, schema):
    if value and (isinstance(instance, bool) or not isinstance(instance, (int, str))):
        yield jsonschema.ValidationError("must be an integer or a string")


def _list_type(validator, value, instance, schema):
    if not isinstance(instance, list):
        return
    if value == "set":
        keys: list[Any] = [repr(i) for i in instance]
    elif value == "map":
        names = schema.get("x-kubernetes-list-map-keys", [])
        defaults = {k: schema["items"]["properties"].get(k, {}).get("default")
                    for k in names}
        keys = [tuple(_hashable(i.get(k, defaults[k])) for k in names) if isinstance(i, dict) else None
                for i in instance]
    else:
        return
    seen = set()
    for i, key in enumerate(keys):
        if key is not None and key in seen:
            yield jsonschema.ValidationError(f"Duplicate value: {shown(instance[i])}",
                                             path=[i])
        seen.add(key)


def _hashable(value):
    """A list-map key as a set member: a mistyped one (a list, an object) by its text."""
    return repr(value) if isinstance(value, (list, dict, set)) else value


_formats = jsonschema.FormatChecker(formats=())


def _integral(v) -> bool:
    """What the schema's `integer` admits: an int, or a float without a fraction (1e300 too)."""
    return (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, float) and v.is_integer())


@_formats.checks("int32")
def _is_int32(v):
    return not _integral(v) or -2**31 <= v < 2**31


@_formats.checks("int64")
def _is_int64(v):
    return not _integral(v) or -2**63 <= v < 2**63


@_formats.checks("date-time", raises=ValueError)
def _is_date_time(v):
    if isinstance(v, str):
        datetime.datetime.fromisoformat(v)
    return True


_Validator = jsonschema.validators.extend(jsonschema.Draft202012Validator, {
    "x-kubernetes-int-or-string": _int_or_string,
    "x-kubernetes-list-type": _list_type,
})


@functools.cache
def _validator(version: str):
    return _Validator(_validation_schema(version), format_checker=_formats)


def _drop_nulls(obj):
    """The apiserver prunes null fields of non-nullable schemas before validating."""
    if isinstance(obj, dict):
        return {k: _drop_nulls(v) for k, v in obj.items() if v is not None}
    if isinstance(obj, list):
        return [_drop_nulls(v) for v in obj]
    return obj


def _path(parts) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def _cut(text: str, limit: int = 4 * SHOWN_MAX) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _quote(values):
    return ", ".join(f'"{v}"' for v in values)


def _problems_of(error) -> list[Problem]:
    here = list(error.absolute_path)
    kind, value = error.validator, error.validator_value
    if kind == "required":
        return [Problem(_path(here + [name]), "Required value")
                for name in value if name not in error.instance]
    if kind == "additionalProperties" and value is False:
        known = error.schema.get("properties", {})
        return [Problem(_path(here + [name]), "unknown field")
                for name in error.instance if name not in known]
    value_text = shown(error.instance)
    messages = {  # worded like the apiserver's errors
        "type": lambda: f"Invalid value: {value_text}: must be of type {value}",
        "enum": lambda: f"Unsupported value: {value_text}: supported values: {_quote(value)}",
        "minimum": lambda: f"Invalid value: {value_text}: should be greater than or equal to {value}",
        "maximum": lambda: f"Invalid value: {value_text}: should be less than or equal to {value}",
        "maxProperties": lambda: f"Too many: must have at most {value} items",
        "minProperties": lambda: f"Too few: must have at least {value} items",
        "format": lambda: f"Invalid value: {value_text}: must be a valid {value}",
    }
    # jsonschema's own words quote the whole value: cut, as a 1 MB string is not worth repeating.
    message = messages[kind]() if kind in messages else _cut(" ".join(error.message.split()))
    return [Problem(_path(here), message)]


# ------------------------------------------------------------ CEL rules in Python
def _node_at(obj: Mapping[str, Any], path: str) -> Mapping[str, Any] | None:
    node: Any = obj
    for key in filter(None, path.split(".")):
        node = node.get(key) if isinstance(node, Mapping) else None
    return node if isinstance(node, Mapping) else None


def rule_problems(obj: dict) -> list[Problem]:
    """The CRD's x-kubernetes-validations rules, evaluated in Python."""
    problems = []
    for rule in RULES:
        for at in rule.at:
            node = _node_at(obj, at)
            if node is not None:  # CEL skips an absent node; a mistyped one is the schema's to report
                problems += rule.problems(at, node)
    return problems


def schema_problems(obj: dict) -> list[Problem]:
    """Everything the apiserver would reject in this TFJob (any served version)."""
    api_version = str(obj.get("apiVersion") or "")
    group, _, version = api_version.rpartition("/")
    if group != GROUP or version not in served_versions():
        return [Problem("apiVersion", f"Unsupported value: {json.dumps(api_version)}: "
                        "supported values: "
                        + _quote(f"{GROUP}/{v}" for v in served_versions()))]
    if obj.get("kind") != KIND:
        return [Problem("kind", f"Unsupported value: {shown(obj.get('kind'))}: "
                        f"supported values: \"{KIND}\"")]
    problems = []
    errors = sorted(_validator(version).iter_errors(_drop_nulls(obj)),
                    key=lambda e: [str(p) for p in e.absolute_path])
    for error in errors:
        problems += _problems_of(error)
    if not any(_blocks_rules(error) for error in errors):
        problems += rule_problems(obj)
    return list(dict.fromkeys(problems))  # de-duplicated, order kept


# The apiserver runs no CEL rule once the object has one of these errors (Unsupported value, Required,
# Too long, Too many, a wrong type); an unknown field fails `kubectl apply` before validation.
_BLOCKING = {"enum", "required", "maxLength", "maxItems", "maxProperties", "type"}


def _blocks_rules(error) -> bool:
    return error.validator in _BLOCKING or (error.validator == "additionalProperties"
                                            and error.validator_value is False)
