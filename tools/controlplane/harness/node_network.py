"""The network between the real nodes: each node after the first in a network namespace.

real-node-1 lives in this machine's own namespace. real-node-N lives in ``fmnist-node-N``,
joined to this machine by a veth pair (``fmnist-nN`` here, ``eth0`` there) on 10.77.N.0/30:
the machine is 10.77.N.1, the node 10.77.N.2, its default route. Each node's pods have a
subnet of CLUSTER_CIDR on the node's own bridge; the machine routes each node's subnet to the
node, so a pod reaches a pod of another node through both nodes' routing, as with a
host-gateway pod network. Traffic between pods keeps its source address (a RETURN before
the bridge plugin's masquerade), as ip-masq-agent's non-masquerade CIDRs do.

A node's programs enter its network namespace with ``nsenter --net`` only: they share this
machine's mount namespace, so what the kubelet mounts for a pod is where runc looks.
Each kubelet has its own cgroup root (``/fmnist-node-N`` in every v1 hierarchy).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from harness.node_configs import CLUSTER_CIDR
from harness.processes import run

CGROUPS = Path("/sys/fs/cgroup")


def _ip(*args: str, netns: str | None = None) -> None:
    run(["ip", *(("-n", netns) if netns else ()), *args])


def _quietly(*command: str) -> None:
    subprocess.run(command, capture_output=True)


def keep_pod_sources(netns: str | None) -> None:
    """Exempt pod-to-pod traffic from masquerading, in the node's namespace (once)."""
    rule = ["-s", CLUSTER_CIDR, "-d", CLUSTER_CIDR, "-j", "RETURN"]
    enter = ["ip", "netns", "exec", netns] if netns else []
    check = subprocess.run(
        [*enter, "iptables", "-t", "nat", "-C", "POSTROUTING", *rule], capture_output=True
    )
    if check.returncode:
        run([*enter, "iptables", "-t", "nat", "-I", "POSTROUTING", "1", *rule])


def set_up(node) -> None:
    """The node's namespace, its link to this machine, its routes, forwarding and cgroups."""
    run(["sysctl", "-qw", "net.ipv4.ip_forward=1"])
    if node.netns is None:
        keep_pod_sources(None)
        return
    tear_down(node)  # whatever an interrupted run left
    run(["ip", "netns", "add", node.netns])
    _ip("link", "add", node.host_link, "type", "veth", "peer", "name", "eth0", "netns", node.netns)
    _ip("addr", "add", f"{node.host_side}/30", "dev", node.host_link)
    _ip("link", "set", node.host_link, "up")
    _ip("addr", "add", f"{node.address}/30", "dev", "eth0", netns=node.netns)
    for link in ("lo", "eth0"):
        _ip("link", "set", link, "up", netns=node.netns)
    _ip("route", "add", "default", "via", node.host_side, netns=node.netns)
    _ip("route", "add", node.pod_subnet, "via", node.address)
    run(["ip", "netns", "exec", node.netns, "sysctl", "-qw", "net.ipv4.ip_forward=1"])
    keep_pod_sources(node.netns)
    make_cgroup_root(node.cgroup_root)


def tear_down(node) -> None:
    """Remove the node's namespace (its links and routes go with it) and cgroup root."""
    if node.netns is None:
        return
    _quietly("ip", "netns", "delete", node.netns)
    _quietly("ip", "link", "delete", node.host_link)
    for hierarchy in CGROUPS.iterdir():
        folder = hierarchy / node.cgroup_root.lstrip("/")
        if folder.is_dir():  # deepest first: a cgroup goes only once its children have
            for cgroup in sorted(folder.rglob("*/"), key=lambda p: -len(p.parts)):
                _quietly("rmdir", str(cgroup))
            _quietly("rmdir", str(folder))


def make_cgroup_root(root: str) -> None:
    """``root`` in every cgroup v1 hierarchy; cpuset's with its parent's CPUs and memory nodes.

    The kubelet refuses a cgroup root that does not exist (pkg/kubelet/cm
    container_manager_linux.go validateSystemRequirements, cgroupManager.Exists).
    """
    for hierarchy in CGROUPS.iterdir():
        if not (hierarchy / "cgroup.procs").exists() or hierarchy.name == "unified":
            continue
        folder = hierarchy / root.lstrip("/")
        folder.mkdir(exist_ok=True)
        if hierarchy.name == "cpuset":
            for name in ("cpuset.cpus", "cpuset.mems"):
                (folder / name).write_text((hierarchy / name).read_text())
