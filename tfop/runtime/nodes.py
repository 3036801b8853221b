"""The nodes a job's pods are on, for whether Kubernetes says they are gone (tfop/api/nodes.py).

The node informer is the capacity view's (tfop/runtime/capacity.py), with a gang backend; without
one the operator's role grants no node reads, and a lost node is known by the taint manager's
DisruptionTarget on the pod (tolerationSeconds after the loss: 300 s by default). A node's status
is written by its kubelet every few seconds to minutes; of it only Ready's status, since when, and
the taints say whether its pods are lost, so only a change of those (or the node's deletion) wakes
the jobs with pods on it.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from tfop.api.nodes import NOT_READY, OUT_OF_SERVICE, UNREACHABLE
from tfop.kube.informer import Informer

WATCHED_TAINTS = (NOT_READY, UNREACHABLE, OUT_OF_SERVICE)


def health_of(node: Mapping[str, Any]) -> tuple:
    return (node.get("readyStatus"), node.get("readySince"), tuple(node.get("taints") or ()))


def unwell(node: Mapping[str, Any]) -> bool:
    return node.get("readyStatus") != "True" or any(t[0] in WATCHED_TAINTS for t in node.get("taints") or ())


class NodeHealth:
    def __init__(self, on_change: Callable[[str], None]):
        self.on_change = on_change  # told a node's name when its health changed
        self._seen: dict[str, tuple] = {}  # node name -> health_of(node) last told
        self.informer: Informer | None = None

    def watch(self, informer: Informer | None) -> None:
        """Read the nodes from `informer`, whose on_event is node_event: the capacity view's. None (no gang
        backend, whose role grants no node reads): a lost node is known by the pod's own conditions only."""
        self.informer = informer

    def node_event(self, event: str, node: Mapping[str, Any]) -> None:
        """An informer's on_event for nodes kept by tfop.runtime.trim.trim_node."""
        name = node["metadata"]["name"]
        if event == "DELETED":
            self._seen.pop(name, None)
            self.on_change(name)
            return
        health = health_of(node)
        if self._seen.get(name) != health:
            known = name in self._seen
            self._seen[name] = health
            # A node first seen (the first list) wakes its jobs only when unwell: their passes may have
            # run before nodes could be read.
            if known or unwell(node):
                self.on_change(name)

    def nodes_of(self, job_pods: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any] | None] | None:
        """Observed.nodes: the nodes the pods are on (None for one deleted); None while nodes are unknown."""
        informer = self.informer
        if informer is None or not informer.synced.is_set() or informer.denied is not None:
            return None
        names = {n for p in job_pods if (n := (p.get("spec") or {}).get("nodeName"))}
        return {n: informer.get("", n) for n in names}


def wake_jobs_on(node: str, pods: Iterable[Mapping[str, Any]], key_of: Callable[[Mapping[str, Any]], Any],
                 wake: Callable[[Any], None]) -> None:
    """A pass for each job with a pod on `node`. Node health changes are rare, so a look over every pod
    kept costs little."""
    for key in {key for pod in pods if (pod.get("spec") or {}).get("nodeName") == node and (key := key_of(pod))}:
        wake(key)
