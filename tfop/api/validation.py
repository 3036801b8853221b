"""One validation finding, shared by the CRD checks, normalize, the gang shape, the operator and the CLI,
and the checks more than one of them makes."""
from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tfop.api.quantity import parse_quantity

ERROR = "error"  # the job cannot run as written: admission refuses it, or the operator fails it
WARNING = "warning"  # the job runs, but probably not as meant: a Warning Event and `tfop validate` say so


@dataclass(frozen=True)
class Problem:
    field: str  # dotted path, e.g. "spec.tfReplicaSpecs.Worker.replicas"
    message: str
    severity: str = ERROR

    @property
    def blocking(self) -> bool:
        return self.severity == ERROR

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


SHOWN_MAX = 100  # characters of a value quoted in a message: a 1 MB string is not repeated back


def shown(value: Any) -> str:
    """A value quoted in a message as the apiserver quotes it (JSON: control characters escaped,
    so a message stays one line), cut to SHOWN_MAX characters; anything JSON cannot hold by repr."""
    try:
        text = json.dumps(value, default=str)
    except (TypeError, ValueError, RecursionError):  # keys JSON cannot hold, a value containing itself
        text = repr(value)
    return text if len(text) <= SHOWN_MAX else text[:SHOWN_MAX - 3] + "..."


def is_whole_number(value: Any) -> bool:
    """A count: an integer >= 0 (YAML's true is an int to Python, not a count)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


QUANTITY_EXAMPLES = " (e.g. 500m, 2, 1Gi)"


def quantity_problems(field: str, values: Any, examples: bool = False) -> list[Problem]:
    """Entries of a resource map (limits, requests, minResources) that are no Kubernetes quantity.

    The CRD takes any string there, but the apiserver refuses such a pod without
    naming the field, and a gang scheduler cannot add such a minResources up.
    """
    out = []
    for name, value in (values.items() if isinstance(values, Mapping) else ()):
        try:
            parse_quantity(value)
        except ValueError:
            out.append(Problem(f"{field}.{name}", f"{value!r} is not a Kubernetes quantity"
                               + (QUANTITY_EXAMPLES if examples else "")))
    return out


def template_quantity_problems(field: str, template: Mapping[str, Any], examples: bool = False) -> list[Problem]:
    """quantity_problems of every container's limits and requests; field names the pod template."""
    spec = template.get("spec") or {}
    out = []
    for kind in ("containers", "initContainers"):
        for i, container in enumerate(spec.get(kind) or []):
            resources = container.get("resources") if isinstance(container, Mapping) else None
            if not isinstance(resources, Mapping):
                continue
            for section in ("limits", "requests"):
                out += quantity_problems(f"{field}.spec.{kind}[{i}].resources.{section}",
                                         resources.get(section), examples)
    return out
