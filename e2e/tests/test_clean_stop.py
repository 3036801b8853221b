"""A clean stop lets the passes under way end, on the real apiserver.

A pass cancelled in the middle of a create leaves a dropped connection (the apiserver logs a
"context canceled" error) and a child the next leader finds half-known. Operator.stop drains the
work queue first: the passes running finish their requests, and no other starts.
"""
from __future__ import annotations

import asyncio

import pytest
import yaml

from e2e.tests.lifecycle_helpers import tfjob
from e2e.harness.tfop_operator import deploy_manifests
from tfop.core.settings import Settings
from tfop.kube.client import KubeClient
from tfop.kube.credentials import load_credentials
from tfop.runtime.controller import Controller
from tfop.runtime.main import Operator

pytestmark = pytest.mark.cluster


async def stop_during_a_create(kubeconfig: str, namespace: str) -> tuple[list[str], list[str]]:
    """Reconcile until the first create is under way, stop then; (names whose create began, names
    whose create was answered)."""
    async with KubeClient(load_credentials(kubeconfig)) as client:
        settings = Settings(namespaces=(namespace,))
        operator = Operator(settings, client, Controller(settings, client, None), None)
        creating, began, answered, create = asyncio.Event(), [], [], client.create

        async def create_slowly(obj, *args, **kwargs):
            began.append(obj["metadata"]["name"])
            creating.set()
            await asyncio.sleep(0.5)  # the stop comes in here, while the pass creates
            created = await create(obj, *args, **kwargs)
            answered.append(created["metadata"]["name"])
            return created
        client.create = create_slowly
        operator.start_tasks()
        await asyncio.wait_for(creating.wait(), 60)
        await operator.stop()
        return began, answered


def test_a_stop_lets_the_pass_under_way_finish_its_creates(cluster, kubectl, namespace):
    deploy_manifests(cluster, None)  # the CRD
    container = {"name": "tensorflow", "image": "tf"}
    job = tfjob("stop-mid-pass", {"Worker": {"replicas": 2, "template": {"spec": {"containers": [container]}}}})
    kubectl("-n", namespace, "apply", "-f", "-", input=yaml.safe_dump(job))
    began, answered = asyncio.run(stop_during_a_create(str(cluster.kubeconfig), namespace))
    assert began and sorted(answered) == sorted(began), (began, answered)
    names = "jsonpath={.items[*].metadata.name}"
    created = [name for kind in ("pods", "services")
               for name in kubectl("-n", namespace, "get", kind, "-o", names).stdout.split()]
    assert sorted(created) == sorted(began)
