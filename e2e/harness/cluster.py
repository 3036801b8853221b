"""A real local Kubernetes control plane as plain processes on 127.0.0.1.

etcd, kube-apiserver (RBAC), kube-controller-manager, kube-scheduler, kwok
(fake GPU nodes) and batch schedulers (scheduler-plugins Coscheduling,
Volcano, Koordinator; YuniKorn, Volcano's admission webhook and Kueue on
request), all built by e2e.build.

    python -m e2e.cluster up [--dir DIR] [--gpu-nodes N] [--gpus-per-node G]
                             [--schedulers default,coscheduling,volcano,koordinator]
                             [--kubernetes 1.30|1.37]
    python -m e2e.cluster status|down [--dir DIR]
    python -m e2e.cluster restart --component NAME [--dir DIR]
"""

from __future__ import annotations

import argparse
import atexit
import base64
import ctypes
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import yaml

from e2e import build
from e2e.harness import kwok_stages, pki, realnode

ALL_SCHEDULERS = ("default", "coscheduling", "volcano", "koordinator")  # the default set
# Opt-in: YuniKorn's web port (9080) is fixed, so only one YuniKorn cluster per machine; Volcano's
# admission webhook (needs "volcano") registers cluster-wide webhook configurations that every
# pod create of the cluster then goes through.
# Kueue (not a scheduler: quota admission of TFJobs) likewise registers cluster-wide webhooks,
# on every TFJob create and update.
KNOWN_SCHEDULERS = ALL_SCHEDULERS + ("yunikorn", "volcano-webhook", "kueue")
NODE_LABEL = "tfop.test/node"  # value "fake-gpu" on every fake node
NODE_LABEL_VALUE = "fake-gpu"
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"  # kwok manages nodes with value "fake"
# A lost node's value of KWOK_NODE_ANNOTATION (Cluster.lose_node): out of kwok's selector.
KWOK_LOST_NODE_VALUE = "lost"
# The taint the node lifecycle controller puts on a node it stopped hearing from (NoSchedule and
# NoExecute), and the one an admin puts on a node known to be down (PodGC then force-deletes its
# terminating pods).
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
OUT_OF_SERVICE_TAINT = "node.kubernetes.io/out-of-service"
COSCHEDULING_SCHEDULER_NAME = "scheduler-plugins-scheduler"
VOLCANO_SCHEDULER_NAME = "volcano"
YUNIKORN_SCHEDULER_NAME = "yunikorn"
KOORDINATOR_SCHEDULER_NAME = "koord-scheduler"
YUNIKORN_NAMESPACE = "yunikorn"
YUNIKORN_WEB_PORT = 9080  # hard-coded in yunikorn-core: one YuniKorn cluster per machine
# What the harness enables of vc-webhook-manager: the pod validation (the webhook that once
# refused pods of a Pending PodGroup) and the PodGroup validation, where Volcano moved its queue
# check (volcano-sh/volcano#4132). Upstream's chart names each configuration
# volcano-admission-service-<path with / as ->; the manager polls for them, then serves.
VOLCANO_ADMISSIONS = ("/pods/validate", "/podgroups/validate")
# The health check of vc-webhook-manager, which has no health URL: a dry-run pod it must deny.
VOLCANO_WEBHOOK_PROBE = "probe:volcano-webhook-denies"
# Kueue's manager with only its kubeflow.org/tfjob integration. Of the webhooks in its module's
# manifest the harness registers those of that integration and of Kueue's own API group, never
# the pod/deployment/job/... ones: they would go through every pod the cluster creates.
KUEUE_NAMESPACE = "kueue-system"
KUEUE_FRAMEWORK = "kubeflow.org/tfjob"
KUEUE_WEBHOOK_PATHS = ("-kubeflow-org-v1-tfjob", "-kueue-x-k8s-io-")
TFJOB_CRD = Path(__file__).resolve().parents[2] / "crds" / "kubeflow.org_tfjobs.yaml"
GPU_RESOURCE = "nvidia.com/gpu"
# Optional control planes besides the harness's own (the `kubernetes` component): version ->
# build component, whose binaries are named <binary>-<version>. Only apiserver, controller
# manager and kube-scheduler; kubectl, etcd and kwok stay the harness's own.
# 1.37: native gang scheduling (Workload API, scheduling.k8s.io/v1beta1 PodGroup), off by default
# there, so enabled in all three: with the scheduler's gate on but v1beta1 not served, the
# scheduler schedules no pod at all.
# 1.30: the oldest release tfop supports (e2e/tests/test_kubernetes_versions.py): it takes every
# flag the harness gives its own 1.34 (found by starting it); only 1.37 gets NATIVE_GANG_FLAGS.
KUBERNETES_VERSIONS = {"1.30": "kubernetes-1.30", "1.37": "kubernetes-1.37"}
NATIVE_GANG_FLAGS = {
    "kube-apiserver": ["--runtime-config=scheduling.k8s.io/v1beta1=true", "--feature-gates=GenericWorkload=true"],
    "kube-controller-manager": ["--feature-gates=GenericWorkload=true"],  # podgroup-protection's finalizer
    "kube-scheduler": ["--feature-gates=GenericWorkload=true"],
}
SERVICE_CIDR = "10.0.0.0/24"
# On top of the apiserver's default plugins. OwnerReferencesPermissionEnforcement (on in
# OpenShift): setting blockOwnerDeletion on a child needs `update` on its owner's finalizers,
# so every test proves the operator's ClusterRole grants it.
# NodeRestriction (on in every real cluster): a kubelet writes only its own Node and its pods.
EXTRA_ADMISSION_PLUGINS = ("OwnerReferencesPermissionEnforcement", "NodeRestriction")
# The apiserver's identity towards kubelets (logs, exec), allowed by the kubelets' webhook
# authorization through this binding, as kubeadm sets it up.
KUBELET_API_CLIENT = "kube-apiserver-kubelet-client"
# A probe instead of an HTTP health URL: containerd answers on its socket.
CONTAINERD_PROBE = "probe:containerd"
REAL_NODE_COMPONENTS = ("containerd", "coredns", "kubelet", "kube-proxy")
# DIR/AUDIT_LOG: one JSON line per request of a ServiceAccount (Metadata level: who, verb,
# object, response code), so a test can compare what the operator did with what its role grants.
AUDIT_LOG = "audit.log"
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1", "kind": "Policy",
    "omitStages": ["RequestReceived"],  # each request once, when answered (watches: when started)
    "rules": [
        # kube-controller-manager acts as ServiceAccounts of kube-system: not under test, and most
        # of the traffic.
        {"level": "None", "userGroups": ["system:serviceaccounts:kube-system"]},
        {"level": "Metadata", "userGroups": ["system:serviceaccounts"]},
        {"level": "None"},
    ],
}

# Volcano's enqueue step (overcommit and proportion) weighs a gang against the whole cluster and
# every gang admitted before it: tests that share this Volcano run one at a time (gang_helpers.Runner).
_VOLCANO_TIERS = """\
tiers:
- plugins:
  - name: priority
  - name: gang{gang_options}
  - name: conformance
- plugins:
  - name: overcommit
  - name: drf
  - name: predicates
  - name: proportion
  - name: nodeorder
"""


def real_node_images(node_images: tuple[str, ...]) -> tuple[str, ...]:
    """Every image a real node is given at its start: the pause image its pods' sandboxes run, then
    `node_images`."""
    return ("pause", *node_images)


def volcano_conf(actions: str = "enqueue, allocate, backfill", gang_options: str = "") -> str:
    """vc-scheduler's configuration: these actions, and these lines of the gang plugin's options."""
    return f'actions: "{actions}"\n' + _VOLCANO_TIERS.format(gang_options=gang_options)


VOLCANO_CONF = volcano_conf()


class ClusterError(RuntimeError):
    pass


class RealNodeUnavailable(ClusterError):
    """This machine cannot run a real node; the message says why in one line."""


def default_dir() -> Path:
    env = os.environ.get("TFOP_E2E_DIR")
    return Path(env) if env else Path(tempfile.gettempdir()) / f"tfop-e2e-{os.getuid()}"


def components_for(schedulers, kubernetes: str | None = None) -> list[str]:
    """Build components a cluster with these schedulers (and control plane version) needs."""
    comps = ["kubernetes", "etcd", "kwok"] + ([KUBERNETES_VERSIONS[kubernetes]] if kubernetes else [])
    # volcano-webhook: the volcano component's second binary
    extra = {"coscheduling": "scheduler-plugins", "volcano": "volcano", "yunikorn": "yunikorn",
             "koordinator": "koordinator", "kueue": "kueue"}
    return comps + [extra[s] for s in schedulers if s in extra]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    # Linux: the child gets SIGKILL when the Python process that started it
    # dies, even by SIGKILL, so a crashed test session leaves nothing behind.
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _kubeconfig(server: str, ca: Path, user: dict) -> str:
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "tfop-e2e", "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": "user", "user": user}],
        "contexts": [{"name": "tfop-e2e", "context": {"cluster": "tfop-e2e", "user": "user"}}],
        "current-context": "tfop-e2e",
    })


class Cluster:
    """Handle on a cluster directory. State lives in DIR/state.json, so a
    second process (e.g. `python -m e2e.cluster down`) can attach to it."""

    def __init__(self, dir: Path):
        self.dir = Path(dir).resolve()
        self.kubeconfig = self.dir / "kubeconfig"
        self.logs = self.dir / "logs"
        self.pki = self.dir / "pki"
        self.state: dict = {}
        self._procs: dict[str, subprocess.Popen] = {}
        sf = self.dir / "state.json"
        if sf.exists():
            self.state = json.loads(sf.read_text())

    # ---------- public API ----------

    @property
    def server(self) -> str:
        return self.state["server"]

    @classmethod
    def attach(cls, dir: Path | str | None = None) -> "Cluster":
        c = cls(Path(dir) if dir else default_dir())
        if not c.state:
            raise ClusterError(f"no cluster state in {c.dir}")
        return c

    @classmethod
    def up(cls, dir: Path | str | None = None, *, gpu_nodes: int = 4, gpus_per_node: int = 1,
           schedulers: tuple[str, ...] | list[str] = ALL_SCHEDULERS, build_missing: bool = True,
           stop_on_exit: bool = True, timeout: float = 120, scheduler_qps: int | None = None,
           real_nodes: int = 0, node_images: tuple[str, ...] = ("tf",),
           kubernetes: str | None = None, node_monitor_grace_period: float | None = None) -> "Cluster":
        """Start everything and wait until usable. With stop_on_exit (the
        default for Python callers) the processes die with this interpreter.
        real_nodes (0 or 1): a node backed by a real kubelet and containerd (e2e.realnode),
        with the e2e.images `node_images` (and the pause image) imported into its containerd.
        scheduler_qps: the client QPS (burst twice that) of kube-scheduler, the
        scheduler-plugins scheduler and controller, and kube-controller-manager instead
        of their defaults (50, burst 100; the scheduler-plugins controller 5, burst 10;
        kube-controller-manager 20, burst 30).
        kubernetes: None (the harness's own version) or a key of KUBERNETES_VERSIONS ("1.37":
        native gang scheduling on; "1.30": the oldest supported release; kube-scheduler only, no
        real node).
        node_monitor_grace_period: seconds kube-controller-manager waits for a node's heartbeat
        before it marks the node Ready Unknown (its default, 50 s, otherwise): a shorter one makes
        a node lost with lose_node() go Unknown sooner. kwok renews a lease every 10 s, so keep it
        above 15."""
        if kubernetes is not None and kubernetes not in KUBERNETES_VERSIONS:
            raise ClusterError(f"kubernetes={kubernetes!r}: None (the harness's own) or one of "
                               f"{list(KUBERNETES_VERSIONS)}")
        if kubernetes and set(schedulers) != {"default"}:
            # The batch schedulers are built against the harness's Kubernetes, and the point of
            # this control plane is kube-scheduler's own gang scheduling.
            raise ClusterError(f"kubernetes={kubernetes!r} runs exactly the default scheduler (kube-scheduler); "
                               f"schedulers={sorted(schedulers)}")
        if kubernetes and real_nodes:
            raise ClusterError(f"kubernetes={kubernetes!r} has no real nodes (its kubelet is not built)")
        unknown = set(schedulers) - set(KNOWN_SCHEDULERS)
        if unknown:
            raise ClusterError(f"unknown schedulers {sorted(unknown)}; known: {KNOWN_SCHEDULERS}")
        if "volcano-webhook" in schedulers and "volcano" not in schedulers:
            raise ClusterError("volcano-webhook needs volcano (its CRDs and open queues)")
        if real_nodes not in (0, 1):
            raise ClusterError(f"real_nodes={real_nodes}: one real node per machine (its bridge, cgroups and "
                               f"port {realnode.KUBELET_PORT} are the machine's)")
        if real_nodes and (reason := realnode.unavailable_reason()):
            raise RealNodeUnavailable(reason)
        c = cls(Path(dir) if dir else default_dir())
        if any(c.alive_components().values()):
            raise ClusterError(f"a cluster is already running in {c.dir}; run `down` first")
        if build_missing:
            build.ensure(components_for(schedulers, kubernetes) + (["coredns"] if real_nodes else []))
        c._stop_on_exit = stop_on_exit
        if stop_on_exit:
            atexit.register(c.down)
            _install_sigterm_handler()
        for attempt in (1, 2):
            try:
                if real_nodes:  # the apiserver listens on the bridge's address, for the pods
                    c._claim_real_node(realnode.PATHS)
                    realnode.make_bridge()
                c._start(list(schedulers), gpu_nodes, gpus_per_node, timeout, scheduler_qps,
                         address=realnode.NODE_IP if real_nodes else "127.0.0.1", kubernetes=kubernetes,
                         node_monitor_grace_period=node_monitor_grace_period)
                if real_nodes:
                    c._start_real_node(tuple(node_images), timeout, tainted=gpu_nodes > 0)
                return c
            except ClusterError as e:
                c.down(keep_dir=True)  # keep logs/ for a post-mortem
                # Ports are picked free but only bound later by the component:
                # another process may grab one in between. Retry that once.
                if attempt == 2 or "address already in use" not in str(e):
                    raise
            except BaseException:
                c.down(keep_dir=True)
                raise
        return c

    def down(self, keep_dir: bool = False) -> None:
        """Stop every recorded process group (SIGTERM, then SIGKILL) and remove state."""
        _kill_groups([pid for pid in self.state.get("pids", {}).values()], self.dir)
        for p in self._procs.values():
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        self._procs.clear()
        self.state["pids"] = {}
        if self._owns_real_node():
            realnode.teardown()
        if keep_dir or not self.dir.exists():
            return
        # Only delete what we created (the dir may be user-chosen). TFOP_E2E_KEEP_LOGS=1 keeps the
        # components' logs and the audit log, to read why a test failed.
        keep_logs = os.environ.get("TFOP_E2E_KEEP_LOGS") == "1"
        for sub in ("etcd", "pki", "kubeconfigs", "sa-kubeconfigs") + (() if keep_logs else ("logs",)):
            _rmtree(self.dir / sub)
        for f in ("state.json", "kubeconfig", "kwok.yaml", "volcano.conf", "coscheduling.yaml", "kube-scheduler.yaml",
                  "koordinator.yaml", "kueue.yaml", "audit-policy.yaml") + (() if keep_logs else (AUDIT_LOG,)):
            (self.dir / f).unlink(missing_ok=True)
        try:
            self.dir.rmdir()
        except OSError:
            pass
        self.state = {}

    def alive_components(self) -> dict[str, bool]:
        """Every component started, in start order: is its process running?"""
        pids = self.state.get("pids", {})
        names = list(self.state.get("components", {})) or list(pids)
        return {n: n in pids and _pid_alive(pids[n], self.dir) for n in names}

    # ---------- what the apiserver saw ----------

    def apiserver_metrics(self, names: tuple[str, ...] | None = None) -> list:
        """GET /metrics as admin, parsed: prometheus_client Metric families, only those in
        `names` if given (parsing all 2 MB takes about 2 s here). The counters start again
        from zero whenever the apiserver restarts."""
        from prometheus_client.parser import text_string_to_metric_families

        with urllib.request.urlopen(f"{self.server}/metrics", timeout=10, context=self._admin_tls()) as r:
            text = r.read().decode()
        if names is not None:
            text = "".join(line for line in text.splitlines(keepends=True) if _in_families(line, names))
        return list(text_string_to_metric_families(text))

    def audit_offset(self) -> int:
        """The audit log's size now: audit_entries(since=this) reads only what comes after."""
        try:
            return (self.dir / AUDIT_LOG).stat().st_size
        except FileNotFoundError:
            return 0

    def audit_entries(self, since: int = 0) -> list[dict]:
        """The audit log's entries (ServiceAccounts outside kube-system: AUDIT_POLICY) from byte
        offset `since` on; a line still being written is left out. The log survives restarts
        of the apiserver, which appends to it and writes each entry before it answers."""
        try:
            with open(self.dir / AUDIT_LOG, "rb") as f:
                f.seek(since)
                chunk = f.read()
        except FileNotFoundError:
            return []
        return [json.loads(line) for line in chunk[:chunk.rfind(b"\n") + 1].splitlines() if line.strip()]

    # ---------- restarts ----------

    def stop_component(self, name: str, grace: float = 10.0) -> None:
        """Stop one component's process group: SIGTERM, then SIGKILL after `grace` s. Its
        command, ports and data stay recorded for start_component()."""
        self._component(name)
        proc, pid = self._procs.pop(name, None), self.state["pids"].pop(name, None)
        if pid is not None:
            _kill_groups([pid], self.dir, grace)
        if proc is not None:
            proc.wait(timeout=5)  # _kill_groups may have reaped it already: then this returns at once
        self._save()

    def start_component(self, name: str, timeout: float = 60) -> int:
        """Start a stopped component again with the same command line, environment, ports
        and data dir, and wait until it is healthy by the check it passed at start. After
        etcd, also until the apiserver's /readyz is OK again. Returns the new pid."""
        self._component(name)
        if self.alive_components().get(name):
            raise ClusterError(f"{name} is running (pid {self.state['pids'][name]}): stop it first")
        with open(self.logs / f"{name}.log", "ab") as log:  # where one run ends in the log
            log.write(f"\n===== e2e.cluster: {name} started again at {time.strftime('%H:%M:%S')} =====\n".encode())
        kwok_nodes = self._release_kwok_nodes() if name == "kwok" else []
        self._launch(name)
        self._wait_healthy(name, timeout)
        if name == "etcd" and self.alive_components().get("kube-apiserver"):
            self._wait_healthy("kube-apiserver", timeout)
        if kwok_nodes:
            def leased() -> bool:
                leases = json.loads(self.kubectl("get", "leases", "-n", "kube-node-lease", "-o", "json").stdout)
                return set(kwok_nodes) <= {lease["metadata"]["name"] for lease in leases["items"]}
            self._wait("kwok leasing its nodes again", leased, timeout, name)
        return self.state["pids"][name]

    def _release_kwok_nodes(self) -> list[str]:
        """Delete the node Leases the stopped kwok held, so that the new one (another identity:
        hostname + a random id) takes its nodes at once instead of after the lease duration
        (40 s), as a restarted kubelet renews its own lease. Returns those nodes' names."""
        got = self.kubectl("get", "nodes", "-o", "json", check=False)
        if got.returncode != 0:  # no apiserver: nothing to release, kwok waits for it anyway
            return []
        nodes = [n["metadata"]["name"] for n in json.loads(got.stdout)["items"]
                 if (n["metadata"].get("annotations") or {}).get(KWOK_NODE_ANNOTATION) == "fake"]
        if nodes:
            self.kubectl("delete", "leases", "-n", "kube-node-lease", "--ignore-not-found", *nodes)
        return nodes

    def restart(self, name: str, *, grace: float = 10.0, timeout: float = 60) -> int:
        """stop_component() then start_component(): the same process, in place. Returns the new pid."""
        self.stop_component(name, grace)
        return self.start_component(name, timeout)

    # ---------- lost nodes ----------

    def lose_node(self, name: str) -> None:
        """Make kwok node `name` lost, as a machine that died or was cut off behaves: nothing
        renews its Lease in kube-node-lease any more and nothing completes its pods' deletions
        (they stay Terminating). kube-controller-manager's node lifecycle controller then marks
        its Ready condition Unknown after --node-monitor-grace-period (see Cluster.up) and taints
        it node.kubernetes.io/unreachable; wait_node_lost() waits for that. The node object and
        its pods stay. Returns once kwok runs again for the other nodes.

        How: the node's kwok.x-k8s.io/node annotation leaves kwok's selector, then kwok is
        restarted, since a running kwok keeps renewing the lease of a node it once took."""
        self._set_kwok_management(name, KWOK_LOST_NODE_VALUE)

    def recover_node(self, name: str, *, wait: bool = True, timeout: float = 60) -> None:
        """Undo lose_node(): kwok manages node `name` again (its lease renewed, its Ready condition
        True, its pods' pending deletions completed), and the node lifecycle controller removes
        its unreachable taints. With `wait`, returns once the node is Ready without them. Taints
        an admin added (node.kubernetes.io/out-of-service) are left for the caller to remove."""
        self._set_kwok_management(name, "fake")
        if wait:
            self._wait_node(name, f"Ready again, without the {UNREACHABLE_TAINT} taint", _node_recovered, timeout)

    def wait_node_lost(self, name: str, timeout: float | None = None) -> dict:
        """Wait until the node lifecycle controller has marked node `name` Ready Unknown and
        tainted it unreachable (NoSchedule and NoExecute); returns the node. Default timeout: the
        grace period (the cluster's, or 50 s) plus 30 s."""
        grace = self.state.get("node_monitor_grace_period") or 50
        return self._wait_node(name, f"Ready Unknown and tainted {UNREACHABLE_TAINT}", _node_lost,
                               timeout if timeout is not None else grace + 30)

    def _wait_node(self, name: str, what: str, pred, timeout: float) -> dict:
        """Wait until pred(node) holds; on timeout the error shows the node's Ready condition and taints."""
        seen: dict = {}

        def holds() -> bool:
            seen["node"] = self._node(name)
            return pred(seen["node"])
        try:
            self._wait(f"node {name} {what}", holds, timeout, "kube-controller-manager")
        except ClusterError as e:
            node = seen.get("node") or {}
            raise ClusterError(f"{e}\nnode {name} last seen: Ready {_ready_status(node)}, taints "
                               f"{node.get('spec', {}).get('taints')}") from None
        return seen["node"]

    def _set_kwok_management(self, name: str, value: str) -> None:
        """Set node `name`'s kwok.x-k8s.io/node annotation to `value` ("fake": kwok's, anything
        else: nobody's) and restart kwok, which reads its nodes anew only at start."""
        annotations = (self._node(name)["metadata"].get("annotations") or {})
        if annotations.get(KWOK_NODE_ANNOTATION) not in ("fake", KWOK_LOST_NODE_VALUE):
            raise ClusterError(f"node {name} is not a kwok node ({KWOK_NODE_ANNOTATION}: "
                               f"{annotations.get(KWOK_NODE_ANNOTATION)!r})")
        self.kubectl("annotate", "node", name, "--overwrite", f"{KWOK_NODE_ANNOTATION}={value}")
        self.restart("kwok")

    # ---------- the real node's kubelet ----------

    def stop_kubelet(self) -> None:
        """Stop the real node's kubelet for good, as one that crashed: its pods' containers keep
        running under containerd, but nothing renews the node's Lease or reports its pods, so the
        node lifecycle controller marks its Ready condition Unknown after --node-monitor-grace-period.
        Alone in its cluster, the node may then get the unreachable NoSchedule taint only: with every
        node down the controller is in full disruption and adds no NoExecute taint, which
        wait_node_lost() waits for. start_kubelet() brings it back."""
        if not self.state.get("real_nodes"):
            raise ClusterError("this cluster has no real node")
        self.stop_component("kubelet")

    def start_kubelet(self, timeout: float = 90) -> None:
        """Start the real node's kubelet again (the same command line, root dir and certificates)
        and wait until the node is Ready without the unreachable taint. It takes up the containers
        it finds and ends those of pods deleted while it was away."""
        self.start_component("kubelet", timeout)
        self._wait_node(realnode.NODE_NAME, f"Ready again, without the {UNREACHABLE_TAINT} taint", _node_recovered,
                        timeout)

    def _node(self, name: str) -> dict:
        return json.loads(self.kubectl("get", "node", name, "-o", "json").stdout)

    def _component(self, name: str) -> dict:
        known = self.state.get("components", {})
        if name not in known:
            raise ClusterError(f"no component {name!r} in this cluster; it has {sorted(known)}")
        return known[name]

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                kubeconfig: Path | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
        cmd = [str(build.binary("kubectl")), "--kubeconfig", str(kubeconfig or self.kubeconfig), *args]
        p = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=timeout)
        if check and p.returncode != 0:
            raise ClusterError(f"kubectl {' '.join(args)} failed ({p.returncode}): {p.stderr.strip()}")
        return p

    def apply(self, obj: dict | list | str) -> None:
        text = obj if isinstance(obj, str) else yaml.safe_dump_all(obj if isinstance(obj, list) else [obj])
        self.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=text)

    def add_gpu_nodes(self, n: int, gpus: int = 1, *, wait: bool = True) -> list[str]:
        """Create n fake nodes (cpu 32, memory 256Gi, pods 110, nvidia.com/gpu
        = gpus) managed by kwok; returns their names."""
        if self.state.get("real_nodes") and not self.state.get("real_node_tainted"):
            raise ClusterError("this cluster's real node is not tainted (it was started alone): kwok tests' pods "
                               "would land on it; start the cluster with gpu_nodes > 0")
        start = self.state.get("next_node", 0)
        names = [f"tfop-gpu-{i}" for i in range(start, start + n)]
        alloc = {"cpu": "32", "memory": "256Gi", "pods": "110", GPU_RESOURCE: str(gpus)}
        self.apply([{
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {KWOK_NODE_ANNOTATION: "fake"},
                         "labels": {NODE_LABEL: NODE_LABEL_VALUE, "type": "kwok",
                                    "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                    "kubernetes.io/arch": "amd64"}},
            "status": {"capacity": alloc, "allocatable": alloc},
        } for name in names])
        # Server-side apply ignores status on create for some versions; make sure.
        for name in names:
            self.kubectl("patch", "node", name, "--subresource=status", "--type=merge",
                         "-p", json.dumps({"status": {"capacity": alloc, "allocatable": alloc}}))
        self.state["next_node"] = start + n
        self._save()
        if wait:
            for name in names:
                self._wait(f"node {name} Ready", lambda nm=name: self._node_ready(nm), 60, "kwok")
        return names

    def remove_node(self, name: str) -> None:
        self.kubectl("delete", "node", name, "--wait=true")

    def logs_tail(self, component: str | None = None, lines: int = 30) -> str:
        names = [component] if component else sorted(p.stem for p in self.logs.glob("*.log"))
        out = []
        for n in names:
            f = self.logs / f"{n}.log"
            if f.exists():
                tail = f.read_text(errors="replace").splitlines()[-lines:]
                out.append(f"==> {f} <==\n" + "\n".join(tail))
        return "\n".join(out)

    def service_account_kubeconfig(self, namespace: str, name: str, duration: str = "24h") -> Path:
        """Kubeconfig authenticating as ServiceAccount namespace/name, with a
        token from the TokenRequest API. Creates the ServiceAccount if missing."""
        self.apply({"apiVersion": "v1", "kind": "ServiceAccount",
                    "metadata": {"name": name, "namespace": namespace}})
        token = self.kubectl("create", "token", name, "-n", namespace, f"--duration={duration}").stdout.strip()
        d = self.dir / "sa-kubeconfigs"
        d.mkdir(exist_ok=True)
        path = d / f"{namespace}.{name}.kubeconfig"
        path.write_text(_kubeconfig(self.server, self.pki / "ca.crt", {"token": token}))
        path.chmod(0o600)
        return path

    # ---------- start-up ----------

    def _start(self, schedulers: list[str], gpu_nodes: int, gpus: int, timeout: float,
               scheduler_qps: int | None = None, address: str = "127.0.0.1",
               kubernetes: str | None = None, node_monitor_grace_period: float | None = None) -> None:
        """The control plane; the apiserver on `address` (a real node's pods reach it there)."""
        for sub in ("etcd", "pki", "kubeconfigs", "sa-kubeconfigs"):  # stale state of a crashed run
            _rmtree(self.dir / sub)
        (self.dir / AUDIT_LOG).unlink(missing_ok=True)  # the apiserver appends: no earlier cluster's lines
        for sub in ("logs", "kubeconfigs", "etcd"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        ports = {k: free_port() for k in ("etcd", "etcd_peer", "apiserver", "kcm", "scheduler", "kwok",
                                          "cosched", "cosched_ctrl_metrics", "cosched_ctrl_probe",
                                          "volcano_metrics", "volcano_healthz", "volcano_webhook",
                                          "koord", "kueue_webhook", "kueue_metrics", "kueue_health",
                                          "kubelet_healthz", "coredns_health", "coredns_ready",
                                          "kube_proxy_healthz", "kube_proxy_metrics")}
        server = f"https://{address}:{ports['apiserver']}"
        self.state = {"server": server, "ports": ports, "schedulers": schedulers, "pids": {},
                      "next_node": 0, "scheduler_qps": scheduler_qps, "kubernetes": kubernetes,
                      "node_monitor_grace_period": node_monitor_grace_period}
        self._save()
        self._make_pki(server)
        d, p, kc = self.dir, ports, self.dir / "kubeconfigs"
        etcd_url = f"http://127.0.0.1:{p['etcd']}"

        self._spawn("etcd", [
            build.binary("etcd"), "--data-dir", d / "etcd", "--name", "tfop-e2e",
            "--listen-client-urls", etcd_url, "--advertise-client-urls", etcd_url,
            "--listen-peer-urls", f"http://127.0.0.1:{p['etcd_peer']}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{p['etcd_peer']}",
            "--initial-cluster", f"tfop-e2e=http://127.0.0.1:{p['etcd_peer']}",
            "--unsafe-no-fsync", "--log-level", "warn"], health=f"{etcd_url}/health")
        self._wait_healthy("etcd", timeout)

        pk = self.pki
        (d / "audit-policy.yaml").write_text(yaml.safe_dump(AUDIT_POLICY, sort_keys=False))
        self._spawn("kube-apiserver", [
            self._control_plane_binary("kube-apiserver"), *self._version_flags("kube-apiserver"),
            "--etcd-servers", etcd_url,
            "--bind-address", address, "--advertise-address", address,
            "--secure-port", p["apiserver"],
            "--tls-cert-file", pk / "apiserver.crt", "--tls-private-key-file", pk / "apiserver.key",
            "--client-ca-file", pk / "ca.crt", "--authorization-mode", "Node,RBAC",
            "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
            "--service-account-key-file", pk / "sa.pub",
            "--service-account-signing-key-file", pk / "sa.key",
            "--service-cluster-ip-range", SERVICE_CIDR, "--allow-privileged=true",
            # To kubelets (logs, exec) as a real cluster does: a client cert of our CA, their
            # serving certs checked against it, at the node's InternalIP.
            "--kubelet-client-certificate", pk / f"{KUBELET_API_CLIENT}.crt",
            "--kubelet-client-key", pk / f"{KUBELET_API_CLIENT}.key",
            "--kubelet-certificate-authority", pk / "ca.crt",
            "--kubelet-preferred-address-types", "InternalIP",
            # The `kubernetes` Service's endpoint is the apiserver's address, when pods can
            # reach it; never a loopback address (validation rejects it anyway).
            "--endpoint-reconciler-type", "none" if address.startswith("127.") else "lease",
            "--enable-admission-plugins", ",".join(EXTRA_ADMISSION_PLUGINS),
            "--audit-policy-file", d / "audit-policy.yaml", "--audit-log-path", d / AUDIT_LOG,
            "--audit-log-format", "json", "--audit-log-mode", "blocking",  # written before the answer
            "--audit-log-maxsize", "100000",  # MB; never rotated (default 100): readers keep byte offsets
            # /debug/pprof: what the apiserver spends its CPU on in a benchmark row (`go tool pprof`)
            "--enable-priority-and-fairness=false", "--profiling=true",
            # On SIGTERM: new requests answered 429 until those in flight are done, then out in
            # about 2 s (otherwise open watches hold the HTTP server's shutdown for 60 s).
            "--shutdown-send-retry-after=true"], health=f"{server}/readyz", admin=True)
        self._wait_healthy("kube-apiserver", timeout)

        def comp_kc(name: str) -> Path:
            return kc / f"{name}.kubeconfig"

        auth = lambda name: ["--authentication-kubeconfig", comp_kc(name),  # noqa: E731
                             "--authorization-kubeconfig", comp_kc(name)]
        self._spawn("kube-controller-manager", [
            self._control_plane_binary("kube-controller-manager"), *self._version_flags("kube-controller-manager"),
            "--kubeconfig", comp_kc("kube-controller-manager"),
            *auth("kube-controller-manager"),
            "--bind-address", "127.0.0.1", "--secure-port", p["kcm"], "--leader-elect=false",
            "--root-ca-file", pk / "ca.crt", "--service-account-private-key-file", pk / "sa.key",
            "--cluster-signing-cert-file", pk / "ca.crt", "--cluster-signing-key-file", pk / "ca.key",
            # each controller acts as its own ServiceAccount, as in a real cluster
            "--use-service-account-credentials=true", "--controllers=*", *self._kcm_client_flags(),
            *self._kcm_node_monitor_flags()],
            health=f"https://127.0.0.1:{p['kcm']}/healthz")
        self._wait_healthy("kube-controller-manager", timeout)

        if "default" in schedulers:
            self._start_kube_scheduler(comp_kc("kube-scheduler"), timeout)

        kwok_src = build.module_dir("kwok", "sigs.k8s.io/kwok")
        (d / "kwok.yaml").write_text(kwok_stages.stages_yaml(kwok_src))
        self._spawn("kwok", [
            build.binary("kwok"), "--kubeconfig", comp_kc("kwok"), "--config", d / "kwok.yaml",
            "--manage-all-nodes=false",
            "--manage-nodes-with-annotation-selector", f"{KWOK_NODE_ANNOTATION}=fake",
            "--cidr", "10.244.0.1/16", "--node-ip", "10.240.0.1",
            "--node-lease-duration-seconds", "40", "--server-address", f"127.0.0.1:{p['kwok']}"],
            health=f"http://127.0.0.1:{p['kwok']}/healthz")
        self._wait_healthy("kwok", timeout)

        if "coscheduling" in schedulers:
            self._start_coscheduling(timeout)
        if "volcano" in schedulers:
            self._start_volcano(timeout)
        if "yunikorn" in schedulers:
            self._start_yunikorn(timeout)
        if "koordinator" in schedulers:
            self._start_koordinator(timeout)

        if gpu_nodes:
            self.add_gpu_nodes(gpu_nodes, gpus)
        # Pods need the `default` ServiceAccount (ServiceAccount admission).
        self._wait("default ServiceAccount", lambda: self.kubectl(
            "get", "sa", "default", "-n", "default", check=False).returncode == 0,
            timeout, "kube-controller-manager")
        if "volcano-webhook" in schedulers:  # last: its readiness check creates a (dry-run) pod
            self._start_volcano_webhook(timeout)
        if "kueue" in schedulers:
            self._start_kueue(timeout)

    def _control_plane_binary(self, name: str) -> Path:
        """kube-apiserver, kube-controller-manager or kube-scheduler of this cluster's version."""
        version = self.state.get("kubernetes")
        return build.binary(f"{name}-{version}" if version else name)

    def _version_flags(self, name: str) -> list[str]:
        return NATIVE_GANG_FLAGS[name] if self.state.get("kubernetes") == "1.37" else []

    def _kcm_client_flags(self) -> list[str]:
        """kube-controller-manager's client QPS (default 20, burst 30) bounds its endpoints and
        namespace controllers: a benchmark row would otherwise share it with the previous row's
        deletions, so it is raised with the schedulers'."""
        qps = self.state.get("scheduler_qps")
        return ["--kube-api-qps", str(qps), "--kube-api-burst", str(2 * qps)] if qps else []

    def _kcm_node_monitor_flags(self) -> list[str]:
        grace = self.state.get("node_monitor_grace_period")
        return [f"--node-monitor-grace-period={grace:g}s"] if grace else []

    def _cosched_controller_client_flags(self) -> list[str]:
        """The scheduler-plugins controller writes each PodGroup's phase (Pending, Scheduling,
        Running) at client QPS 5, burst 10 by default: 400 gangs' phases then trail their pods by
        tens of seconds, and every job's status with them. Raised with the schedulers'."""
        qps = self.state.get("scheduler_qps")
        return ["--qps", str(qps), "--burst", str(2 * qps)] if qps else []

    def _client_connection(self, kubeconfig: Path) -> dict:
        """A KubeSchedulerConfiguration's clientConnection: the scheduler's client QPS (default 50,
        burst 100) bounds how fast it binds pods (a pods/binding request each), so a benchmark
        that measures the rest of the control plane raises it."""
        qps = self.state.get("scheduler_qps")
        return {"kubeconfig": str(kubeconfig), **({"qps": qps, "burst": 2 * qps} if qps else {})}

    def _start_kube_scheduler(self, kc: Path, timeout: float) -> None:
        p = self.state["ports"]
        auth = ["--authentication-kubeconfig", kc, "--authorization-kubeconfig", kc,
                "--bind-address", "127.0.0.1", "--secure-port", p["scheduler"]]
        binary, version_flags = self._control_plane_binary("kube-scheduler"), self._version_flags("kube-scheduler")
        if self.state.get("scheduler_qps") or self.state.get("kubernetes"):
            # The client QPS and the backoffs have no flag of their own (only in the configuration
            # file), and the deprecated --kubeconfig/--leader-elect flags are not mixed with a file.
            conf = {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
                    "leaderElection": {"leaderElect": False}, "clientConnection": self._client_connection(kc)}
            if self.state.get("kubernetes"):
                # A gang found unschedulable waits out its backoff (default up to 10 s) before the
                # next try, even once capacity is free: keep tests from waiting on that.
                conf.update(podInitialBackoffSeconds=1, podMaxBackoffSeconds=1)
            (self.dir / "kube-scheduler.yaml").write_text(yaml.safe_dump(conf))
            cmd = [binary, *version_flags, "--config", self.dir / "kube-scheduler.yaml", *auth]
        else:
            cmd = [binary, "--kubeconfig", kc, *auth, "--leader-elect=false"]
        self._spawn("kube-scheduler", cmd, health=f"https://127.0.0.1:{p['scheduler']}/healthz")
        self._wait_healthy("kube-scheduler", timeout)

    def _start_coscheduling(self, timeout: float) -> None:
        src = build.module_dir("scheduler-plugins", "sigs.k8s.io/scheduler-plugins")
        # PodGroup CRD (Coscheduling) + ElasticQuota CRD (the controller watches both).
        self._install_crds([src / "manifests/coscheduling/crd.yaml",
                            src / "manifests/capacityscheduling/crd.yaml"], timeout)
        kc, p = self.dir / "kubeconfigs" / "scheduler-plugins.kubeconfig", self.state["ports"]
        conf = {
            "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
            "leaderElection": {"leaderElect": False},
            "clientConnection": self._client_connection(kc),
            "profiles": [{
                "schedulerName": COSCHEDULING_SCHEDULER_NAME,
                "plugins": {
                    "multiPoint": {"enabled": [{"name": "Coscheduling"}]},
                    # Coscheduling must be the only queue sort of the profile.
                    "queueSort": {"enabled": [{"name": "Coscheduling"}], "disabled": [{"name": "*"}]},
                },
            }],
        }
        (self.dir / "coscheduling.yaml").write_text(yaml.safe_dump(conf))
        self._spawn("scheduler-plugins-scheduler", [
            build.binary("scheduler-plugins-scheduler"), "--config", self.dir / "coscheduling.yaml",
            "--authentication-kubeconfig", kc, "--authorization-kubeconfig", kc,
            "--bind-address", "127.0.0.1", "--secure-port", p["cosched"]],
            health=f"https://127.0.0.1:{p['cosched']}/healthz")
        # Scheduler defaults left as shipped: Coscheduling re-tries a rejected gang only when its
        # PodGroup changes (or after 5 min), which tfop's gang-retry touch must handle, as in production.
        self._wait_healthy("scheduler-plugins-scheduler", timeout)
        self._spawn("scheduler-plugins-controller", [
            build.binary("scheduler-plugins-controller"),
            "--metricsAddr", f"127.0.0.1:{p['cosched_ctrl_metrics']}",
            "--probeAddr", f"127.0.0.1:{p['cosched_ctrl_probe']}", *self._cosched_controller_client_flags()],
            env={"KUBECONFIG": str(kc)}, health=f"http://127.0.0.1:{p['cosched_ctrl_probe']}/healthz")
        self._wait_healthy("scheduler-plugins-controller", timeout)

    def _start_volcano(self, timeout: float) -> None:
        src = build.module_dir("volcano", "volcano.sh/volcano")
        self._install_crds(sorted((src / "config/crd/volcano/bases").glob("*.yaml")), timeout)
        (self.dir / "volcano.conf").write_text(VOLCANO_CONF)
        p = self.state["ports"]
        self._spawn("volcano-scheduler", [
            build.binary("vc-scheduler"), "--kubeconfig", self.dir / "kubeconfigs" / "volcano.kubeconfig",
            "--scheduler-conf", self.dir / "volcano.conf", "--scheduler-name", VOLCANO_SCHEDULER_NAME,
            "--leader-elect=false", "--cache-dumper=false", "--schedule-period", "500ms",
            "--listen-address", f"127.0.0.1:{p['volcano_metrics']}",
            "--enable-healthz", "--healthz-address", f"127.0.0.1:{p['volcano_healthz']}"],
            health=f"http://127.0.0.1:{p['volcano_healthz']}/healthz")
        self._wait_healthy("volcano-scheduler", timeout)
        # Volcano creates its `default` and `root` queues itself once its cache syncs.
        for q in ("root", "default"):
            self._wait(f"volcano queue {q}", lambda q=q: self.kubectl(
                "get", "queues.scheduling.volcano.sh", q, check=False).returncode == 0,
                timeout, "volcano-scheduler")
            self.open_volcano_queue(q)

    def _start_volcano_webhook(self, timeout: float) -> None:
        """vc-webhook-manager outside a cluster: it serves TLS on 127.0.0.1 and the webhook
        configurations name it by URL. This manager only fills in caBundles of configurations
        that exist (it creates none), so the harness creates them, as upstream's chart does."""
        port = self.state["ports"]["volcano_webhook"]
        pki.make_cert(self.pki, "volcano-webhook", "/CN=volcano-webhook", server_sans=["IP:127.0.0.1"])
        ca = base64.b64encode((self.pki / "ca.crt").read_bytes()).decode()
        self.apply([_volcano_webhook_config(path, f"https://127.0.0.1:{port}", ca)
                    for path in VOLCANO_ADMISSIONS])
        self._spawn("volcano-webhook", [
            build.binary("vc-webhook-manager"), "--kubeconfig", self.dir / "kubeconfigs" / "volcano.kubeconfig",
            "--listen-address", "127.0.0.1", "--port", port,
            # --webhook-url is only checked for being set (or a Service namespace/name) at start.
            "--webhook-url", f"https://127.0.0.1:{port}",
            "--tls-cert-file", self.pki / "volcano-webhook.crt",
            "--tls-private-key-file", self.pki / "volcano-webhook.key", "--ca-cert-file", self.pki / "ca.crt",
            "--enabled-admission", ",".join(VOLCANO_ADMISSIONS), "--scheduler-name", VOLCANO_SCHEDULER_NAME,
            "--graceful-shutdown-time", "1s",
            "-v", "3"],  # logs each admission ("admitting pods -- CREATE"): tests count them
            health=VOLCANO_WEBHOOK_PROBE)
        self._wait_healthy("volcano-webhook", timeout)

    def _volcano_webhook_denies(self) -> bool:
        # A pod the pod validation must deny (invalid JDB annotation): proves the apiserver
        # reaches the manager with our CA, and that its caches synced (it serves only then).
        p = self.kubectl("create", "--dry-run=server", "-f", "-", check=False,
                         input=json.dumps(_volcano_bad_pod()))
        return "validatepod.volcano.sh" in p.stderr and "denied the request" in p.stderr

    def _start_yunikorn(self, timeout: float) -> None:
        # The standalone shim reads KUBECONFIG and keeps its configmaps
        # (yunikorn-configs, optional) in $NAMESPACE.
        self.kubectl("create", "namespace", YUNIKORN_NAMESPACE)
        self._spawn("yunikorn-scheduler", [build.binary("yunikorn-scheduler")], env={
            "KUBECONFIG": str(self.dir / "kubeconfigs" / "yunikorn.kubeconfig"),
            "NAMESPACE": YUNIKORN_NAMESPACE},
            health=f"http://127.0.0.1:{YUNIKORN_WEB_PORT}/ws/v1/scheduler/healthcheck")
        self._wait_healthy("yunikorn-scheduler", timeout)

    def _start_kueue(self, timeout: float) -> None:
        """Kueue's manager as a process: its webhook serves TLS on 127.0.0.1 with a cert of the
        harness CA (its own cert management wants an in-cluster Service), and the harness makes the
        webhook configurations, by URL, from the module's manifest."""
        src = build.module_dir("kueue", "sigs.k8s.io/kueue")
        # The TFJob CRD first: an integration whose API is missing is set up only after a backoff.
        kueue_crds = sorted((src / "config/components/crd/bases").glob("*.yaml"))
        self._install_crds([TFJOB_CRD, *kueue_crds], timeout)
        p = self.state["ports"]
        pki.make_cert(self.pki, "kueue-webhook", "/CN=kueue-webhook", server_sans=["IP:127.0.0.1"])
        certs = self.pki / "kueue-webhook"  # the names controller-runtime's webhook server reads
        certs.mkdir(exist_ok=True)
        shutil.copyfile(self.pki / "kueue-webhook.crt", certs / "tls.crt")
        shutil.copyfile(self.pki / "kueue-webhook.key", certs / "tls.key")
        (self.dir / "kueue.yaml").write_text(yaml.safe_dump(_kueue_config(p, certs)))
        ca = base64.b64encode((self.pki / "ca.crt").read_bytes()).decode()
        self.apply(_kueue_webhook_configs(src / "config/components/webhook/manifests.yaml",
                                          f"https://127.0.0.1:{p['kueue_webhook']}", ca))
        self.kubectl("create", "namespace", KUEUE_NAMESPACE)
        self._spawn("kueue", [build.binary("kueue-manager"), "--config", self.dir / "kueue.yaml"],
                    env={"KUBECONFIG": str(self.dir / "kubeconfigs" / "kueue.kubeconfig")},
                    health=f"http://127.0.0.1:{p['kueue_health']}/readyz")
        self._wait_healthy("kueue", timeout)
        self._wait("kueue's webhook called by the apiserver", self._kueue_webhook_answers, timeout, "kueue")

    def _kueue_webhook_answers(self) -> bool:
        # A dry-run ResourceFlavor goes through Kueue's mutating and validating webhooks.
        probe = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor",
                 "metadata": {"name": "kueue-webhook-probe"}}
        return self.kubectl("create", "--dry-run=server", "-f", "-", check=False,
                            input=json.dumps(probe)).returncode == 0

    def _start_koordinator(self, timeout: float) -> None:
        src = build.module_dir("koordinator", "github.com/koordinator-sh/koordinator")
        self._install_crds(sorted((src / "config/crd/bases").glob("*.yaml")), timeout)
        kc, port = self.dir / "kubeconfigs" / "koordinator.kubeconfig", self.state["ports"]["koord"]
        gang = [{"name": "Coscheduling"}]
        conf = {
            "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
            "leaderElection": {"leaderElect": False}, "clientConnection": {"kubeconfig": str(kc)},
            # Only koordinator's gang plugin on top of the in-tree defaults:
            # annotations gang.scheduling.koordinator.sh/{name,min-available,...}.
            "profiles": [{"schedulerName": KOORDINATOR_SCHEDULER_NAME, "plugins": {
                p: {"enabled": gang} for p in
                ("preEnqueue", "preFilter", "postFilter", "reserve", "permit", "postBind")}}],
        }
        (self.dir / "koordinator.yaml").write_text(yaml.safe_dump(conf))
        self._spawn("koord-scheduler", [
            build.binary("koord-scheduler"), "--config", self.dir / "koordinator.yaml",
            "--authentication-kubeconfig", kc, "--authorization-kubeconfig", kc,
            "--bind-address", "127.0.0.1", "--secure-port", port,
            # Its deprecated plain-HTTP port defaults to 0.0.0.0:10251, config file or not: off, or
            # a second cluster on the machine cannot start.
            "--port", "0"], health=f"https://127.0.0.1:{port}/healthz")
        self._wait_healthy("koord-scheduler", timeout)

    def _start_real_node(self, node_images: tuple[str, ...], timeout: float, tainted: bool) -> None:
        """containerd, CoreDNS, a kubelet and kube-proxy on this machine (e2e.realnode): a Ready node
        whose pods really run, tainted when kwok nodes share the cluster."""
        from e2e.harness import images

        paths = realnode.PATHS  # claimed by up(), before the apiserver started on its bridge
        built = images.ensure(list(real_node_images(node_images)))
        self.state["node_images"] = {name: image.ref for name, image in built.items()}
        self.state["real_nodes"] = [realnode.NODE_NAME]
        self.state["real_node_tainted"] = tainted
        self._save()
        pk, kc = self.pki, self.dir / "kubeconfigs"
        node = realnode.NODE_NAME
        pki.make_cert(pk, "kubelet-client", f"/O=system:nodes/CN=system:node:{node}")
        pki.make_cert(pk, "kubelet", f"/CN={node}", server_sans=[f"IP:{realnode.NODE_IP}", f"DNS:{node}"])
        pki.make_cert(pk, "coredns", "/O=system:masters/CN=tfop-e2e-coredns")
        pki.make_cert(pk, "kube-proxy", "/CN=system:kube-proxy")  # bound to system:node-proxier by default
        for name, cert in (("kubelet", "kubelet-client"), ("coredns", "coredns"), ("kube-proxy", "kube-proxy")):
            (kc / f"{name}.kubeconfig").write_text(_kubeconfig(self.server, pk / "ca.crt", {
                "client-certificate": str(pk / f"{cert}.crt"), "client-key": str(pk / f"{cert}.key")}))
        self.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                    "metadata": {"name": KUBELET_API_CLIENT},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                "name": "system:kubelet-api-admin"},
                    "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                                  "name": KUBELET_API_CLIENT}]})
        ports = self.state["ports"]
        kubeconfigs = {name: kc / f"{name}.kubeconfig" for name in ("coredns", "kube-proxy")}
        realnode.prepare_host(paths, built["pause"].ref, kubeconfigs, ports, pk, SERVICE_CIDR, tainted)
        self._spawn("containerd", ["containerd", "--config", paths.containerd_config], health=CONTAINERD_PROBE)
        self._wait_healthy("containerd", timeout)
        for image in built.values():
            t0 = time.monotonic()
            realnode.import_image(paths, image.archive, image.ref)
            print(f"[e2e.cluster] image {image.ref} in containerd ({time.monotonic() - t0:.1f}s)", flush=True)
        self._spawn("coredns", [build.binary("coredns"), "-conf", paths.corefile],
                    health=f"http://127.0.0.1:{ports['coredns_ready']}/ready")
        self._wait_healthy("coredns", timeout)
        self._spawn("kubelet", realnode.kubelet_command(build.binary("kubelet"), paths, kc / "kubelet.kubeconfig"),
                    health=f"http://127.0.0.1:{ports['kubelet_healthz']}/healthz")
        self._wait_healthy("kubelet", timeout)
        self._wait(f"node {node} Ready", lambda: self._node_ready(node), timeout, "kubelet")
        self._spawn("kube-proxy", realnode.kube_proxy_command(build.binary("kube-proxy"), paths),
                    health=f"http://127.0.0.1:{ports['kube_proxy_healthz']}/healthz")
        self._wait_healthy("kube-proxy", timeout)

    def _claim_real_node(self, paths: "realnode.Paths") -> None:
        """One real-node cluster per machine: refuse while another one runs, clean up after one
        that crashed, then record this cluster as the owner."""
        if paths.owner.exists():
            other = Cluster(Path(paths.owner.read_text().strip()))
            if other.dir != self.dir and any(other.alive_components().get(n) for n in REAL_NODE_COMPONENTS):
                raise ClusterError(f"a real-node cluster already runs in {other.dir} (one per machine): "
                                   f"`python -m e2e.cluster down --dir {other.dir}` first")
        realnode.teardown(paths)
        paths.root.mkdir(parents=True, exist_ok=True)
        paths.owner.write_text(str(self.dir))

    def _owns_real_node(self) -> bool:
        owner = realnode.PATHS.owner
        return bool(self.state.get("real_nodes")) or (owner.exists() and Path(owner.read_text().strip()) == self.dir)

    def load_node_image(self, name: str) -> str:
        """Build (unless cached) and import an e2e.images image into the real node's containerd; its ref."""
        from e2e.harness import images

        if not self._owns_real_node():
            raise ClusterError("this cluster has no real node")
        image = images.ensure([name])[name]
        t0 = time.monotonic()
        realnode.import_image(realnode.PATHS, image.archive, image.ref)
        print(f"[e2e.cluster] image {image.ref} in containerd ({time.monotonic() - t0:.1f}s)", flush=True)
        self.state.setdefault("node_images", {})[name] = image.ref
        self._save()
        return image.ref

    def node_image(self, name: str) -> str:
        """The reference of an e2e.images image imported into the real node's containerd."""
        try:
            return self.state["node_images"][name]
        except KeyError:
            raise ClusterError(f"no image {name!r} on this cluster's real node; it has "
                               f"{sorted(self.state.get('node_images', {}))}") from None

    def open_volcano_queue(self, name: str) -> None:
        """Mark a Volcano Queue Open. vc-controller-manager normally does this;
        we don't run it, and the scheduler allocates nothing in a queue whose
        status.state is not Open."""
        self.kubectl("patch", "queues.scheduling.volcano.sh", name, "--subresource=status",
                     "--type=merge", "-p", '{"status":{"state":"Open"}}')

    def create_volcano_queue(self, name: str, weight: int = 1, capability: dict | None = None) -> None:
        spec: dict = {"weight": weight, "reclaimable": True}
        if capability:
            spec["capability"] = capability
        self.apply({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
                    "metadata": {"name": name}, "spec": spec})
        self.open_volcano_queue(name)

    def _install_crds(self, files: list[Path], timeout: float) -> None:
        for f in files:
            self.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(f))
        names = []
        for f in files:
            names += [doc["metadata"]["name"] for doc in yaml.safe_load_all(f.read_text())
                      if doc and doc.get("kind") == "CustomResourceDefinition"]
        self.kubectl("wait", "--for=condition=Established", f"--timeout={int(timeout)}s",
                     *[f"crd/{n}" for n in names], timeout=timeout + 10)

    def _make_pki(self, server: str) -> None:
        d = self.pki
        pki.make_ca(d)
        pki.make_sa_keypair(d)
        pki.make_cert(d, "apiserver", "/CN=kube-apiserver", server_sans=[
            "IP:127.0.0.1", "DNS:localhost", f"IP:{realnode.NODE_IP}", "IP:10.0.0.1", "DNS:kubernetes",
            "DNS:kubernetes.default", "DNS:kubernetes.default.svc",
            "DNS:kubernetes.default.svc.cluster.local"])
        # Control-plane components use their built-in RBAC identities; kwok and
        # the batch schedulers get system:masters: their RBAC is not under test.
        idents = {
            "admin": "/O=system:masters/CN=tfop-e2e-admin",
            "kube-controller-manager": "/CN=system:kube-controller-manager",
            "kube-scheduler": "/CN=system:kube-scheduler",
            "kwok": "/O=system:masters/CN=tfop-e2e-kwok",
            "scheduler-plugins": "/O=system:masters/CN=tfop-e2e-scheduler-plugins",
            "volcano": "/O=system:masters/CN=tfop-e2e-volcano",
            "yunikorn": "/O=system:masters/CN=tfop-e2e-yunikorn",
            "koordinator": "/O=system:masters/CN=tfop-e2e-koordinator",
            "kueue": "/O=system:masters/CN=tfop-e2e-kueue",
        }
        pki.make_cert(d, KUBELET_API_CLIENT, f"/CN={KUBELET_API_CLIENT}")
        for name, subj in idents.items():
            pki.make_cert(d, name, subj)
            kc = self.kubeconfig if name == "admin" else self.dir / "kubeconfigs" / f"{name}.kubeconfig"
            kc.write_text(_kubeconfig(server, d / "ca.crt", {
                "client-certificate": str(d / f"{name}.crt"), "client-key": str(d / f"{name}.key")}))
            kc.chmod(0o600)

    # ---------- process helpers ----------

    def _spawn(self, name: str, cmd: list, env: dict | None = None, *, health: str,
               admin: bool = False) -> None:
        """Start a component and record how (command, env, health check), so that
        start_component() and restart() can run it again exactly so."""
        self.state.setdefault("components", {})[name] = {
            "cmd": [str(c) for c in cmd], "env": {k: str(v) for k, v in (env or {}).items()},
            "health": health, "admin": admin}
        self._launch(name)

    def _launch(self, name: str) -> None:
        rec = self.state["components"][name]
        # PR_SET_PDEATHSIG fires when the *thread* that forked exits: only the main thread's
        # children get it; others still die with the interpreter through the atexit hook.
        die_with_parent = (getattr(self, "_stop_on_exit", False)
                           and threading.current_thread() is threading.main_thread())
        log = open(self.logs / f"{name}.log", "ab")
        proc = subprocess.Popen(
            rec["cmd"], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            cwd=self.dir, env={**os.environ, **rec["env"]}, start_new_session=True,
            preexec_fn=_die_with_parent if die_with_parent else None)
        log.close()
        self._procs[name] = proc
        self.state["pids"][name] = proc.pid
        self._save()

    def _wait_healthy(self, name: str, timeout: float) -> None:
        rec = self.state["components"][name]
        if rec["health"] == VOLCANO_WEBHOOK_PROBE:
            self._wait("volcano-webhook denying an invalid pod", self._volcano_webhook_denies, timeout, name)
        elif rec["health"] == CONTAINERD_PROBE:
            self._wait("containerd answering on its socket", lambda: realnode.containerd_ready(realnode.PATHS),
                       timeout, name)
        else:
            self._wait_http(name, rec["health"], timeout, admin=rec["admin"])

    def _save(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "state.json").write_text(json.dumps(self.state, indent=1))

    def _wait(self, what: str, pred, timeout: float, component: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            dead = [n for n, p in self._procs.items() if p.poll() is not None]
            if dead:
                raise ClusterError(f"{dead[0]} exited ({self._procs[dead[0]].returncode}) while waiting "
                                   f"for {what}:\n{self.logs_tail(dead[0])}")
            try:
                if pred():
                    return
            except Exception:  # not up yet: connection refused, TLS, 5xx...
                pass
            time.sleep(0.3)
        raise ClusterError(f"timed out after {timeout:.0f}s waiting for {what}:\n{self.logs_tail(component)}")

    def _admin_tls(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        ctx.load_cert_chain(str(self.pki / "admin.crt"), str(self.pki / "admin.key"))
        return ctx

    def _wait_http(self, name: str, url: str, timeout: float, admin: bool = False) -> None:
        ctx = None
        if url.startswith("https"):
            # component serving certs are self-signed
            ctx = self._admin_tls() if admin else ssl._create_unverified_context()

        def ok() -> bool:
            with urllib.request.urlopen(url, timeout=2, context=ctx) as r:
                return r.status == 200
        self._wait(f"{name} {url}", ok, timeout, name)

    def _node_ready(self, name: str) -> bool:
        node = json.loads(self.kubectl("get", "node", name, "-o", "json").stdout)
        return any(c["type"] == "Ready" and c["status"] == "True"
                   for c in node.get("status", {}).get("conditions", []))


# ---------- module helpers ----------

def _ready_status(node: dict) -> str | None:
    return next((c["status"] for c in node.get("status", {}).get("conditions", []) if c["type"] == "Ready"), None)


def _unreachable_effects(node: dict) -> set[str]:
    return {t.get("effect") for t in node.get("spec", {}).get("taints") or [] if t.get("key") == UNREACHABLE_TAINT}


def _node_lost(node: dict) -> bool:
    """As the node lifecycle controller leaves a node it stopped hearing from."""
    return _ready_status(node) == "Unknown" and _unreachable_effects(node) >= {"NoSchedule", "NoExecute"}


def _node_recovered(node: dict) -> bool:
    return _ready_status(node) == "True" and not _unreachable_effects(node)


def _volcano_webhook_config(path: str, url: str, ca_bundle: str) -> dict:
    """A ValidatingWebhookConfiguration as Volcano's chart (installer/helm/.../webhooks.yaml)
    makes it for `path`, with a URL instead of its in-cluster Service."""
    resource = path.strip("/").split("/")[0]  # pods, podgroups
    api = {"pods": ("", "v1"), "podgroups": ("scheduling.volcano.sh", "v1beta1")}[resource]
    webhook = {
        "name": f"validate{resource[:-1]}.volcano.sh",  # validatepod, validatepodgroup
        "admissionReviewVersions": ["v1"], "clientConfig": {"url": url + path, "caBundle": ca_bundle},
        "failurePolicy": "Fail", "matchPolicy": "Equivalent", "sideEffects": "NoneOnDryRun",
        "timeoutSeconds": 10,
        "namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                                                    "values": ["volcano-system", "kube-system"]}]},
        "rules": [{"apiGroups": [api[0]], "apiVersions": [api[1]], "operations": ["CREATE"],
                   "resources": [resource], "scope": "*"}],
    }
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "volcano-admission-service" + path.replace("/", "-")},
            "webhooks": [webhook]}


def _kueue_config(ports: dict, cert_dir: Path) -> dict:
    """Kueue's Configuration (config.kueue.x-k8s.io/v1beta1): one process, everything on 127.0.0.1."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta1", "kind": "Configuration",
        "namespace": KUEUE_NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{ports['kueue_health']}"},
        "metrics": {"bindAddress": f"127.0.0.1:{ports['kueue_metrics']}"},
        "webhook": {"host": "127.0.0.1", "port": ports["kueue_webhook"], "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "manageJobsWithoutQueueName": False,  # TFJobs without a queue label are tfop's alone
        "integrations": {"frameworks": [KUEUE_FRAMEWORK]},
        # Off: the on-demand visibility API server wants its own certs and an APIService; MultiKueue
        # is not tested here.
        "featureGates": {"VisibilityOnDemand": False, "MultiKueue": False},
    }


def _kueue_webhook_configs(manifest: Path, url: str, ca_bundle: str) -> list[dict]:
    """The Mutating/ValidatingWebhookConfigurations of Kueue's manifest, with only the webhooks of
    KUEUE_WEBHOOK_PATHS, each called by URL instead of through an in-cluster Service."""
    configs = []
    for doc in yaml.safe_load_all(manifest.read_text()):
        if not doc or not doc.get("webhooks"):
            continue
        webhooks = []
        for hook in doc["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            if any(part in path for part in KUEUE_WEBHOOK_PATHS):
                webhooks.append({**hook, "clientConfig": {"url": url + path, "caBundle": ca_bundle}})
        configs.append({"apiVersion": doc["apiVersion"], "kind": doc["kind"],
                        "metadata": {"name": "kueue-" + doc["metadata"]["name"]}, "webhooks": webhooks})
    return configs


def _volcano_bad_pod() -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "volcano-webhook-probe", "namespace": "default",
                         "annotations": {"volcano.sh/jdb-min-available": "0"}},
            "spec": {"schedulerName": VOLCANO_SCHEDULER_NAME,
                     "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}


def _in_families(line: str, names: tuple[str, ...]) -> bool:
    """Is this line of the text format (# HELP/# TYPE or a sample) of one of these families?"""
    name = line.split(" ", 3)[2] if line.startswith("# ") else line.split("{", 1)[0].split(" ", 1)[0]
    return name in names or any(name == n + part for n in names for part in ("_bucket", "_sum", "_count"))


def request_counts(families, verb: str = "POST", code: str = "201") -> dict[str, float]:
    """apiserver_request_total summed per resource for one verb and code, dry runs left out
    (their label dry_run is "All"). Keys: "pods", "pods/binding", "podgroups.scheduling.volcano.sh".
    Families: only apiserver_request_total is read: c.apiserver_metrics(("apiserver_request_total",))."""
    counts: dict[str, float] = {}
    for family in families:
        for sample in family.samples:
            labels = sample.labels
            if (sample.name != "apiserver_request_total" or labels.get("verb") != verb
                    or labels.get("code") != code or labels.get("dry_run")):
                continue
            key = labels.get("resource", "") + (f".{labels['group']}" if labels.get("group") else "")
            key += f"/{labels['subresource']}" if labels.get("subresource") else ""
            counts[key] = counts.get(key, 0) + sample.value
    return counts


def _pid_alive(pid: int, cluster_dir: Path) -> bool:
    # Guard against pid reuse: every component runs with DIR as its cwd.
    try:
        return Path(os.readlink(f"/proc/{pid}/cwd")) == cluster_dir
    except OSError:
        return False


def _kill_groups(pids: list[int], cluster_dir: Path, grace: float = 5.0) -> None:
    """SIGTERM every component's process group at once, SIGKILL what is left
    after a short grace period (a test cluster needs no graceful shutdown)."""
    pids = [p for p in pids if _pid_alive(p, cluster_dir)]
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        for pid in pids:
            try:
                os.killpg(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait
        while pids and time.monotonic() < deadline:
            for pid in list(pids):
                try:  # reap our own children; others' zombies vanish by themselves
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass
                try:
                    os.killpg(pid, 0)
                except ProcessLookupError:
                    pids.remove(pid)
            time.sleep(0.1)
        if not pids:
            return


def _rmtree(p: Path) -> None:
    import shutil
    shutil.rmtree(p, ignore_errors=True)


_sigterm_installed = False


def _install_sigterm_handler() -> None:
    """Turn SIGTERM into SystemExit so atexit handlers stop the cluster."""
    global _sigterm_installed
    if _sigterm_installed or threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    _sigterm_installed = True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m e2e.cluster", description=__doc__,
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
    ap.add_argument("--node-images", default="tf", help="e2e.images imported into the real node (pause always)")
    ap.add_argument("--kubernetes", default=None, choices=list(KUBERNETES_VERSIONS),
                    help="an optional control plane instead of the harness's own (1.37: native gang "
                         "scheduling; 1.30: the oldest supported; --schedulers default only)")
    a = ap.parse_args(argv)
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
            c = Cluster(d)
            c.down()
            print(f"cluster in {d} stopped")
        else:
            c = Cluster(d)
            alive = c.alive_components()
            if not alive:
                print(f"no cluster in {d}")
                return 1
            print(f"server: {c.server}\nkubeconfig: {c.kubeconfig}")
            for n, up in alive.items():
                print(f"{n:30s} {'up' if up else 'DOWN'} (pid {c.state['pids'].get(n, '-')})")
            return 0 if all(alive.values()) else 1
    except (ClusterError, build.BuildError) as e:
        print(f"ERROR: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
