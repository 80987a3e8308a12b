"""NetworkPolicies enforced on the real nodes: kube-router's policy controller on each.

The bridge CNI plugin enforces no NetworkPolicy, so each real node runs kube-router's network
policy controller beside it (tools/controlplane/kube-router/main.go: kube-router v2.10.0's
``pkg/controllers/netpol``, as upstream runs it with ``--run-firewall`` alone), in the node's
network namespace, as ``system:kube-router``. From the NetworkPolicies, pods and namespaces
it writes iptables chains and ipsets (``pkg/controllers/netpol/network_policy_controller.go``,
``pod.go``): every packet to or from a pod of the node that a policy selects goes through
that pod's chain, which accepts what a policy allows and rejects the rest; traffic from the
node itself (the kubelet's probes) is always accepted. Pods on one node talk across a Linux
bridge, so the kernel must hand bridged IPv4 to iptables: ``bridge-nf-call-iptables`` is 1
(set here, per network namespace) and kube-router matches such packets with ``-m physdev
--physdev-is-bridged``. It needs Debian's ``iptables`` and ``ipset`` (node-packages.txt).

Why not sigs.k8s.io/kube-network-policies: every version (v0.8.0
``pkg/networkpolicy/controller.go`` syncNFTablesRules, and v1.1.1) sends the packets it
judges to user space with nftables' ``queue`` expression, which this machine's kernel lacks
(``CONFIG_NFT_QUEUE`` is not set: ``nft add rule ... queue num 100`` answers "No such file or
directory"), and its one netlink batch then fails whole, so it would enforce nothing.
"""

from __future__ import annotations

from pathlib import Path

from harness import node_configs
from harness.paths import BIN
from harness.processes import Process, http_ok, run, wait_for

USER = "system:kube-router"
HEALTH_PORT = 20244  # kube-router's default --health-port
PROGRAM = "kube-router"
# What main.go reads: its Node (pkg/utils/node.go GetNodeObject) and what its informers watch.
RULES = [
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
    {"apiGroups": [""], "resources": ["pods", "namespaces"], "verbs": ["list", "watch"]},
    {
        "apiGroups": ["networking.k8s.io"],
        "resources": ["networkpolicies"],
        "verbs": ["list", "watch"],
    },
]


def rbac() -> list[dict]:
    """The ClusterRole of the enforcers and its binding to their user."""
    name = "fmnist-tier:kube-router"
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole"}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding"}
    return [
        {**role, "metadata": {"name": name}, "rules": RULES},
        {
            **binding,
            "metadata": {"name": name},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": name,
            },
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}],
        },
    ]


def process(node, ca_dir: Path, server: str) -> Process:
    """The node's enforcer, its certificate and kubeconfig written; in the node's network."""
    pki = node.run_dir / "pki"
    user = node_configs.client_certificate(ca_dir, pki, PROGRAM, f"/CN={USER}")
    kubeconfig = node_configs.kubeconfig(
        node.run_dir / f"{PROGRAM}.kubeconfig", PROGRAM, user, ca_dir / "ca.crt", server
    )
    run(node.command(["sysctl", "-qw", "net.bridge.bridge-nf-call-iptables=1"]))
    argv = [
        str(BIN / PROGRAM),
        f"--kubeconfig={kubeconfig}",
        f"--hostname-override={node.name}",
        f"--health-port={HEALTH_PORT}",
    ]
    return node.process(PROGRAM, argv)


def wait_ready(node) -> None:
    """Wait until the node's enforcer has synced its informers and answers its health check."""
    url = f"http://{node.address}:{HEALTH_PORT}/healthz"
    wait_for(f"{node.name}'s kube-router", lambda: http_ok(url), 60, node.program(PROGRAM))


def clean_up(node) -> None:
    """Remove the chains and ipsets of the node's enforcer (a node's own namespace goes whole)."""
    if node.first and (BIN / PROGRAM).exists():
        run([str(BIN / PROGRAM), "--cleanup-config"])
