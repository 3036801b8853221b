"""Find the data directories (crds/, templates/, rbac/) shipped with tfop.

Installed from the wheel, they live under <data>/share/tfop/<dir>, where <data> is the
install scheme's data directory: sys.prefix in a venv or an image's own Python, /usr/local
for pip into Debian's or Ubuntu's system Python. In a source checkout they sit at the
repository root.
"""
import sys
import sysconfig
from pathlib import Path

_PKG = Path(__file__).resolve().parent.parent  # the tfop package


def resource_path(*parts: str) -> Path:
    """Path of a shipped resource, e.g. resource_path("crds", "kubeflow.org_tfjobs.yaml")."""
    candidates = [
        _PKG.parent,
        Path(sys.prefix) / "share" / "tfop",
        Path(sysconfig.get_paths()["data"]) / "share" / "tfop",
    ]
    for base in candidates:
        path = base.joinpath(*parts)
        if path.exists():
            return path
    raise FileNotFoundError(f"tfop resource {'/'.join(parts)} not found in any of "
                            + ", ".join(str(c) for c in candidates))
