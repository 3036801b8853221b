"""The extra schedulers: Koordinator (in the default session set) and YuniKorn
(opt-in: its port 9080 is fixed), e.g.
TFOP_E2E_SCHEDULERS=default,coscheduling,volcano,koordinator,yunikorn."""

from __future__ import annotations

import pytest

from e2e.harness.koordinator import KOORDINATOR_SCHEDULER_NAME
from e2e.harness.yunikorn import YUNIKORN_SCHEDULER_NAME
from e2e.tests.test_cluster import create, gpu_pod, wait_pod

pytestmark = pytest.mark.cluster


def needs(cluster, scheduler: str) -> None:
    if scheduler not in cluster.state.get("schedulers", []):
        pytest.skip(f"session cluster runs without {scheduler} (see TFOP_E2E_SCHEDULERS)")


def test_yunikorn_runs_gpu_pod(cluster, kubectl, namespace):
    needs(cluster, "yunikorn")
    create(kubectl, namespace, gpu_pod("yk", YUNIKORN_SCHEDULER_NAME, labels={"applicationId": "app-1"}))
    wait_pod(kubectl, namespace, "yk", ("Running",))


def test_koordinator_runs_gang(cluster, kubectl, namespace):
    needs(cluster, "koordinator")
    ann = {"gang.scheduling.koordinator.sh/name": "kg", "gang.scheduling.koordinator.sh/min-available": "2"}
    create(kubectl, namespace, *[gpu_pod(f"k{i}", KOORDINATOR_SCHEDULER_NAME, annotations=ann)
                                 for i in range(2)])
    for i in range(2):
        wait_pod(kubectl, namespace, f"k{i}", ("Running",))
