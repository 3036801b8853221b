"""TFJob objects from the seed documents in <repo>/../shared/seeds (or beside the repository a
fresh clone was made from).

seed_jobs() returns (seed_id, job) pairs; seed_id is "<file number>-<n>", n
counting the TFJobs within that file from 0 (e.g. "004-1"). TFJobs are taken
from fenced code blocks (any info string, any indentation); a file without
fences is scanned for bare YAML documents starting at `apiVersion:`.
Set TFOP_SEEDS_DIR to read another directory. Without the documents, every
test reading them fails with SeedsMissing, naming the folder and the variable:
none is skipped or passes without them.
"""
import os
import re
import subprocess
import textwrap
from pathlib import Path

import yaml

SEEDS_ENV = "TFOP_SEEDS_DIR"
REPO = Path(__file__).resolve().parents[1]


def _origin_checkout() -> Path | None:
    """The local repository this checkout was cloned from (a fresh clone for CI sits elsewhere)."""
    try:
        url = subprocess.run(["git", "config", "--get", "remote.origin.url"], cwd=REPO, capture_output=True,
                             text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    path = Path(url[len("file://"):] if url.startswith("file://") else url)
    return path if url and path.is_absolute() and path.is_dir() else None


def _seeds_dir() -> Path:
    """$TFOP_SEEDS_DIR, else shared/seeds beside this checkout, else beside the one it was cloned from."""
    if os.environ.get(SEEDS_ENV):
        return Path(os.environ[SEEDS_ENV])
    beside = REPO.parent / "shared" / "seeds"
    origin = _origin_checkout()
    if beside.is_dir() or origin is None:
        return beside
    return origin.parent / "shared" / "seeds"


SEEDS_DIR = _seeds_dir()


class SeedsMissing(Exception):
    """The seed documents are not where the tests look for them."""

_FENCE = re.compile(r"^(\s*)(```|~~~)")


def _fenced_blocks(text: str) -> list[str]:
    blocks, current, indent, fence = [], None, "", ""
    for line in text.splitlines():
        m = _FENCE.match(line)
        if current is None:
            if m:
                current, indent, fence = [], m.group(1), m.group(2)
        elif m and line.strip() == fence:
            blocks.append(textwrap.dedent("\n".join(current)))
            current = None
        else:
            current.append(line[len(indent):] if line.startswith(indent) else line)
    return blocks


def _bare_documents(text: str) -> list[str]:
    """YAML written straight into prose: from `apiVersion:` to the first prose line."""
    docs, current = [], None
    for line in text.splitlines():
        if current is None:
            if line.startswith("apiVersion:"):
                current = [line]
        elif not line.strip() or line[0].isspace() or re.match(r"^[\w.-]+:|^---", line):
            current.append(line)
        else:
            docs.append("\n".join(current))
            current = None
    if current:
        docs.append("\n".join(current))
    return docs


def _tfjobs(snippet: str) -> list[dict]:
    try:
        docs = list(yaml.safe_load_all(snippet))
    except yaml.YAMLError:
        return []
    return [d for d in docs if isinstance(d, dict) and d.get("kind") == "TFJob"]


def jobs_in(text: str) -> list[dict]:
    jobs = [j for block in _fenced_blocks(text) for j in _tfjobs(block)]
    if not jobs:
        jobs = [j for doc in _bare_documents(text) for j in _tfjobs(doc)]
    return jobs


def seeds_dir() -> Path:
    """SEEDS_DIR, or SeedsMissing saying where it was looked for and how to point elsewhere."""
    if not SEEDS_DIR.is_dir():
        how = (f"{SEEDS_ENV}={os.environ[SEEDS_ENV]} is not a folder" if os.environ.get(SEEDS_ENV)
               else f"{SEEDS_DIR} does not exist (set {SEEDS_ENV} to the folder holding them)")
        raise SeedsMissing(f"no seed documents: {how}")
    return SEEDS_DIR


def seed_jobs() -> list[tuple[str, dict]]:
    out = []
    for path in sorted(seeds_dir().glob("*")):
        if not path.is_file():
            continue
        number = path.name.split("_", 1)[0]
        for n, job in enumerate(jobs_in(path.read_text(encoding="utf-8"))):
            out.append((f"{number}-{n}", job))
    if not out:
        raise SeedsMissing(f"no TFJob in the seed documents in {SEEDS_DIR} (set {SEEDS_ENV} to the folder "
                           "holding them)")
    return out
