"""Held statuses are written when the operator stops, on the real apiserver.

The controller holds progress-only status changes (tfop/runtime/holding.py);
on SIGTERM, main.py's cleanup calls Controller.flush_statuses so the job's
status does not lag behind by an operator restart. No operator runs in this
namespace, so only the flush can have written what the test reads back.
"""
from __future__ import annotations

import asyncio
import json

import pytest
import yaml

from e2e.tests.lifecycle_helpers import tfjob
from e2e.harness.tfop_operator import deploy_manifests
from tfop.runtime.controller import Controller
from tfop.runtime.status_writer import TFJOB_API
from tfop.kube.client import KubeClient
from tfop.kube.credentials import load_credentials
from tfop.core.settings import Settings

pytestmark = pytest.mark.cluster

HELD = {"conditions": [{"type": "Created", "status": "True", "reason": "TFJobCreated", "message": "held",
                        "lastUpdateTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
        "startTime": "2026-01-01T00:00:00Z", "replicaStatuses": {"Worker": {"active": 1}}}


async def flush(kubeconfig: str, namespace: str, names: list[str]) -> int:
    async with KubeClient(load_credentials(kubeconfig)) as client:
        controller = Controller(Settings(namespaces=(namespace,)), client, None)
        for name in names:
            controller.job_event("ADDED", await client.get(TFJOB_API, "tfjobs", namespace, name))
            controller.jobs[(namespace, name)].hold(HELD, 0.0)
        return await controller.flush_statuses(timeout=10)


def test_flush_writes_every_held_status(cluster, kubectl, namespace):
    deploy_manifests(cluster, None)  # the CRD
    names = ["flush-a", "flush-b"]
    container = {"name": "tensorflow", "image": "tf"}
    for name in names:
        job = tfjob(name, {"Worker": {"replicas": 1, "template": {"spec": {"containers": [container]}}}})
        kubectl("-n", namespace, "apply", "-f", "-", input=yaml.safe_dump(job))
    assert asyncio.run(flush(str(cluster.kubeconfig), namespace, names)) == 2
    for name in names:
        status = json.loads(kubectl("-n", namespace, "get", "tfjob", name, "-o", "json").stdout)["status"]
        assert status["conditions"][0]["message"] == "held"
        assert status["replicaStatuses"] == {"Worker": {"active": 1}}
