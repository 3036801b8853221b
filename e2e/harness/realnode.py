"""A real node for the local control plane: containerd, a kubelet and CoreDNS on this machine.

Pods on it run real processes (runc containers, a CNI bridge, cluster DNS), so TFJobs really
train. Everything it changes on the host lives under HOST_ROOT, on the bridge BRIDGE, in the
cgroup subtree kubepods, in the iptables chains named KUBE-* and in KUBELET_SYSCTLS, and
`teardown()` undoes all of it from what is on disk, so it also cleans up after a crashed run.
Those are machine-wide (the bridge, port 10250, the cgroups), hence one real-node cluster per
machine at a time.

e2e.harness.kubelet_node runs containerd, coredns, kubelet and kube-proxy as its components (started,
restarted and stopped like the others); this module makes their configuration and the host
state around them.

Pods reach the apiserver as in a cluster: it listens on NODE_IP (the bridge's address, which
only this machine has), the `kubernetes` Service's endpoint is that address, kube-proxy turns
the Service's address into it, and each pod has a route to the Service range via the bridge.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

HOST_ROOT = Path("/var/lib/tfop-e2e-node")  # fixed: one real-node cluster per machine
NODE_NAME = "tfop-node-0"
BRIDGE = "tfop0"
NODE_IP = "10.99.0.1"  # the bridge's address: the kubelet, CoreDNS and the pods' DNS server
POD_SUBNET = "10.99.0.0/24"
POD_RANGE = ("10.99.0.10", "10.99.0.250")
KUBELET_PORT = 10250  # the apiserver reaches the kubelet at NODE_IP:KUBELET_PORT
CNI_BIN_DIR = Path("/usr/lib/cni")  # Debian's containernetworking-plugins
# In a cluster with kwok GPU nodes too, only a pod that tolerates REAL_NODE_TAINT and selects
# REAL_NODE_LABEL lands here, so no kwok test ever does. Alone, the node is not tainted: every pod
# of that cluster is meant for it, the operator's Deployment among them (applied as users do).
REAL_NODE_LABEL = ("tfop.test/node", "real")
REAL_NODE_TAINT = {"key": "tfop.test/real-node", "value": "true", "effect": "NoSchedule"}
CLUSTER_DOMAIN = "cluster.local"
# What a kubelet 1.34 and kube-proxy make on the host besides their files: iptables chains named
# KUBE-* (the kubelet's KUBE-FIREWALL and canaries, kube-proxy's per-Service chains), and the
# kubelet's kernel settings (cm/container_manager_linux.go's setupKernelTunables). Nothing else on
# the machine runs Kubernetes, so every KUBE-* chain is the node's: teardown removes them all.
NODE_CHAIN_PREFIX = "KUBE-"
KUBELET_SYSCTLS = ("vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
                   "kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes")
CGROUP_FS = Path("/sys/fs/cgroup")
# containerd 1.6 puts each shim's socket and ctr's fifos under this fixed state dir, whatever its own
# state dir: a shim removes its socket when it exits cleanly, not when killed.
CONTAINERD_FIXED_STATE = Path("/run/containerd")
POD_CGROUP = "kubepods"  # the kubelet's cgroupfs root for pods (cgroupRoot "/")
REQUIRED_COMMANDS = ("containerd", "containerd-shim-runc-v2", "runc", "ctr", "ip", "iptables", "iptables-restore",
                     "conntrack", "buildah")
REQUIRED_CNI = ("bridge", "host-local", "loopback")
# buildah builds the operator's image from its Dockerfile (e2e.harness.images), for the pods of its Deployment.
DEBIAN_PACKAGES = ("containerd", "runc", "containernetworking-plugins", "iptables", "conntrack", "debootstrap",
                   "buildah")


@dataclass(frozen=True)
class Paths:
    """Where each piece keeps its files, all under one root."""
    root: Path = HOST_ROOT

    @property
    def containerd_config(self) -> Path:
        return self.root / "containerd.toml"

    @property
    def containerd_root(self) -> Path:
        return self.root / "containerd"

    @property
    def containerd_state(self) -> Path:
        return self.root / "run"

    @property
    def containerd_socket(self) -> Path:
        return self.root / "containerd.sock"

    @property
    def cni_conf_dir(self) -> Path:
        return self.root / "cni"

    @property
    def kubelet_root(self) -> Path:
        return self.root / "kubelet"

    @property
    def kubelet_config(self) -> Path:
        return self.root / "kubelet.yaml"

    @property
    def pod_logs(self) -> Path:
        return self.root / "pod-logs"

    @property
    def kube_proxy_config(self) -> Path:
        return self.root / "kube-proxy.yaml"

    @property
    def corefile(self) -> Path:
        return self.root / "Corefile"

    @property
    def owner(self) -> Path:
        """The cluster dir that runs the node now (its state.json has the pids)."""
        return self.root / "owner"

    @property
    def made_fixed_state(self) -> Path:
        """Present when CONTAINERD_FIXED_STATE did not exist before this node: teardown removes it."""
        return self.root / "made-run-containerd"

    @property
    def sysctls(self) -> Path:
        """The kernel settings as they were before the first kubelet: teardown restores them."""
        return self.root / "sysctls.json"


PATHS = Paths()


# ---------- can this machine run a real node? ----------

def unavailable_reason() -> str | None:
    """One line saying why real nodes cannot run here, or None when they can."""
    if os.geteuid() != 0:
        return "real nodes need root (containerd, runc, a bridge, cgroups and mounts)"
    if "overlay" not in Path("/proc/filesystems").read_text():
        return "real nodes need overlayfs (containerd's snapshotter); the kernel has none"
    missing = [c for c in REQUIRED_COMMANDS if shutil.which(c) is None]
    missing += [f"{CNI_BIN_DIR}/{p}" for p in REQUIRED_CNI if not (CNI_BIN_DIR / p).exists()]
    if missing:
        return (f"real nodes need {', '.join(missing)}: install the Debian packages "
                f"{' '.join(DEBIAN_PACKAGES)} (`python -m e2e.host_packages`)")
    if not (CGROUP_FS / "memory").is_dir() and not (CGROUP_FS / "cgroup.controllers").exists():
        return f"real nodes need cgroups mounted at {CGROUP_FS}"
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", KUBELET_PORT))
        except OSError:
            return f"port {KUBELET_PORT} (the kubelet's) is taken: is another kubelet running on this machine?"
    return None


# ---------- configuration ----------

def containerd_config(paths: Paths, pause_ref: str) -> str:
    # restrict_oom_score_adj: the VM lacks CAP_SYS_RESOURCE, and the pause container's -998 would
    # fail every sandbox. netns_mounts_under_state_dir and the runc root keep every mount and
    # file under the root; the opt plugin would otherwise write to /opt/containerd.
    return f"""\
version = 2
root = "{paths.containerd_root}"
state = "{paths.containerd_state}"
[grpc]
  address = "{paths.containerd_socket}"
[ttrpc]
  address = "{paths.containerd_socket}.ttrpc"
[debug]
  level = "warn"
[plugins."io.containerd.internal.v1.opt"]
  path = "{paths.containerd_root}/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause_ref}"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_tls_streaming = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN_DIR}"
    conf_dir = "{paths.cni_conf_dir}"
    max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{paths.containerd_state}/runc"
"""


def cni_config(paths: Paths, service_cidr: str) -> dict:
    # No masquerade, no default route, ip_forward untouched: pods reach each other and NODE_IP on
    # the bridge, and the Service range through NODE_IP (kube-proxy's rules answer there, on this
    # machine); no packet of theirs leaves it.
    return {
        "cniVersion": "0.4.0", "name": "tfop-e2e",
        "plugins": [{
            "type": "bridge", "bridge": BRIDGE, "isGateway": False, "ipMasq": False,
            "ipam": {"type": "host-local", "dataDir": str(paths.root / "ipam"),
                     "ranges": [[{"subnet": POD_SUBNET, "rangeStart": POD_RANGE[0], "rangeEnd": POD_RANGE[1]}]],
                     "routes": [{"dst": service_cidr, "gw": NODE_IP}]},
        }],
    }


def corefile(kubeconfig: Path, health_port: int, ready_port: int) -> str:
    # No cache: a pod's name must resolve the moment its address is published (a peer that
    # starts late), not after a cached NXDOMAIN expires. Names outside the cluster get NXDOMAIN
    # at once: glibc also asks for the absolute `<svc>.<ns>.svc.` name, and a SERVFAIL there
    # fails the lookup as a temporary error.
    return f"""\
{CLUSTER_DOMAIN}:53 {{
    bind {NODE_IP}
    errors
    health 127.0.0.1:{health_port}
    ready 127.0.0.1:{ready_port}
    kubernetes {CLUSTER_DOMAIN} {{
        kubeconfig {kubeconfig} tfop-e2e
        ttl 0
    }}
}}
.:53 {{
    bind {NODE_IP}
    template ANY ANY {{
        rcode NXDOMAIN
    }}
}}
"""


def kubelet_config(paths: Paths, pki: Path, healthz_port: int, tainted: bool) -> dict:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "address": NODE_IP, "port": KUBELET_PORT, "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1", "healthzPort": healthz_port,
        "tlsCertFile": str(pki / "kubelet.crt"), "tlsPrivateKeyFile": str(pki / "kubelet.key"),
        # As in a real cluster: client certificates of the cluster CA, the rest asked of the
        # apiserver (TokenReview, SubjectAccessReview); nothing anonymous.
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": str(pki / "ca.crt")}},
        "authorization": {"mode": "Webhook"},
        "containerRuntimeEndpoint": f"unix://{paths.containerd_socket}",
        "cgroupDriver": "cgroupfs",  # containerd 1.6 cannot tell the kubelet which it uses
        "podLogsDir": str(paths.pod_logs),
        "clusterDNS": [NODE_IP], "clusterDomain": CLUSTER_DOMAIN,
        "resolvConf": str(paths.root / "resolv.conf"),  # not the host's search domains
        "registerWithTaints": [REAL_NODE_TAINT] if tainted else [],
        "failSwapOn": False, "makeIPTablesUtilChains": False,
        "serializeImagePulls": False,
        # The machine's disk is shared with builds and caches: evict only when it is nearly full,
        # and never collect the images imported here (there is no registry to pull them again).
        "evictionHard": {"memory.available": "200Mi", "nodefs.available": "2%", "imagefs.available": "2%",
                         "nodefs.inodesFree": "2%"},
        "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
        "nodeStatusReportFrequency": "10s",
    }


def kubelet_command(kubelet: Path, paths: Paths, kubeconfig: Path) -> list:
    return [kubelet, "--config", paths.kubelet_config, "--kubeconfig", kubeconfig,
            "--root-dir", paths.kubelet_root, "--node-ip", NODE_IP, "--hostname-override", NODE_NAME,
            "--node-labels", f"{REAL_NODE_LABEL[0]}={REAL_NODE_LABEL[1]}", "--v", "1"]


def kube_proxy_config(kubeconfig: Path, healthz_port: int, metrics_port: int) -> dict:
    """iptables mode, serving only on this machine, touching no kernel setting: no NodePort on
    localhost (that needs route_localnet), conntrack limits and timeouts left as they are."""
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": NODE_NAME, "bindAddress": NODE_IP, "mode": "iptables",
        "healthzBindAddress": f"127.0.0.1:{healthz_port}", "metricsBindAddress": f"127.0.0.1:{metrics_port}",
        "clusterCIDR": POD_SUBNET, "nodePortAddresses": [f"{NODE_IP}/32"],
        "iptables": {"localhostNodePorts": False},
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
    }


def kube_proxy_command(kube_proxy: Path, paths: Paths) -> list:
    return [kube_proxy, "--config", paths.kube_proxy_config, "--v", "1"]


def placement() -> dict:
    """What a pod spec needs to land on the real node (nodeSelector and toleration)."""
    return {"nodeSelector": {REAL_NODE_LABEL[0]: REAL_NODE_LABEL[1]},
            "tolerations": [{"key": REAL_NODE_TAINT["key"], "operator": "Equal",
                             "value": REAL_NODE_TAINT["value"], "effect": REAL_NODE_TAINT["effect"]}]}


# ---------- host state: make ----------

def make_bridge() -> None:
    """The pods' bridge with NODE_IP, before the apiserver starts: it listens there."""
    _run("ip", "link", "add", BRIDGE, "type", "bridge")
    _run("ip", "addr", "add", f"{NODE_IP}/24", "dev", BRIDGE)
    _run("ip", "link", "set", BRIDGE, "up")


def prepare_host(paths: Paths, pause_ref: str, kubeconfigs: dict[str, Path], ports: dict, pki: Path,
                 service_cidr: str, tainted: bool) -> None:
    """Files the node's processes need (the bridge is made already: make_bridge)."""
    for sub in ("containerd", "run", "cni", "kubelet", "pod-logs", "ipam"):
        (paths.root / sub).mkdir(parents=True, exist_ok=True)
    paths.containerd_config.write_text(containerd_config(paths, pause_ref))
    (paths.cni_conf_dir / "10-tfop-e2e.conflist").write_text(json.dumps(cni_config(paths, service_cidr), indent=1))
    (paths.root / "resolv.conf").write_text(f"nameserver {NODE_IP}\n")
    paths.corefile.write_text(corefile(kubeconfigs["coredns"], ports["coredns_health"], ports["coredns_ready"]))
    paths.kubelet_config.write_text(yaml.safe_dump(kubelet_config(paths, pki, ports["kubelet_healthz"], tainted)))
    paths.kube_proxy_config.write_text(yaml.safe_dump(kube_proxy_config(
        kubeconfigs["kube-proxy"], ports["kube_proxy_healthz"], ports["kube_proxy_metrics"])))
    if not paths.sysctls.exists():  # after a crash, the file still holds the values from before
        paths.sysctls.write_text(json.dumps({k: _read_sysctl(k) for k in KUBELET_SYSCTLS}))
    if not CONTAINERD_FIXED_STATE.exists():
        paths.made_fixed_state.touch()


def containerd_ready(paths: Paths) -> bool:
    return ctr(paths, "version", check=False).returncode == 0


def ctr(paths: Paths, *args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
    return _run("ctr", "--address", str(paths.containerd_socket), "--namespace", "k8s.io", *args,
                check=check, timeout=timeout)


def container_id(pod: dict) -> str:
    """containerd's id of a pod's first container (for ctr), from its status."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    cid = statuses[0].get("containerID", "") if statuses else ""
    if not cid.startswith("containerd://"):
        raise AssertionError(f"pod {pod['metadata']['name']} has no running container: {statuses}")
    return cid.removeprefix("containerd://")


def image_refs(paths: Paths) -> set[str]:
    out = ctr(paths, "images", "list", "--quiet").stdout
    return {line.strip() for line in out.splitlines() if line.strip()}


def import_image(paths: Paths, archive: Path, ref: str) -> None:
    if ref not in image_refs(paths):
        ctr(paths, "images", "import", str(archive))
    if ref not in image_refs(paths):
        raise RuntimeError(f"importing {archive} into containerd did not make image {ref}")


# ---------- host state: undo ----------

def leftovers(paths: Paths = PATHS) -> dict[str, list[str]]:
    """What of a real node is on the host now, by kind: empty lists when nothing is."""
    return {
        "processes": [f"{pid} {cmd[:200]}" for pid, cmd in _node_processes(paths)],
        "mounts": _mounts_under(paths.root),
        "links": [BRIDGE] if Path(f"/sys/class/net/{BRIDGE}").exists() else [],
        "iptables chains": _node_chains(),
        "cgroups": [str(p) for p in _pod_cgroups()],
    }


def teardown(paths: Paths = PATHS) -> None:
    """Undo everything a real node did to the host, whether its processes still run or not:
    kill pods' processes and shims, unmount, delete the bridge, the cgroups and the kubelet's
    chains, restore the sysctls, remove the files. Safe to run again."""
    for cgroup in _pod_cgroups():  # every container's processes, wherever their shim is
        _kill_procs(cgroup)
    processes = _node_processes(paths)
    for pid, _ in processes:
        _kill(pid)
    _wait_gone(paths, 10)
    for cmd in (cmd for _, cmd in processes if "containerd-shim" in cmd):
        _shim_socket(paths, cmd).unlink(missing_ok=True)
    for mount in sorted(_mounts_under(paths.root), key=len, reverse=True):
        _run("umount", "--lazy", mount, check=False)
    if Path(f"/sys/class/net/{BRIDGE}").exists():
        _run("ip", "link", "delete", BRIDGE, check=False)
    for cgroup in sorted(_pod_cgroups(), key=lambda p: len(p.parts), reverse=True):
        _rmdir_cgroup(cgroup)
    _delete_node_chains()
    if paths.sysctls.exists():
        for key, value in json.loads(paths.sysctls.read_text()).items():
            if value is not None:
                _write_sysctl(key, value)
    _remove_container_log_links(paths)
    if paths.made_fixed_state.exists():
        shutil.rmtree(CONTAINERD_FIXED_STATE, ignore_errors=True)
    if paths.root.exists() and not _mounts_under(paths.root):
        shutil.rmtree(paths.root, ignore_errors=True)


def _node_processes(paths: Paths) -> list[tuple[int, str]]:
    """containerd, its shims, the kubelet and CoreDNS of this root: their command lines name it."""
    found = []
    marker = str(paths.root)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        if marker in cmd:
            found.append((int(entry.name), cmd))
    return found


def _shim_socket(paths: Paths, shim_command: str) -> Path:
    """Where containerd 1.6 puts a shim's socket: named by the hash of its address, namespace and id."""
    words = shim_command.split()
    ident, namespace = words[words.index("-id") + 1], words[words.index("-namespace") + 1]
    digest = hashlib.sha256(f"{paths.containerd_socket}/{namespace}/{ident}".encode()).hexdigest()
    return CONTAINERD_FIXED_STATE / "s" / digest


def _wait_gone(paths: Paths, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while _node_processes(paths) and time.monotonic() < deadline:
        time.sleep(0.1)


def _mounts_under(root: Path) -> list[str]:
    prefix = str(root) + "/"
    mounts = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point == str(root) or point.startswith(prefix):
            mounts.append(point)
    return mounts


def _pod_cgroups() -> list[Path]:
    """Every cgroup of the pods subtree, in every hierarchy (cgroup v1 controllers, v2)."""
    found = []
    for hierarchy in [CGROUP_FS, *CGROUP_FS.iterdir()] if CGROUP_FS.is_dir() else []:
        top = hierarchy / POD_CGROUP
        if top.is_dir():
            found += [top, *(p for p in top.rglob("*") if p.is_dir())]
    return found


def _kill_procs(cgroup: Path) -> None:
    try:
        pids = (cgroup / "cgroup.procs").read_text().split()
    except OSError:
        return
    for pid in pids:
        _kill(int(pid))


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _rmdir_cgroup(cgroup: Path) -> None:
    # A cgroup goes once its last process has exited, which takes a moment after SIGKILL.
    deadline = time.monotonic() + 5
    while True:
        try:
            cgroup.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                return
            _kill_procs(cgroup)
            time.sleep(0.1)


def _node_chains() -> list[str]:
    found = []
    for tool in ("iptables", "ip6tables"):
        if shutil.which(tool) is None:
            continue
        for table in ("filter", "nat", "mangle"):
            rules = _run(tool, "-w", "-t", table, "-S", check=False).stdout.splitlines()
            found += [f"{tool} {table} {line.split()[1]}" for line in rules
                      if line.startswith("-N ") and line.split()[1].startswith(NODE_CHAIN_PREFIX)]
    return found


def _delete_node_chains() -> None:
    """The jumps into KUBE-* chains from the built-in ones, then every KUBE-* chain (emptied first:
    they jump to each other)."""
    chains: dict[tuple[str, str], list[str]] = {}
    for entry in _node_chains():
        tool, table, chain = entry.split()
        chains.setdefault((tool, table), []).append(chain)
    for (tool, table), names in chains.items():
        for line in _run(tool, "-w", "-t", table, "-S", check=False).stdout.splitlines():
            words = shlex.split(line)  # comments are quoted: "kubernetes service portals"
            if words[0] == "-A" and not words[1].startswith(NODE_CHAIN_PREFIX) and "-j" in words \
                    and words[words.index("-j") + 1].startswith(NODE_CHAIN_PREFIX):
                _run(tool, "-w", "-t", table, "-D", *words[1:], check=False)
        for chain in names:
            _run(tool, "-w", "-t", table, "-F", chain, check=False)
        for chain in names:
            _run(tool, "-w", "-t", table, "-X", chain, check=False)


def _remove_container_log_links(paths: Paths) -> None:
    # The kubelet links each container's log into /var/log/containers (a fixed path).
    links = Path("/var/log/containers")
    if not links.is_dir():
        return
    for link in links.iterdir():
        if link.is_symlink() and os.readlink(link).startswith(str(paths.pod_logs)):
            link.unlink(missing_ok=True)


def _read_sysctl(key: str) -> str | None:
    try:
        return (Path("/proc/sys") / key).read_text().strip()
    except OSError:
        return None


def _write_sysctl(key: str, value: str) -> None:
    try:
        (Path("/proc/sys") / key).write_text(value)
    except OSError:
        pass


def _run(*cmd: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc
