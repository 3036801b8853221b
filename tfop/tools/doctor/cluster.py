"""The few API calls `tfop doctor` makes, behind one object (tests fake it), over tfop's one client."""
from __future__ import annotations

from tfop.api.constants import GROUP, KUEUE_API, PLURAL
from tfop.kube.blocking import ApiError, BlockingClient
from tfop.runtime import discovery

# Reasons kube-scheduler and its forks report on the pods they place or cannot place.
SCHEDULER_REASONS = ("Scheduled", "FailedScheduling")
# Events read of each reason: enough to find a scheduler by name, never the whole history.
MOST_EVENTS = 500


class Cluster:
    def __init__(self, api: BlockingClient):
        self.api = api
        self._crd_names: set[str] | None = None
        self._tfjobs: list[dict] | None = None

    def crd_names(self) -> set[str]:
        """Listed once: `auto` and the CRD checks of one doctor run read the same listing."""
        if self._crd_names is None:
            self._crd_names = self.api.call(discovery.crd_names)
        return set(self._crd_names)

    def gang_apis(self) -> set[str]:
        """What `auto` picks a backend from: the CRDs, and the built-in gang APIs discovery lists."""
        return self.crd_names() | self.api.call(discovery.served_group_apis)

    def served(self, api_version: str, plural: str) -> bool:
        return self.api.call(discovery.served, api_version, plural)

    def keeps_scheduling_group(self, namespace: str) -> bool:
        return self.api.call(discovery.keeps_scheduling_group, namespace)

    def allowed(self, user: str, groups: list[str], group: str, resource: str, verb: str) -> bool:
        res, _, sub = resource.partition("/")
        attributes = {"group": group, "resource": res, "verb": verb, **({"subresource": sub} if sub else {})}
        review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "metadata": {},
                  "spec": {"user": user, "groups": groups, "resourceAttributes": attributes}}
        answer = self.api.create(review, "subjectaccessreviews") or {}
        return bool((answer.get("status") or {}).get("allowed"))

    def leases(self) -> list[dict]:
        return self.api.list("coordination.k8s.io/v1", "leases")

    def tfjobs(self) -> list[dict]:
        """Listed once: the lost-node and Kueue checks read the same listing."""
        if self._tfjobs is None:
            self._tfjobs = self.api.list(f"{GROUP}/v1", PLURAL)
        return self._tfjobs

    def serves_workloads(self) -> bool:
        """Is Kueue's Workload API served, at the version the operator reads?"""
        return self.served(KUEUE_API, "workloads")

    def workloads(self, namespace: str) -> list[dict]:
        return self.api.list(KUEUE_API, "workloads", namespace)

    def kueue_config(self, namespace: str, name: str, key: str) -> str | None:
        """Kueue's Configuration as its ConfigMap holds it; None when absent or not readable."""
        try:
            config_map = self.api.get("v1", "configmaps", namespace, name)
        except ApiError as err:
            if err.status != 403:
                raise
            return None
        return ((config_map or {}).get("data") or {}).get(key)

    def running_pods(self) -> list[dict]:
        return self.api.list("v1", "pods", field_selector="status.phase=Running")

    def scheduler_events(self) -> list[dict]:
        out: list[dict] = []
        for reason in SCHEDULER_REASONS:
            out += self.api.list("v1", "events", field_selector=f"reason={reason}", most=MOST_EVENTS)
        return out

    def roles_bound_to(self, namespace: str, name: str) -> list[str]:
        out = []
        for binding in self.api.list("rbac.authorization.k8s.io/v1", "clusterrolebindings"):
            for s in binding.get("subjects") or []:
                if s.get("kind") == "ServiceAccount" and s.get("name") == name and s.get("namespace") == namespace:
                    out.append(binding["roleRef"]["name"])
        return out

    def deployment(self, namespace: str, name: str) -> dict | None:
        return self.api.get("apps/v1", "deployments", namespace, name)

    def pods(self, namespace: str, selector: str) -> list[dict]:
        return self.api.list("v1", "pods", namespace, label_selector=selector)

    def lease(self, namespace: str, name: str) -> dict | None:
        return self.api.get("coordination.k8s.io/v1", "leases", namespace, name)
