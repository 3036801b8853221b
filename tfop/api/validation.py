"""One validation finding, shared by the CRD checks, the operator and the CLI."""
from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    field: str  # dotted path, e.g. "spec.tfReplicaSpecs.Worker.replicas"
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"
