"""Real nodes: containerd v2 with runc, the bridge CNI, a kubelet and kube-proxy, beside kwok's.

Pods bound to one run in real containers of images built on this machine (harness/images.py),
pulled from the tier's registry (harness/registry.py): the kubelet (k8s.io/kubernetes
cmd/kubelet, the tier's own release) talks CRI to containerd (github.com/containerd/
containerd/v2 cmd/containerd), which starts each container with Debian's runc, in its own
network namespace on the node's bridge (Debian's containernetworking-plugins). kube-proxy
(cmd/kube-proxy, iptables mode) gives the node's namespace the Services' ClusterIPs.

There are two, ``real-node-1`` in this machine's network namespace and ``real-node-2`` in a
namespace of its own (harness/node_network.py), so that a job's ranks can run on two kubelets
and talk over the pod network between nodes. Both carry the taint
``fmnist.dev/real-node=true:NoSchedule`` and the label ``fmnist.dev/node=real``, so that no
kwok-played test lands on them by chance. A namespace whose pods must run for real says so the
way a cluster admin pins a namespace to a node pool: the PodNodeSelector and
PodTolerationRestriction admission plugins' annotations (``REAL_NAMESPACE_ANNOTATIONS``),
which the apiserver applies to every pod created there, whoever creates it.

Where things live, per node N (the first without the ``-N``): sockets and runtime state under
``/run/fmnist-node-N``, the kubelet's root under ``/var/lib/fmnist-node-N``, containerd's image
store in the machine cache (``CACHE/containerd``, ``CACHE/containerd-node-N``) so that images
survive a fresh clone. The
local volumes (harness/volumes.py) are folders of this machine that both nodes mount.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from harness import enforcer, node_configs, node_network, registry
from harness.images import IMAGE_NAMES, ImageSet
from harness.paths import BIN, CACHE, PIDS
from harness.processes import Process, run, terminate, wait_for

LABEL = ("fmnist.dev/node", "real")
TAINT = {"key": "fmnist.dev/real-node", "value": "true", "effect": "NoSchedule"}
REAL_NAMESPACE_ANNOTATIONS = {
    # k8s.io/kubernetes v1.36.3 plugin/pkg/admission/podnodeselector/admission.go
    "scheduler.alpha.kubernetes.io/node-selector": f"{LABEL[0]}={LABEL[1]}",
    # plugin/pkg/admission/podtolerationrestriction/admission.go
    "scheduler.alpha.kubernetes.io/defaultTolerations": json.dumps(
        [{"key": TAINT["key"], "operator": "Equal", "value": "true", "effect": "NoSchedule"}]
    ),
}
API_SERVICE = "https://10.96.0.1:443"  # the apiserver from any namespace (api_service.py)


@dataclass(frozen=True)
class RealNode:
    """One real node: its name, its network and where its programs keep their files."""

    index: int  # 1, 2, ...

    @property
    def name(self) -> str:
        """``real-node-N``: the Node object and its hostname label."""
        return f"real-node-{self.index}"

    @property
    def first(self) -> bool:
        """Whether the node lives in this machine's own network namespace."""
        return self.index == 1

    def _suffix(self) -> str:
        return "" if self.first else f"-{self.index}"

    @property
    def netns(self) -> str | None:
        """Its network namespace; None for this machine's own."""
        return None if self.first else f"fmnist-node-{self.index}"

    @property
    def run_dir(self) -> Path:
        """Sockets and runtime state (short paths: unix sockets have a length limit)."""
        return Path(f"/run/fmnist-node{self._suffix()}")

    @property
    def state_dir(self) -> Path:
        """The kubelet's root and pod log folders."""
        return Path(f"/var/lib/fmnist-node{self._suffix()}")

    @property
    def containerd_root(self) -> Path:
        """Where containerd keeps its images: the machine cache, kept across clones."""
        return CACHE / ("containerd" if self.first else f"containerd-node-{self.index}")

    @property
    def socket(self) -> Path:
        """The socket containerd serves on."""
        return self.run_dir / "containerd.sock"

    @property
    def hosts_dir(self) -> Path:
        """The registry hosts of containerd: the tier's registry mirrors each upstream one."""
        return self.run_dir / "certs.d"

    @property
    def pod_logs(self) -> Path:
        """The kubelet's pod log folder (/var/log/pods for the first node)."""
        return Path("/var/log/pods") if self.first else self.state_dir / "pod-logs"

    @property
    def cgroup_root(self) -> str:
        """The kubelet's cgroup root."""
        return "/" if self.first else f"/fmnist-node-{self.index}"

    @property
    def pod_subnet(self) -> str:
        """The node's pod addresses: 10.88.0.0/16 for the first, 10.89.0.0/16 next."""
        return f"10.{87 + self.index}.0.0/16"

    @property
    def gateway(self) -> str:
        """The bridge's address: its pods' gateway."""
        return f"10.{87 + self.index}.0.1"

    @property
    def bridge(self) -> str:
        """The node's bridge."""
        return f"fmnist{self.index - 1}"

    @property
    def host_link(self) -> str:
        """This machine's end of the veth pair to the node's namespace."""
        return f"fmnist-n{self.index}"

    @property
    def host_side(self) -> str:
        """This machine's address on the link to the node."""
        return f"10.77.{self.index}.1"

    @property
    def address(self) -> str:
        """The node's InternalIP: the machine's own for the first, its link's otherwise."""
        return node_ip() if self.first else f"10.77.{self.index}.2"

    def command(self, argv: list[str]) -> list[str]:
        """``argv`` in the node's network namespace (only that one: mounts stay shared)."""
        return argv if self.first else ["nsenter", f"--net=/run/netns/{self.netns}", "--", *argv]

    def ctr(self, bin_dir: Path = BIN) -> list[str]:
        """The ``ctr`` command for this node's containerd."""
        return [str(bin_dir / "ctr"), "--address", str(self.socket)]

    def program(self, name: str) -> str:
        """The name the harness knows one of the node's programs by: ``kubelet-2``."""
        return f"{name}{self._suffix()}"

    def process(self, name: str, argv: list[str]) -> Process:
        """One of the node's programs, logging to build/cluster/logs/<program>.log."""
        return Process(self.program(name), self.command(argv))


NODES = (RealNode(1), RealNode(2))
NAMES = tuple(node.name for node in NODES)


def node_ip() -> str:
    """The address of the interface the default route leaves by (what a node reports)."""
    routes = json.loads(run(["ip", "-j", "-4", "route", "show", "default"], capture=True))
    device = routes[0]["dev"]
    (info,) = json.loads(run(["ip", "-j", "-4", "addr", "show", "dev", device], capture=True))
    return info["addr_info"][0]["local"]


def start_containerd(
    node: RealNode, sandbox: str, bin_dir: Path = BIN, in_its_network: bool = True
) -> tuple[Process, int]:
    """Start the node's containerd (binaries in ``bin_dir``); it and its pid once it serves.

    ``in_its_network=False``: in this machine's network namespace, which is enough to pull
    images (the node's own may not exist yet).
    """
    for folder in (node.run_dir / "net.d", node.run_dir / "ipam", node.containerd_root):
        folder.mkdir(parents=True, exist_ok=True)
    conflist = node.run_dir / "net.d" / "10-fmnist.conflist"
    conflist.write_text(json.dumps(node_configs.cni_config(node), indent=1))
    registry.write_hosts(node.hosts_dir, IMAGE_NAMES)
    config = node.run_dir / "containerd.toml"
    config.write_text(node_configs.containerd_config(node, sandbox))
    argv = [str(bin_dir / "containerd"), "--config", str(config)]
    containerd = node.process("containerd", argv)
    if not in_its_network:
        containerd.command = argv
    containerd.env = {"PATH": f"{bin_dir}:/usr/sbin:/usr/bin:/sbin:/bin"}  # finds its shim
    pid = containerd.start()
    up = lambda: containerd_up(node, bin_dir)  # noqa: E731
    wait_for(f"{node.name}'s containerd", up, 60, containerd.name)
    return containerd, pid


def pull_images(node: RealNode, images: tuple[ImageSet, ...], bin_dir: Path = BIN) -> None:
    """Pull the image sets into the node's containerd from the registry (once per key)."""
    for image_set in images:
        registry.pull(image_set, node.ctr(bin_dir), node.hosts_dir, node.containerd_root)


def preload(images: ImageSet, sandbox: str, bin_dir: Path) -> None:
    """Pull ``images`` into every node's image store now, with no node running.

    ``cluster.py build`` does this beside the Go builds, so that cluster-up finds the 7 GB
    of our images already unpacked. A containerd already serving (a cluster is up) is used.
    """
    for node in NODES:
        if containerd_up(node, bin_dir):
            pull_images(node, (images,), bin_dir)
            continue
        _, pid = start_containerd(node, sandbox, bin_dir, in_its_network=False)
        try:
            pull_images(node, (images,), bin_dir)
        finally:
            terminate([pid], 15)
            (PIDS / f"{node.program('containerd')}.pid").unlink(missing_ok=True)
            shutil.rmtree(node.run_dir, ignore_errors=True)


def start(
    node: RealNode, ca_dir: Path, server: str, dns_ip: str, images: tuple, sandbox: str
) -> list[tuple[Process, int]]:
    """The node's network, containerd (with ``images``), kubelet and kube-proxy, with pids."""
    server = server if node.first else API_SERVICE
    node_network.set_up(node)
    for folder in (node.state_dir / "kubelet", node.pod_logs):
        folder.mkdir(parents=True, exist_ok=True)
    started = [start_containerd(node, sandbox)]
    pull_images(node, images)
    for process in (_kubelet(node, ca_dir, server, dns_ip), _kube_proxy(node, ca_dir, server)):
        started.append((process, process.start()))
    return started


def _kubelet(node: RealNode, ca_dir: Path, server: str, dns_ip: str) -> Process:
    """The node's kubelet, its certificate, kubeconfig and configuration written."""
    ca, pki = ca_dir / "ca.crt", node.run_dir / "pki"
    subject = f"/O=system:nodes/CN=system:node:{node.name}"
    user = node_configs.client_certificate(ca_dir, pki, "kubelet", subject)
    config = node.run_dir / "kubelet.yaml"
    config.write_text(json.dumps(node_configs.kubelet_config(node, dns_ip, ca, TAINT)))
    kubeconfig = node.run_dir / "kubelet.kubeconfig"
    node_configs.kubeconfig(kubeconfig, node.name, user, ca, server)
    return node.process(
        "kubelet",
        [
            str(BIN / "kubelet"),
            f"--config={config}",
            f"--kubeconfig={kubeconfig}",
            f"--root-dir={node.state_dir / 'kubelet'}",
            f"--cert-dir={pki}",
            f"--hostname-override={node.name}",
            f"--node-ip={node.address}",
            f"--node-labels={LABEL[0]}={LABEL[1]}",
            "--v=1",
        ],
    )


def _kube_proxy(node: RealNode, ca_dir: Path, server: str) -> Process:
    """The node's kube-proxy (as system:kube-proxy), its kubeconfig and configuration written."""
    ca, pki = ca_dir / "ca.crt", node.run_dir / "pki"
    user = node_configs.client_certificate(ca_dir, pki, "kube-proxy", "/CN=system:kube-proxy")
    kubeconfig = node.run_dir / "kube-proxy.kubeconfig"
    node_configs.kubeconfig(kubeconfig, "kube-proxy", user, ca, server)
    config = node.run_dir / "kube-proxy.yaml"
    config.write_text(json.dumps(node_configs.kube_proxy_config(node, kubeconfig)))
    return node.process("kube-proxy", [str(BIN / "kube-proxy"), f"--config={config}"])


def containerd_up(node: RealNode, bin_dir: Path = BIN) -> bool:
    """Whether the node's containerd answers on its socket."""
    if not node.socket.exists():
        return False
    result = subprocess.run([*node.ctr(bin_dir), "version"], capture_output=True, timeout=10)
    return result.returncode == 0


def stop(node: RealNode) -> None:
    """Stop the node's programs (its enforcer too), containers, containerd; undo its network."""
    for program in ("kubelet", "kube-proxy", enforcer.PROGRAM):
        _stop_program(node.program(program), 15)
    enforcer.clean_up(node)
    containerd = node.program("containerd")
    if (PIDS / f"{containerd}.pid").exists() and containerd_up(node):
        _remove_containers(node)
    shims = subprocess.run(
        ["pgrep", "-f", f"containerd-shim-runc-v2 .*{node.socket}"], capture_output=True, text=True
    ).stdout.split()
    terminate([int(pid) for pid in shims], 10)
    _stop_program(containerd, 15)
    _unmount_under(node.state_dir)
    _unmount_under(node.run_dir)
    if node.first:
        subprocess.run(["ip", "link", "delete", node.bridge], capture_output=True)
    node_network.tear_down(node)
    shutil.rmtree(node.run_dir, ignore_errors=True)
    shutil.rmtree(node.state_dir, ignore_errors=True)


def _stop_program(name: str, timeout: float) -> None:
    pid_file = PIDS / f"{name}.pid"
    if pid_file.exists():
        terminate([int(pid_file.read_text())], timeout)
        pid_file.unlink()


def _remove_containers(node: RealNode) -> None:
    """Kill every task in the CRI namespace and remove its container (sandboxes included)."""
    ctr = [*node.ctr(), "-n", "k8s.io"]
    tasks = run([*ctr, "tasks", "list", "-q"], capture=True).split()
    for task in tasks:
        subprocess.run([*ctr, "tasks", "kill", "-s", "SIGKILL", task], capture_output=True)
    deadline = time.monotonic() + 15
    while run([*ctr, "tasks", "list", "-q"], capture=True).split() and time.monotonic() < deadline:
        for task in tasks:
            subprocess.run([*ctr, "tasks", "delete", task], capture_output=True)
        time.sleep(0.5)
    for container in run([*ctr, "containers", "list", "-q"], capture=True).split():
        subprocess.run([*ctr, "containers", "delete", container], capture_output=True)


def _unmount_under(folder: Path) -> None:
    """Unmount whatever is mounted under ``folder``, deepest first (volumes, netns, shm)."""
    mounts = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
    inside = [m for m in mounts if m == str(folder) or m.startswith(str(folder) + "/")]
    for mount in sorted(inside, reverse=True):
        subprocess.run(["umount", "-l", mount], capture_output=True)


def ready_check(api, node: RealNode) -> bool:
    """Whether the node reports Ready."""
    status, found = api.call("GET", f"/api/v1/nodes/{node.name}")
    if status != 200:
        return False
    conditions = found.get("status", {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def wait_ready(api, node: RealNode) -> None:
    """Wait until the node is Ready (the kubelet registered and its runtime and network are)."""
    kubelet = node.program("kubelet")
    wait_for(f"node {node.name} to be Ready", lambda: ready_check(api, node), 120, kubelet)
