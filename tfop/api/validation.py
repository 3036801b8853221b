"""One validation finding, shared by the CRD checks, normalize, the gang shape, the operator and the CLI."""
from __future__ import annotations

from dataclasses import dataclass

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
