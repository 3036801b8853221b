"""The upstream Kubeflow training-operator binary as a local process: the operator tfop is measured
against (e2e.bench) and migrated from (e2e/tests/test_migration.py)."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

from e2e.harness.processes import free_port

UPSTREAM_WEBHOOK = "validator.training-operator.kubeflow.org"
CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")  # hard-coded in its pkg/cert


class UpstreamProcess:
    """The Kubeflow training-operator v1.9 binary as a local process (admin kubeconfig).

    v1.9 has no flag to skip its webhook cert rotator, and it starts its
    controllers only once the rotator is ready; the rotator keeps a Secret in
    $MY_POD_NAMESPACE and injects its CA into the ValidatingWebhookConfiguration
    `validator.training-operator.kubeflow.org`. We create both: the Secret in the
    benchmark namespace (its cache is restricted to --namespace), and a webhook
    configuration whose one webhook matches no rules, so TFJob creation is not
    routed to a webhook in this row any more than in the others."""

    def __init__(self, cluster, namespace: str, gang: str | None, tuned: bool, log_dir: Path,
                 threads: int = 32, qps: int = 1000, burst: int = 2000):
        self.cluster, self.namespace, self.gang, self.tuned = cluster, namespace, gang, tuned
        self.threads, self.qps, self.burst = threads, qps, burst
        self.log_path = Path(log_dir) / f"upstream-{namespace}-{int(time.time() * 1000)}.log"
        self.process: subprocess.Popen | None = None

    def args(self) -> list[str]:
        from e2e import build

        args = [str(build.binary("training-operator")), "--enable-scheme=tfjob", f"--namespace={self.namespace}",
                f"--metrics-bind-address=127.0.0.1:{free_port()}",
                f"--health-probe-bind-address=127.0.0.1:{free_port()}",
                f"--webhook-server-port={free_port()}", "--leader-elect=false"]
        if self.gang:
            args.append(f"--gang-scheduler-name={self.gang}")
        if self.tuned:
            args += [f"--controller-threads={self.threads}", f"--kube-api-qps={self.qps}",
                     f"--kube-api-burst={self.burst}"]
        return args

    def prepare(self) -> None:
        self.cluster.apply([
            {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
             "metadata": {"name": UPSTREAM_WEBHOOK},
             "webhooks": [{"name": "unused.bench.training-operator.kubeflow.org",
                           "clientConfig": {"url": "https://127.0.0.1:9/unused"},
                           "rules": [], "sideEffects": "None", "admissionReviewVersions": ["v1"],
                           "failurePolicy": "Ignore"}]},
            {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
             "metadata": {"name": "training-operator-webhook-cert", "namespace": self.namespace}},
        ])

    def start(self, timeout: float = 90) -> "UpstreamProcess":
        self.prepare()
        self.log_path = self.log_path.with_name(f"upstream-{self.namespace}-{int(time.time() * 1000)}.log")
        env = {**os.environ, "KUBECONFIG": str(self.cluster.kubeconfig), "MY_POD_NAMESPACE": self.namespace}
        log = open(self.log_path, "ab")
        self.process = subprocess.Popen(self.args(), stdout=log, stderr=subprocess.STDOUT, env=env,
                                        stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        mounted = False
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"training-operator exited {self.process.returncode}:\n{self.log_tail()}")
            if not mounted:
                mounted = self.mount_certs()
            if re.search(r"Starting workers.*tfjob-controller", self.log_path.read_text(errors="replace")):
                return self
            time.sleep(0.2)
        raise RuntimeError(f"training-operator did not start its workers in {timeout}s:\n{self.log_tail()}")

    def mount_certs(self) -> bool:
        """In a pod the rotator's Secret is a volume at its cert dir; here we copy it there."""
        import base64

        got = self.cluster.kubectl("get", "secret", "-n", self.namespace, "training-operator-webhook-cert",
                                   "-o", "json", check=False)
        data = (json.loads(got.stdout).get("data") or {}) if got.returncode == 0 else {}
        if not {"tls.crt", "tls.key"} <= data.keys():
            return False
        CERT_DIR.mkdir(parents=True, exist_ok=True)
        for name in ("tls.crt", "tls.key", "ca.crt"):
            if name in data:
                (CERT_DIR / name).write_bytes(base64.b64decode(data[name]))
        return True

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
