"""Install the Debian packages a real node needs (e2e.harness.realnode), when missing.

    python -m e2e.host_packages

Run by `make demo`, `make test` and so CI. As root it installs what is missing with apt-get
(about 10 s the first time, nothing after). Elsewhere it says in one line what is missing and
exits 0: the real-node tests then say why they cannot run (a failure under CI=true).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

from e2e.harness.realnode import DEBIAN_PACKAGES


def missing_packages(packages=DEBIAN_PACKAGES) -> list[str]:
    if shutil.which("dpkg-query") is None:
        return list(packages)
    missing = []
    for name in packages:
        status = subprocess.run(["dpkg-query", "-W", "-f=${Status}", name], capture_output=True, text=True)
        if status.returncode != 0 or not status.stdout.endswith("installed"):
            missing.append(name)
    return missing


def main() -> int:
    missing = missing_packages()
    if not missing:
        print("[e2e.host_packages] real-node packages installed", flush=True)
        return 0
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        print(f"[e2e.host_packages] not installed (needs root and apt-get): {' '.join(missing)}; "
              "the real-node tests will say they cannot run", flush=True)
        return 0
    print(f"[e2e.host_packages] installing {' '.join(missing)}", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-q"],
                ["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing]):
        if subprocess.run(cmd, env=env).returncode != 0:
            print(f"[e2e.host_packages] {' '.join(cmd)} failed", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
