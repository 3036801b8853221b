"""python -m e2e.harness up|status|down|restart: a cluster for a shell (e2e.harness.cluster)."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from e2e import build
from e2e.harness.cluster import ALL_SCHEDULERS, KNOWN_SCHEDULERS, KUBERNETES_VERSIONS, Cluster, default_dir
from e2e.harness.cluster import __doc__ as CLUSTER_DOC
from e2e.harness.errors import ClusterError


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m e2e.harness", description=CLUSTER_DOC,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("action", choices=["up", "down", "status", "restart"])
    ap.add_argument("--component", help="restart: which (a name `status` lists)")
    ap.add_argument("--dir", default=None, help="state dir (default $TFOP_E2E_DIR or /tmp/tfop-e2e-UID)")
    ap.add_argument("--gpu-nodes", type=int, default=4)
    ap.add_argument("--gpus-per-node", type=int, default=1)
    ap.add_argument("--schedulers", default=",".join(ALL_SCHEDULERS),
                    help="comma-separated, from: " + ",".join(KNOWN_SCHEDULERS))
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--real-nodes", type=int, default=0, choices=(0, 1),
                    help="a node backed by a real kubelet and containerd (root, overlayfs)")
    ap.add_argument("--node-images", default="tf",
                    help="e2e.harness.images imported into the real node (pause always)")
    ap.add_argument("--kubernetes", default=None, choices=list(KUBERNETES_VERSIONS),
                    help="an optional control plane instead of the harness's own (1.37: native gang "
                         "scheduling; 1.30: the oldest supported; --schedulers default only)")
    return ap.parse_args(argv)


def status(d: Path) -> int:
    c = Cluster(d)
    alive = c.alive_components()
    if not alive:
        print(f"no cluster in {d}")
        return 1
    print(f"server: {c.server}\nkubeconfig: {c.kubeconfig}")
    for n, up in alive.items():
        print(f"{n:30s} {'up' if up else 'DOWN'} (pid {c.state['pids'].get(n, '-')})")
    return 0 if all(alive.values()) else 1


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    d = Path(a.dir) if a.dir else default_dir()
    try:
        if a.action == "up":
            t0 = time.monotonic()
            c = Cluster.up(d, gpu_nodes=a.gpu_nodes, gpus_per_node=a.gpus_per_node,
                           schedulers=[s for s in a.schedulers.split(",") if s],
                           stop_on_exit=False, timeout=a.timeout, real_nodes=a.real_nodes,
                           node_images=tuple(n for n in a.node_images.split(",") if n),
                           kubernetes=a.kubernetes)
            print(f"cluster up in {time.monotonic() - t0:.1f}s: {c.server}")
            print(f"logs: {c.logs}")
            print(f"kubeconfig: {c.kubeconfig}")
        elif a.action == "restart":
            c = Cluster.attach(d)
            print(f"{a.component} restarted: pid {c.restart(a.component or '', timeout=a.timeout)}")
        elif a.action == "down":
            Cluster(d).down()
            print(f"cluster in {d} stopped")
        else:
            return status(d)
    except (ClusterError, build.BuildError) as e:
        print(f"ERROR: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
