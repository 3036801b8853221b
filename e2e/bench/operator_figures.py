"""What the operator's image costs as users run it: its size, its pods' time from creation to Ready,
their memory against the Deployment's requests and limits. On a real-node cluster of its own.

    python -m e2e.bench.operator_figures [--runs 3]

Each run applies `manifests/overlays/gang-volcano` with the image swapped (as
e2e/tests/test_in_cluster.py does), waits for both pods Ready, reads each pod's creation and Ready
times from the API and its container's RSS from this machine's /proc (the process is local), and
removes the install. The image is built first if its inputs changed (e2e.harness.images "operator").
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tarfile
import tempfile
import time
import zlib
from pathlib import Path

import yaml

from e2e.harness import images
from e2e.harness.cluster import Cluster
from e2e.harness.installed import REPO, kustomize_overlay, memory_mb, operator_pods, remove_install, time_of, wait_ready_pods


def image_sizes(archive: Path) -> dict[str, float]:
    """MB: the layers as they unpack, and gzip-compressed as a registry would store them."""
    with tarfile.open(archive) as tar:
        index = json.load(tar.extractfile("index.json"))
        manifest = json.load(tar.extractfile("blobs/sha256/" + index["manifests"][0]["digest"][7:]))
        raw = compressed = 0
        for layer in manifest["layers"]:
            blob = tar.extractfile("blobs/sha256/" + layer["digest"][7:])
            packer = zlib.compressobj(6, zlib.DEFLATED, 31)  # gzip framing, as `gzip -6`
            while chunk := blob.read(1 << 20):
                raw += len(chunk)
                compressed += len(packer.compress(chunk))
            compressed += len(packer.flush())
    return {"layers_mb": raw / 1e6, "gzip_mb": compressed / 1e6}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m e2e.bench.operator_figures", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args(argv)
    image = images.ensure(["operator"])["operator"]
    print(f"[figures] image {image.ref}: {image_sizes(image.archive)}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="tfop-figures-"))
    cluster = Cluster.up(work / "cluster", schedulers=["default", "volcano"], gpu_nodes=0, real_nodes=1)
    try:
        ref = cluster.load_node_image("operator")
        overlay = kustomize_overlay(work / "overlay", REPO / "manifests" / "overlays" / "gang-volcano", ref)
        rendered = [o for o in yaml.safe_load_all(cluster.kubectl("kustomize", str(overlay)).stdout) if o]
        limits = next(o for o in rendered if o["kind"] == "Deployment")["spec"]["template"]["spec"][
            "containers"][0]["resources"]
        ready_s, rss = [], []
        for run in range(args.runs):
            cluster.kubectl("apply", "--server-side", "-k", str(overlay), timeout=120)
            for pod in wait_ready_pods(cluster, 2):
                ready = next(c for c in pod["status"]["conditions"] if c["type"] == "Ready")
                ready_s.append(time_of(ready["lastTransitionTime"]) - time_of(pod["metadata"]["creationTimestamp"]))
            time.sleep(30)  # both replicas settled: the leader reconciling, the standby's caches warm
            rss += [memory_mb(p) for p in operator_pods(cluster)]
            remove_install(cluster, rendered)
            print(f"[figures] run {run + 1}: ready {ready_s[-2:]} s, RSS {rss[-2:]} MB", flush=True)
        print(f"[figures] pod creation -> Ready: median {statistics.median(ready_s):.0f} s "
              f"(min {min(ready_s):.0f}, max {max(ready_s):.0f}); RSS median {statistics.median(rss):.0f} MB "
              f"(max {max(rss):.0f}); requests {limits['requests']}, limits {limits['limits']}", flush=True)
    finally:
        cluster.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
