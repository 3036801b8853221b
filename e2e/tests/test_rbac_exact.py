"""The operator's ClusterRole is exact: every request the operator makes is allowed by it, and
every permission it grants is used. So is the leader election's Role (the operator runs with
--leader-elect, as deployed): its Lease is created, read and renewed, and nothing else.

The harness's apiserver writes an audit log (Metadata level, ServiceAccount users only:
e2e/harness/control_plane.py AUDIT_POLICY) and runs the admission plugin OwnerReferencesPermissionEnforcement.
Each test deploys `tfop manifests`' ServiceAccount and ClusterRole, runs the operator with them
through every code path that needs a permission, then reads the audit entries of that operator's
own token and compares them with the ClusterRole. The workload, on one job: names it needs held by
objects of no controller (the operator reads whose they are), children stripped of their owner
(adopted back), a member restarted, the gang edited, suspend and resume twice (repeated Events are
counted), success, deletion by ttlSecondsAfterFinished. With gang scheduling, Volcano is chosen by
`--gang-scheduler-name auto` and a PriorityClass exists; without, the base role alone must be exact.
"""
from __future__ import annotations

import pytest

from e2e.tests.audit_helpers import (VOLCANO, AuditedOperator, assert_gang_operator_exact, assert_role_exact,
                                     exercise, kueue_kinds_served, live_rules, priority_class_made, run_audited)
from e2e.tests.lifecycle_helpers import Env
from tfop.tools.deploy import rbac

pytestmark = pytest.mark.cluster

# What `--gang-scheduler-name auto` picks here: Volcano's CRDs come first (registry.AUTO_ORDER).
AUTO_PICKS = "volcano"


@pytest.fixture
def kueue_crds(cluster):
    with kueue_kinds_served(cluster):
        yield


@pytest.fixture
def priority_class(cluster, namespace):
    with priority_class_made(cluster, f"{namespace}-high") as name:
        yield name


def test_gang_operator_uses_exactly_its_role(cluster, namespace, priority_class, kueue_crds):
    """Volcano chosen by `--gang-scheduler-name auto` (CRD list, the CRD check), the dry-run pod probe,
    the PriorityClass informer, the PodGroup created, patched and deleted; and what explains a waiting
    gang (tfop/runtime/capacity.py): the nodes, the pods bound to them (cluster-wide), Volcano's
    Queues, Kueue's Workloads and LocalQueues (served: kueue_crds), each listed and watched.
    The `kubernetes` backend's is in test_native_gang (its control plane)."""
    if AUTO_PICKS not in cluster.state.get("schedulers", []):
        pytest.skip(f"session cluster runs without {AUTO_PICKS} (see TFOP_E2E_SCHEDULERS)")
    assert_gang_operator_exact(cluster, namespace, AUTO_PICKS, VOLCANO, priority_class)


def test_plain_operator_uses_exactly_its_role(cluster, namespace):
    """Gang scheduling off: the base role, no PriorityClass or CRD reads."""
    op = AuditedOperator(cluster, [namespace])
    env = Env(cluster, namespace, op)
    entries = run_audited(op, lambda audit: exercise(env, audit, "plain", None))
    rules = live_rules(env)
    assert rules == rbac.operator_rules(None)
    assert_role_exact(entries, rules, rbac.NAME)
