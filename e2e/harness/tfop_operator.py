"""Run tfop against the local cluster the way a user deploys it.

The CRDs and RBAC come from `tfop manifests` (applied server-side, as the
README tells users); the operator runs as a subprocess with a kubeconfig for
its own ServiceAccount, never as cluster admin, so every test also proves the
ClusterRole is sufficient.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

OPERATOR_NAMESPACE = "kubeflow"
OPERATOR_ACCOUNT = "tfop"
# The gang backend of the manifests applied last on a Cluster (its ClusterRole's rules), or unset.
DEPLOYED_GANG = "tfop_deployed_gang"


def deploy_manifests(cluster, gang_scheduler_name: str | None) -> None:
    """Apply CRDs and RBAC (not the Deployment: the operator runs here as a process)."""
    from tfop.tools.deploy.manifests import deploy_objects

    objects = deploy_objects(enable_gang=bool(gang_scheduler_name), gang_scheduler_name=gang_scheduler_name,
                             create_namespace=True)  # a fresh cluster has no kubeflow namespace yet
    objects = [o for o in objects if o["kind"] != "Deployment"]
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-",
                    input=yaml.safe_dump_all(objects))
    wait_established(cluster, "tfjobs.kubeflow.org")
    setattr(cluster, DEPLOYED_GANG, gang_scheduler_name)


def wait_established(cluster, crd: str, timeout: float = 60) -> None:
    # `kubectl wait` errors out at once on a CRD that has no conditions yet, so poll.
    deadline = time.monotonic() + timeout
    jsonpath = "jsonpath={.status.conditions[?(@.type=='Established')].status}"
    while cluster.kubectl("get", "crd", crd, "-o", jsonpath, check=False).stdout.strip() != "True":
        if time.monotonic() > deadline:
            raise RuntimeError(f"CRD {crd} not Established after {timeout}s")
        time.sleep(0.2)


class OperatorProcess:
    deploys_manifests = True  # `tfop manifests` for its gang applied at each start (a subclass may have done it)

    def __init__(self, cluster, namespaces: list[str], gang_scheduler_name: str | None = None,
                 extra_args: list[str] | None = None, log_dir: Path | None = None):
        self.cluster = cluster
        self.namespaces = namespaces
        self.gang = gang_scheduler_name
        self.extra_args = extra_args or []
        self.log_dir = Path(log_dir or cluster.dir)
        self.process: subprocess.Popen | None = None
        self.log_path = self.log_dir / f"tfop-{'-'.join(namespaces) or 'all'}-{int(time.time() * 1000)}.log"

    def args(self) -> list[str]:
        args = [sys.executable, "-m", "tfop", "run", "--health-probe-bind-address", "0", "--metrics-bind-address", "0"]
        kubeconfig = self.cluster.service_account_kubeconfig(OPERATOR_NAMESPACE, OPERATOR_ACCOUNT)
        args += ["--kubeconfig", str(kubeconfig)]
        for ns in self.namespaces:
            args += ["--namespace", ns]
        if self.gang:
            args += ["--enable-gang-scheduling", "--gang-scheduler-name", self.gang]
        return args + self.extra_args

    def start(self) -> "OperatorProcess":
        if self.deploys_manifests:
            deploy_manifests(self.cluster, self.gang)
        log = open(self.log_path, "ab")
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        self.process = subprocess.Popen(self.args(), stdout=log, stderr=subprocess.STDOUT, env=env,
                                        cwd=Path(__file__).resolve().parents[2], start_new_session=True)
        log.close()
        self.wait_started()
        return self

    def wait_started(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"tfop exited with {self.process.returncode}:\n{self.log_tail()}")
            if "caches synced" in self.log_path.read_text(errors="replace"):
                return
            time.sleep(0.1)
        raise RuntimeError(f"tfop did not sync its caches in {timeout}s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"

    def kill(self) -> None:
        """SIGKILL: the crash a test wants to survive."""
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
