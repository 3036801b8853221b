"""TFJob objects from the seed documents in <repo>/../shared/seeds.

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
import textwrap
from pathlib import Path

import yaml

SEEDS_ENV = "TFOP_SEEDS_DIR"
SEEDS_DIR = Path(os.environ.get(SEEDS_ENV)
                 or Path(__file__).resolve().parents[1].parent / "shared" / "seeds")


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
