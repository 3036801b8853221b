"""The README's demo: seed 003 (ACK's Coscheduling guide) with and without gang scheduling.

A real local control plane with 4 GPUs (2 nodes x 2), tfop deployed from
`tfop manifests` (CRDs, RBAC) and run with its own ServiceAccount; the seed's
job (1 PS + 4 workers x 2 GPUs) is submitted verbatim, first to an operator
without gang scheduling, then to one with gang scheduling (Coscheduling by default); then 4 GPUs are
added. Prints the pods side by side. Where this machine can run a real node
(e2e.harness.realnode: root, containerd), it ends with a gang-scheduled TFJob that really
trains TensorFlow there and prints the chief's last log lines and the time from
`kubectl apply` to the first training step; elsewhere it says why. Then it tears
everything down.

    python -m e2e.demo [--dir DIR] [--gang-scheduler-name scheduler-plugins|volcano]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import yaml

from e2e.harness import realnode, training
from e2e.harness.cluster import Cluster
from e2e.harness.tfop_operator import OperatorProcess

SEED = "003-0"


def say(message: str) -> None:
    print(f"[demo] {message}", flush=True)


def seed_job() -> dict:
    """Seed 003's TFJob as the seed document writes it; the same shape of our own without the seeds."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.seeds import SEEDS_DIR, seed_jobs

    if SEEDS_DIR.is_dir():
        return dict(seed_jobs())[SEED]
    say(f"no seed documents at {SEEDS_DIR}: using a job of the same shape")
    return same_shape_job()


def same_shape_job() -> dict:
    def replica(count: int, limits: dict) -> dict:
        container = {"name": "tensorflow", "image": "tensorflow/tensorflow:2.15.0",
                     "command": ["python", "-c", "print('training')"], "resources": {"limits": limits}}
        return {"replicas": count, "restartPolicy": "OnFailure", "template": {"spec": {"containers": [container]}}}

    return {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": "tf-smoke-gpu"},
            "spec": {"tfReplicaSpecs": {"PS": replica(1, {"cpu": "1"}),
                                        "Worker": replica(4, {"nvidia.com/gpu": 2})}}}


def pods(cluster: Cluster, namespace: str) -> list[tuple[str, str, str]]:
    out = json.loads(cluster.kubectl("get", "pods", "-n", namespace, "-o", "json").stdout)
    rows = []
    for pod in sorted(out["items"], key=lambda p: p["metadata"]["name"]):
        rows.append((pod["metadata"]["name"], pod["status"].get("phase", "?"), pod["spec"].get("nodeName") or "-"))
    return rows


def wait_for(what: str, predicate, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"[demo] timed out waiting for {what}")
        time.sleep(0.5)


def settle(cluster: Cluster, namespace: str, expected: int, seconds: float = 8) -> list:
    """Pods once all exist and their phases have not changed for a while (the scheduler has had its say)."""
    wait_for(f"{expected} pods in {namespace}", lambda: len(pods(cluster, namespace)) == expected)
    last, since = None, time.monotonic()
    while time.monotonic() - since < seconds:
        now = pods(cluster, namespace)
        if now != last:
            last, since = now, time.monotonic()
        time.sleep(0.5)
    return last


def table(title: str, rows: list[tuple[str, str, str]]) -> list[str]:
    lines = [title, f"{'NAME':<24}{'STATUS':<10}{'NODE':<12}"]
    lines += [f"{name:<24}{phase:<10}{node:<12}" for name, phase, node in rows]
    return lines


def side_by_side(*columns: list[str], width: int = 48) -> str:
    height = max(len(c) for c in columns)
    padded = [c + [""] * (height - len(c)) for c in columns]
    return "\n".join("".join(cell.ljust(width) for cell in row).rstrip() for row in zip(*padded))


def submit(cluster: Cluster, namespace: str, job: dict) -> None:
    path = Path(cluster.dir) / f"{namespace}-{SEED}.yaml"
    path.write_text(yaml.safe_dump(job, sort_keys=False))
    cluster.kubectl("apply", "-n", namespace, "-f", str(path))


def train_for_real(cluster: Cluster, gang: str) -> None:
    """A Chief + 2 workers MultiWorkerMirroredStrategy job, gang-scheduled, on the real node."""
    cluster.kubectl("create", "namespace", "training")
    cluster.apply(training.workload_configmap("training"))
    operator = OperatorProcess(cluster, ["training"], gang_scheduler_name=gang).start()
    image, args = cluster.node_image("tf"), ["--steps", "50"]
    job = training.tfjob("linear-regression", {"Chief": training.replica(image, 1, args),
                                        "Worker": training.replica(image, 2, args)})
    path = Path(cluster.dir) / "training-job.yaml"
    path.write_text(yaml.safe_dump(job, sort_keys=False))
    say(f"a TFJob that really trains: Chief + 2 workers, MultiWorkerMirroredStrategy, gang ({gang}), "
        "TensorFlow 2.20 CPU on the real node; kubectl apply")
    applied = time.time()
    cluster.kubectl("apply", "-n", "training", "-f", str(path))
    wait_for("the training job to finish", lambda: cluster.kubectl(
        "get", "tfjob", "linear-regression", "-n", "training", "-o",
        "jsonpath={.status.conditions[?(@.status=='True')].type}").stdout.split()[-1:] in (["Succeeded"], ["Failed"]),
        timeout=300)
    operator.stop()
    log = cluster.kubectl("logs", "-n", "training", "linear-regression-chief-0").stdout
    progress = training.parse_progress(log)
    print()
    print("\n".join(f"  {line}" for line in log.splitlines()[-6:]))
    print(cluster.kubectl("get", "tfjob", "-n", "training").stdout)
    if progress.first_step_time:
        say(f"kubectl apply -> first training step: {progress.first_step_time - applied:.1f} s; "
            f"final loss {progress.final_loss}")


def run(directory: Path, gang: str) -> None:
    why_not_real = realnode.unavailable_reason()
    say("starting the local control plane (etcd, kube-apiserver, controller-manager, schedulers, kwok"
        + (")" if why_not_real else ", a real node: kubelet, containerd, CoreDNS)"))
    cluster = Cluster.up(directory, gpu_nodes=2, gpus_per_node=2, schedulers=["default", "coscheduling", "volcano"],
                         real_nodes=0 if why_not_real else 1)
    try:
        job = seed_job()
        say(f"cluster up: 2 fake nodes x 2 nvidia.com/gpu; seed job {job['metadata']['name']}: "
            "1 PS + 4 workers x 2 GPUs (needs 8 GPUs, the cluster has 4)")

        cluster.kubectl("create", "namespace", "without-gang")
        operator = OperatorProcess(cluster, ["without-gang"]).start()
        say("tfop running WITHOUT gang scheduling; submitting the job")
        submit(cluster, "without-gang", job)
        without = settle(cluster, "without-gang", 5)
        cluster.kubectl("delete", "tfjob", "--all", "-n", "without-gang", "--wait=true")
        wait_for("pods of the first run to go", lambda: not pods(cluster, "without-gang"))
        operator.stop()

        cluster.kubectl("create", "namespace", "with-gang")
        operator = OperatorProcess(cluster, ["with-gang"], gang_scheduler_name=gang).start()
        say(f"tfop running WITH gang scheduling ({gang}); submitting the same job")
        submit(cluster, "with-gang", job)
        # Both backends create the pods at once (no Volcano admission webhook runs here, so tfop
        # does not wait for the PodGroup's admission) and the scheduler keeps them all Pending.
        pending = settle(cluster, "with-gang", 5)
        status = json.loads(cluster.kubectl("get", "tfjob", "-n", "with-gang", "-o", "json").stdout)["items"][0]
        gang_state = status.get("status", {}).get("gang", {})
        say("adding 2 nodes x 2 GPUs")
        cluster.add_gpu_nodes(2, gpus=2)
        wait_for("the whole gang to run", lambda: all(p[1] == "Running" for p in pods(cluster, "with-gang")))
        running = pods(cluster, "with-gang")
        # tfop writes a starting job's progress once the job is quiet (<= 5 s): wait for it.
        wait_for("the TFJob to report Running", lambda: "Running" in cluster.kubectl(
            "get", "tfjob", "-n", "with-gang", "-o", "jsonpath={.items[0].status.conditions[-1:].type}").stdout)
        operator.stop()

        print()
        print(side_by_side(table("WITHOUT gang scheduling (4 GPUs)", without),
                           table(f"WITH gang ({gang}, 4 GPUs)", pending),
                           table("WITH gang, after adding 4 GPUs", running)))
        print()
        if gang_state:
            print(f"While it waited, `kubectl describe tfjob` said: gang {gang_state.get('group')} "
                  f"{gang_state.get('phase', '')}: {gang_state.get('message', '')}")
        print(cluster.kubectl("get", "tfjob", "-n", "with-gang").stdout)
        if why_not_real:
            say(f"no real training here: real nodes cannot run on this machine ({why_not_real})")
        else:
            train_for_real(cluster, gang)
    finally:
        say("tearing down")
        cluster.down()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--gang-scheduler-name", default="scheduler-plugins", choices=["volcano", "scheduler-plugins"],
                        help="the gang scheduler that keeps the pods Pending: Coscheduling (scheduler-plugins, "
                             "the default) or Volcano")
    args = parser.parse_args(argv)
    directory = args.dir or Path(tempfile.mkdtemp(prefix="tfop-demo-"))
    run(directory, args.gang_scheduler_name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
