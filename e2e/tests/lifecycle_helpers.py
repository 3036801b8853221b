"""Helpers for the TFJob lifecycle tests against the real local control plane.

`Env` bundles one test's namespace, admin kubectl and OperatorProcess; every
wait polls (0.2 s) up to a deadline and fails with the object's state and the
operator's log tail. `JobWatch` follows one TFJob with `kubectl get -w` so a
test can assert on transient statuses (e.g. Restarting) a poll could miss.
"""
from __future__ import annotations

import json
import re
import subprocess
import textwrap
import threading
import time
from pathlib import Path
from typing import Any, Callable

import yaml

from e2e import build
from e2e.harness.kwok_stages import EXIT_CODE_ANNOTATION, EXIT_DELAY_ANNOTATION, EXIT_LABEL

POLL = 0.2
IMAGE = "registry.example/tfop-test/noop:1"
LABEL_JOB = "training.kubeflow.org/job-name"


# -- building TFJobs ---------------------------------------------------------------
def replica(replicas: int = 1, restart_policy: str | None = "Never", exit_code: int | None = None,
            exit_delay: str | None = None) -> dict:
    """A small CPU-only replica spec; exit_code makes its pods exit as soon as they run."""
    meta: dict[str, Any] = {}
    if exit_code is not None:
        meta = {"labels": {EXIT_LABEL: "true"}, "annotations": {EXIT_CODE_ANNOTATION: str(exit_code)}}
        if exit_delay:
            meta["annotations"][EXIT_DELAY_ANNOTATION] = exit_delay
    spec: dict[str, Any] = {"replicas": replicas, "template": {
        "metadata": meta,
        "spec": {"containers": [{"name": "tensorflow", "image": IMAGE,
                                 "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]},
    }}
    if restart_policy is not None:
        spec["restartPolicy"] = restart_policy
    return spec


def tfjob(name: str, replicas: dict[str, dict], run_policy: dict | None = None, **spec: Any) -> dict:
    body: dict[str, Any] = {"tfReplicaSpecs": replicas, **spec}
    if run_policy:
        body["runPolicy"] = run_policy
    return {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": name}, "spec": body}


# -- reading status ----------------------------------------------------------------
def conditions(job: dict | None) -> list[dict]:
    return list(((job or {}).get("status") or {}).get("conditions") or [])


def condition(job: dict | None, ctype: str) -> dict | None:
    for c in conditions(job):
        if c.get("type") == ctype:
            return c
    return None


def is_true(job: dict | None, ctype: str) -> bool:
    c = condition(job, ctype)
    return bool(c) and c.get("status") == "True"


def summary(job: dict | None) -> list[tuple[str, str, str]]:
    return [(c.get("type"), c.get("status"), c.get("reason")) for c in conditions(job)]


def active(objs: list[dict]) -> list[dict]:
    """Objects not being deleted (kwok finishes pod deletion at once, but a poll may see the tail)."""
    return [o for o in objs if not o["metadata"].get("deletionTimestamp")]


def names(objs: list[dict]) -> set[str]:
    return {o["metadata"]["name"] for o in objs}


def phase(pod: dict) -> str:
    return (pod.get("status") or {}).get("phase") or "Pending"


class Env:
    def __init__(self, cluster, namespace: str, op=None):
        self.cluster, self.ns, self.op = cluster, namespace, op

    # -- kubectl --------------------------------------------------------------------
    def kubectl(self, *args: str, input: str | None = None, check: bool = True, namespaced: bool = True):
        ns = ["-n", self.ns] if namespaced else []
        return self.cluster.kubectl(*ns, *args, input=input, check=check)

    def json(self, *args: str) -> dict:
        return json.loads(self.kubectl(*args, "-o", "json").stdout)

    def apply(self, *objs: dict) -> None:
        self.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objs))

    def job(self, name: str) -> dict | None:
        p = self.kubectl("get", "tfjob", name, "-o", "json", check=False)
        if p.returncode != 0:
            if "NotFound" in p.stderr or "not found" in p.stderr:
                return None
            raise AssertionError(f"kubectl get tfjob {name}: {p.stderr}")
        return json.loads(p.stdout)

    def pods(self, job: str | None = None) -> list[dict]:
        sel = ["-l", f"{LABEL_JOB}={job}"] if job else []
        return self.json("get", "pods", *sel)["items"]

    def services(self, job: str | None = None) -> list[dict]:
        sel = ["-l", f"{LABEL_JOB}={job}"] if job else []
        return self.json("get", "services", *sel)["items"]

    def pod(self, name: str) -> dict | None:
        p = self.kubectl("get", "pod", name, "-o", "json", check=False)
        return json.loads(p.stdout) if p.returncode == 0 else None

    def events(self, job: str) -> list[dict]:
        items = self.json("get", "events", "--field-selector",
                          f"involvedObject.kind=TFJob,involvedObject.name={job}")["items"]
        return sorted(items, key=lambda e: (e.get("firstTimestamp") or "", e["metadata"]["creationTimestamp"]))

    def patch_job(self, name: str, patch: dict) -> None:
        self.kubectl("patch", "tfjob", name, "--type", "merge", "-p", json.dumps(patch))

    def mark_exit(self, pod: str, code: int) -> None:
        """Make one Running pod exit with `code` (kwok's tfop-test-exit stage); one write, label last-safe."""
        patch = {"metadata": {"labels": {EXIT_LABEL: "true"}, "annotations": {EXIT_CODE_ANNOTATION: str(code)}}}
        self.kubectl("patch", "pod", pod, "--type", "merge", "-p", json.dumps(patch))

    # -- waiting --------------------------------------------------------------------
    def context(self, job: str | None = None) -> str:
        parts = []
        if job:
            j = self.job(job)
            parts.append(f"TFJob {job} status: {json.dumps((j or {}).get('status'), indent=1)}")
            try:
                parts.append("pods: " + ", ".join(
                    f"{p['metadata']['name']}={phase(p)}{'(deleting)' if p['metadata'].get('deletionTimestamp') else ''}"
                    for p in self.pods(job)))
                parts.append("events: " + "\n  ".join(f"{e['type']} {e['reason']}: {e['message']}"
                                                      for e in self.events(job)))
            except Exception as err:  # noqa: BLE001 - context only
                parts.append(f"(could not list children: {err})")
        if self.op is not None:
            parts.append("operator log tail:\n" + self.op.log_tail())
        return "\n".join(parts)

    def wait(self, what: str, pred: Callable[[], Any], timeout: float = 45, job: str | None = None) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = pred()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{self.context(job)}")
            time.sleep(POLL)

    def wait_job(self, name: str, pred: Callable[[dict], Any], what: str, timeout: float = 45) -> dict:
        def check():
            j = self.job(name)
            return j if j is not None and pred(j) else None
        return self.wait(f"TFJob {name}: {what}", check, timeout, job=name)

    def wait_condition(self, name: str, ctype: str, timeout: float = 45) -> dict:
        return self.wait_job(name, lambda j: is_true(j, ctype), f"condition {ctype}=True", timeout)

    def wait_pods_running(self, job: str, expected: set[str], timeout: float = 45) -> list[dict]:
        def check():
            pods = active(self.pods(job))
            ok = names(pods) == expected and all(phase(p) == "Running" for p in pods)
            return pods if ok else None
        return self.wait(f"pods {sorted(expected)} of {job} Running", check, timeout, job=job)

    def wait_children(self, job: str, pods: set[str], services: set[str] | None = None,
                      timeout: float = 45) -> None:
        """Until the job's live pods and services are exactly these names."""
        services = pods if services is None else services

        def check():
            return names(active(self.pods(job))) == pods and names(active(self.services(job))) == services
        self.wait(f"{job} children pods={sorted(pods)} services={sorted(services)}", check, timeout, job=job)

    def msg(self, job: str | None = None) -> str:
        return self.context(job)


def pod_names(job: str, **counts: int) -> set[str]:
    return {f"{job}-{rtype.lower()}-{i}" for rtype, n in counts.items() for i in range(n)}


class JobWatch:
    """Every version of one TFJob the apiserver sends on a watch (kubectl get -w -o json)."""

    def __init__(self, cluster, namespace: str, name: str):
        cmd = [str(build.binary("kubectl")), "--kubeconfig", str(cluster.kubeconfig), "-n", namespace,
               "get", "tfjobs", "--field-selector", f"metadata.name={name}", "-w", "--output-watch-events",
               "-o", "json"]  # a list watch: fine before the job exists
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.events: list[tuple[float, str, dict]] = []  # (monotonic time received, type, object)
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        decoder, buffer = json.JSONDecoder(), ""
        for line in self.proc.stdout:
            buffer += line
            while True:
                stripped = buffer.lstrip()
                if not stripped:
                    buffer = ""
                    break
                try:
                    obj, end = decoder.raw_decode(stripped)
                except ValueError:
                    break
                buffer = stripped[end:]
                self.events.append((time.monotonic(), obj.get("type", ""), obj.get("object") or {}))

    def objects(self) -> list[dict]:
        return [o for _, _, o in list(self.events)]

    def seen(self, pred: Callable[[dict], bool]) -> bool:
        return any(pred(o) for o in self.objects())

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()


# -- seeds, verbatim ---------------------------------------------------------------
_DOC_SPLIT = re.compile(r"^---[ \t]*$", re.M)


def raw_seed_docs() -> list[tuple[str, str, dict]]:
    """(seed id, the TFJob YAML text exactly as the seed writes it, parsed) in seed_jobs() order."""
    from tests import seeds

    out = []
    for path in sorted(seeds.seeds_dir().glob("*")):
        if not path.is_file():
            continue
        number = path.name.split("_", 1)[0]
        text = path.read_text(encoding="utf-8")
        found = _tfjob_texts(seeds._fenced_blocks(text)) or _tfjob_texts(seeds._bare_documents(text))
        for n, (doc, parsed) in enumerate(found):
            out.append((f"{number}-{n}", doc, parsed))
    return out


def _tfjob_texts(blocks: list[str]) -> list[tuple[str, dict]]:
    found = []
    for block in blocks:
        try:
            list(yaml.safe_load_all(block))
        except yaml.YAMLError:
            continue  # seeds.py skips a block that is not YAML as a whole
        for doc in _DOC_SPLIT.split(block):
            parsed = yaml.safe_load(doc) if doc.strip() else None
            if isinstance(parsed, dict) and parsed.get("kind") == "TFJob":
                found.append((textwrap.dedent(doc).strip("\n") + "\n", parsed))
    return found


# -- operator ----------------------------------------------------------------------


def operator(cluster, namespaces: list[str], **kwargs):
    """An e2e.harness.tfop_operator.OperatorProcess, CRDs and RBAC applied once per cluster.

    `tfop manifests` is applied server-side by every OperatorProcess.start();
    on this 2-core machine that takes 7-15 s, for objects that do not change
    between tests. The process itself is started exactly as OperatorProcess does.
    """
    from unittest import mock

    from e2e.harness.tfop_operator import DEPLOYED_GANG, OperatorProcess

    class _Operator(OperatorProcess):
        def start(self):
            # The ClusterRole is one object: skip only when the last apply was this variant's.
            if getattr(cluster, DEPLOYED_GANG, "never") == self.gang:
                with mock.patch("e2e.harness.tfop_operator.deploy_manifests"):
                    return super().start()
            return super().start()

    return _Operator(cluster, namespaces, **kwargs)
