"""Find the data directories (crds/, templates/, rbac/) shipped with tfop.

Installed, they live inside the package as tfop/_data/<dir>; in a source
checkout they sit at the repository root. An older tfop's install has them under
<prefix>/share/tfop/<dir>.
"""
import sys
from pathlib import Path

_PKG = Path(__file__).resolve().parent.parent  # the tfop package


def resource_path(*parts: str) -> Path:
    """Path of a shipped resource, e.g. resource_path("crds", "kubeflow.org_tfjobs.yaml")."""
    candidates = [
        _PKG / "_data",
        _PKG.parent,
        Path(sys.prefix) / "share" / "tfop",
    ]
    for base in candidates:
        path = base.joinpath(*parts)
        if path.exists():
            return path
    raise FileNotFoundError(f"tfop resource {'/'.join(parts)} not found in any of "
                            + ", ".join(str(c) for c in candidates))
