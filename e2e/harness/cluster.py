"""A real local Kubernetes control plane as plain processes on 127.0.0.1.

etcd, kube-apiserver (RBAC), kube-controller-manager, kube-scheduler, kwok
(fake GPU nodes) and batch schedulers (scheduler-plugins Coscheduling,
Volcano, Koordinator; YuniKorn, Volcano's admission webhook and Kueue on
request), all built by e2e.build. Each component is a module of e2e.harness;
`Cluster` holds the state, starts them in order and runs their processes.

    python -m e2e.harness up [--dir DIR] [--gpu-nodes N] [--gpus-per-node G]
                             [--schedulers default,coscheduling,volcano,koordinator]
                             [--kubernetes 1.30|1.37]
    python -m e2e.harness status|down [--dir DIR]
    python -m e2e.harness restart --component NAME [--dir DIR]
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import tempfile
import threading
from pathlib import Path

import yaml

from e2e import build
from e2e.harness import (control_plane, identities, koordinator, kube_scheduler, kubelet_node, kueue, kwok, nodes,
                         observed, processes, realnode, restarts, scheduler_plugins, volcano, yunikorn)
from e2e.harness.control_plane import KUBERNETES_VERSIONS
from e2e.harness.errors import ClusterError, RealNodeUnavailable

ALL_SCHEDULERS = ("default", "coscheduling", "volcano", "koordinator")  # the default set
# Opt-in: YuniKorn's web port (9080) is fixed, so only one YuniKorn cluster per machine; Volcano's
# admission webhook (needs "volcano") registers cluster-wide webhook configurations that every
# pod create of the cluster then goes through.
# Kueue (not a scheduler: quota admission of TFJobs) likewise registers cluster-wide webhooks,
# on every TFJob create and update: "kueue" is v0.15.0, "kueue-0.10" v0.10.2 (e2e.harness.kueue).
KNOWN_SCHEDULERS = ALL_SCHEDULERS + ("yunikorn", "volcano-webhook", *kueue.RELEASES)
# The components after kwok, in start order, each started when its name is in `schedulers`.
_BATCH_SCHEDULERS = (("coscheduling", scheduler_plugins.start), ("volcano", volcano.start_scheduler),
                     ("yunikorn", yunikorn.start), ("koordinator", koordinator.start))
# Health checks that are no URL: what they wait for, and the predicate.
_PROBES = {volcano.VOLCANO_WEBHOOK_PROBE: ("volcano-webhook denying an invalid pod", volcano.webhook_denies),
           kubelet_node.CONTAINERD_PROBE: ("containerd answering on its socket", kubelet_node.containerd_answers)}
_PORTS = ("etcd", "etcd_peer", "apiserver", "kcm", "scheduler", "kwok", "cosched", "cosched_ctrl_metrics",
          "cosched_ctrl_probe", "volcano_metrics", "volcano_healthz", "volcano_webhook", "koord", "kueue_webhook",
          "kueue_metrics", "kueue_health", "kubelet_healthz", "coredns_health", "coredns_ready",
          "kube_proxy_healthz", "kube_proxy_metrics")
_STATE_DIRS = ("etcd", "pki", "kubeconfigs", "sa-kubeconfigs")
_STATE_FILES = ("state.json", "kubeconfig", "kwok.yaml", "volcano.conf", "coscheduling.yaml", "kube-scheduler.yaml",
                "koordinator.yaml", "kueue.yaml", "kueue-crds.yaml", "audit-policy.yaml")


def default_dir() -> Path:
    env = os.environ.get("TFOP_E2E_DIR")
    return Path(env) if env else Path(tempfile.gettempdir()) / f"tfop-e2e-{os.getuid()}"


def components_for(schedulers, kubernetes: str | None = None) -> list[str]:
    """Build components a cluster with these schedulers (and control plane version) needs."""
    comps = ["kubernetes", "etcd", "kwok"] + ([KUBERNETES_VERSIONS[kubernetes]] if kubernetes else [])
    # volcano-webhook: the volcano component's second binary
    extra = {"coscheduling": "scheduler-plugins", "volcano": "volcano", "yunikorn": "yunikorn",
             "koordinator": "koordinator", **{entry: rel.component for entry, rel in kueue.RELEASES.items()}}
    return comps + [extra[s] for s in schedulers if s in extra]


def check_options(schedulers, real_nodes: int, kubernetes: str | None) -> None:
    """Refuse a cluster the harness cannot start, before anything starts."""
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
    kueue.release_of(schedulers)  # at most one
    if "volcano-webhook" in schedulers and "volcano" not in schedulers:
        raise ClusterError("volcano-webhook needs volcano (its CRDs and open queues)")
    if real_nodes not in (0, 1):
        raise ClusterError(f"real_nodes={real_nodes}: one real node per machine (its bridge, cgroups and "
                           f"port {realnode.KUBELET_PORT} are the machine's)")
    if real_nodes and (reason := realnode.unavailable_reason()):
        raise RealNodeUnavailable(reason)


class Cluster:
    """Handle on a cluster directory. State lives in DIR/state.json, so a
    second process (e.g. `python -m e2e.harness down`) can attach to it."""

    def __init__(self, dir: Path):
        self.dir = Path(dir).resolve()
        self.kubeconfig = self.dir / "kubeconfig"
        self.logs = self.dir / "logs"
        self.pki = self.dir / "pki"
        self.state: dict = processes.load_state(self.dir)
        self._procs: dict[str, subprocess.Popen] = {}
        self._stop_on_exit = False

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
        real_nodes (0 or 1): a node backed by a real kubelet and containerd (e2e.harness.realnode),
        with the e2e.harness.images `node_images` (and the pause image) imported into its containerd.
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
        check_options(schedulers, real_nodes, kubernetes)
        c = cls(Path(dir) if dir else default_dir())
        if any(c.alive_components().values()):
            raise ClusterError(f"a cluster is already running in {c.dir}; run `down` first")
        if build_missing:
            build.ensure(components_for(schedulers, kubernetes) + (["coredns"] if real_nodes else []))
        c._stop_on_exit = stop_on_exit
        if stop_on_exit:
            atexit.register(c.down)
            processes.install_sigterm_handler()
        _start_retrying(c, list(schedulers), gpu_nodes, gpus_per_node, timeout, scheduler_qps, real_nodes,
                        tuple(node_images), kubernetes, node_monitor_grace_period)
        return c

    def down(self, keep_dir: bool = False) -> None:
        """Stop every recorded process group (SIGTERM, then SIGKILL) and remove state."""
        processes.kill_groups([pid for pid in self.state.get("pids", {}).values()], self.dir)
        for p in self._procs.values():
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        self._procs.clear()
        self.state["pids"] = {}
        if kubelet_node.owns(self):
            realnode.teardown()
        if keep_dir or not self.dir.exists():
            return
        _remove_state(self.dir)
        self.state = {}

    def alive_components(self) -> dict[str, bool]:
        """Every component started, in start order: is its process running?"""
        return processes.alive_components(self.state, self.dir)

    # ---------- the components' processes ----------

    def spawn(self, name: str, cmd: list, env: dict | None = None, *, health: str, admin: bool = False) -> None:
        """Start a component and record how (command, env, health check), so that
        start_component() and restart() can run it again exactly so."""
        self.state.setdefault("components", {})[name] = {
            "cmd": [str(c) for c in cmd], "env": {k: str(v) for k, v in (env or {}).items()},
            "health": health, "admin": admin}
        self.launch(name)

    def launch(self, name: str) -> None:
        """Run component `name` as spawn() recorded it."""
        # PR_SET_PDEATHSIG fires when the *thread* that forked exits: only the main thread's
        # children get it; others still die with the interpreter through the atexit hook.
        die_with_parent = self._stop_on_exit and threading.current_thread() is threading.main_thread()
        proc = processes.launch(name, self.state["components"][name], self.dir, self.logs, die_with_parent)
        self._procs[name] = proc
        self.state["pids"][name] = proc.pid
        self.save()

    def wait(self, what: str, pred, timeout: float, component: str) -> None:
        """Poll pred() until it holds; fail at once if a component this process started exits."""
        processes.wait(what, pred, timeout, component, self._procs, self.logs_tail)

    def wait_healthy(self, name: str, timeout: float) -> None:
        """Wait until component `name` passes the health check it was spawned with."""
        rec = self.state["components"][name]
        if rec["health"] in _PROBES:
            what, probe = _PROBES[rec["health"]]
            self.wait(what, lambda: probe(self), timeout, name)
        else:
            tls = identities.admin_tls(self.pki) if rec["admin"] else None
            self.wait(f"{name} {rec['health']}", processes.http_ok(rec["health"], tls), timeout, name)

    def save(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "state.json").write_text(json.dumps(self.state, indent=1))

    def logs_tail(self, component: str | None = None, lines: int = 30) -> str:
        return processes.logs_tail(self.logs, component, lines)

    def stop_component(self, name: str, grace: float = 10.0) -> None:
        restarts.stop_component(self, name, grace)

    def start_component(self, name: str, timeout: float = 60) -> int:
        return restarts.start_component(self, name, timeout)

    def restart(self, name: str, *, grace: float = 10.0, timeout: float = 60) -> int:
        """stop_component() then start_component(): the same process, in place. Returns the new pid."""
        self.stop_component(name, grace)
        return self.start_component(name, timeout)

    def forget_process(self, name: str) -> subprocess.Popen | None:
        """The Popen of a component this process started, no longer watched by wait()."""
        return self._procs.pop(name, None)

    # ---------- the API ----------

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

    # ---------- each component's own calls, for the tests: documented in their modules ----------

    def service_account_kubeconfig(self, namespace: str, name: str, duration: str = "24h") -> Path:
        return identities.service_account_kubeconfig(self, namespace, name, duration)

    def apiserver_metrics(self, names: tuple[str, ...] | None = None) -> list:
        return observed.apiserver_metrics(self, names)

    def audit_offset(self) -> int:
        return observed.audit_offset(self.dir)

    def audit_entries(self, since: int = 0) -> list[dict]:
        return observed.audit_entries(self.dir, since)

    def add_gpu_nodes(self, n: int, gpus: int = 1, *, wait: bool = True) -> list[str]:
        return kwok.add_gpu_nodes(self, n, gpus, wait=wait)

    def remove_node(self, name: str) -> None:
        self.kubectl("delete", "node", name, "--wait=true")

    def lose_node(self, name: str) -> None:
        kwok.lose_node(self, name)

    def recover_node(self, name: str, *, wait: bool = True, timeout: float = 60) -> None:
        kwok.recover_node(self, name, wait=wait, timeout=timeout)

    def wait_node_lost(self, name: str, timeout: float | None = None) -> dict:
        return nodes.wait_lost(self, name, timeout)

    def stop_kubelet(self) -> None:
        kubelet_node.stop_kubelet(self)

    def start_kubelet(self, timeout: float = 90) -> None:
        kubelet_node.start_kubelet(self, timeout)

    def load_node_image(self, name: str) -> str:
        return kubelet_node.load_image(self, name)

    def node_image(self, name: str) -> str:
        return kubelet_node.image_ref(self, name)

    def open_volcano_queue(self, name: str) -> None:
        volcano.open_queue(self, name)

    def create_volcano_queue(self, name: str, weight: int = 1, capability: dict | None = None) -> None:
        volcano.create_queue(self, name, weight, capability)


def _start_retrying(c: Cluster, schedulers: list[str], gpu_nodes: int, gpus: int, timeout: float,
                    scheduler_qps: int | None, real_nodes: int, node_images: tuple[str, ...],
                    kubernetes: str | None, node_monitor_grace_period: float | None) -> None:
    """Cluster.up's start: everything, once more if a port was taken meanwhile."""
    for attempt in (1, 2):
        try:
            if real_nodes:  # the apiserver listens on the bridge's address, for the pods
                kubelet_node.claim(c, realnode.PATHS)
                realnode.make_bridge()
            _start(c, schedulers, gpu_nodes, gpus, timeout, scheduler_qps,
                   address=realnode.NODE_IP if real_nodes else "127.0.0.1", kubernetes=kubernetes,
                   node_monitor_grace_period=node_monitor_grace_period)
            if real_nodes:
                kubelet_node.start(c, node_images, timeout, tainted=gpu_nodes > 0)
            return
        except ClusterError as e:
            c.down(keep_dir=True)  # keep logs/ for a post-mortem
            # Ports are picked free but only bound later by the component:
            # another process may grab one in between. Retry that once.
            if attempt == 2 or "address already in use" not in str(e):
                raise
        except BaseException:
            c.down(keep_dir=True)
            raise


def _start(c: Cluster, schedulers: list[str], gpu_nodes: int, gpus: int, timeout: float,
           scheduler_qps: int | None, address: str, kubernetes: str | None,
           node_monitor_grace_period: float | None) -> None:
    """The control plane, then kwok and the schedulers; the apiserver on `address` (a real node's
    pods reach it there)."""
    for sub in _STATE_DIRS:  # stale state of a crashed run
        processes.rmtree(c.dir / sub)
    (c.dir / observed.AUDIT_LOG).unlink(missing_ok=True)  # the apiserver appends: no earlier cluster's lines
    for sub in ("logs", "kubeconfigs", "etcd"):
        (c.dir / sub).mkdir(parents=True, exist_ok=True)
    ports = {k: processes.free_port() for k in _PORTS}
    server = f"https://{address}:{ports['apiserver']}"
    c.state = {"server": server, "ports": ports, "schedulers": schedulers, "pids": {},
               "next_node": 0, "scheduler_qps": scheduler_qps, "kubernetes": kubernetes,
               "node_monitor_grace_period": node_monitor_grace_period}
    c.save()
    identities.make_cluster_pki(c, server)
    etcd_url = control_plane.start_etcd(c, timeout)
    control_plane.start_apiserver(c, etcd_url, address, timeout)
    control_plane.start_controller_manager(c, timeout)
    if "default" in schedulers:
        kube_scheduler.start(c, timeout)
    kwok.start(c, timeout)
    for name, start in _BATCH_SCHEDULERS:
        if name in schedulers:
            start(c, timeout)
    if gpu_nodes:
        c.add_gpu_nodes(gpu_nodes, gpus)
    # Pods need the `default` ServiceAccount (ServiceAccount admission).
    c.wait("default ServiceAccount", lambda: c.kubectl(
        "get", "sa", "default", "-n", "default", check=False).returncode == 0,
        timeout, "kube-controller-manager")
    if "volcano-webhook" in schedulers:  # last: its readiness check creates a (dry-run) pod
        volcano.start_webhook(c, timeout)
    if entry := kueue.release_of(schedulers):
        kueue.start(c, timeout, entry)


def _remove_state(cluster_dir: Path) -> None:
    """Only what the harness created (the dir may be user-chosen). TFOP_E2E_KEEP_LOGS=1 keeps the
    components' logs and the audit log, to read why a test failed."""
    keep_logs = os.environ.get("TFOP_E2E_KEEP_LOGS") == "1"
    for sub in _STATE_DIRS + (() if keep_logs else ("logs",)):
        processes.rmtree(cluster_dir / sub)
    for f in _STATE_FILES + (() if keep_logs else (observed.AUDIT_LOG,)):
        (cluster_dir / f).unlink(missing_ok=True)
    try:
        cluster_dir.rmdir()
    except OSError:
        pass
