"""Cluster DNS for the real node's pods: CoreDNS with its kubernetes plugin, on this machine.

CoreDNS (github.com/coredns/coredns, pinned in tools/controlplane/coredns/go.mod) answers
``cluster.local`` from the API, as kube-dns does on a cluster: Services, headless Services
by their endpoints (a PyTorchJob's ``<job>-master-0``), and pods by hostname and subdomain (a
TrainJob's ``<name>-node-0-0.<name>``). It listens on the kube-dns Service's ClusterIP,
held by this machine's loopback interface, so that pods reach it through their gateway with
no service proxy; the kubelet writes that address into every pod's resolv.conf.
"""

from __future__ import annotations

import subprocess

from harness.paths import BIN, KUBECONFIG, RUN
from harness.processes import Process, free_port, http_ok, wait_for

SERVICE_RANGE = "10.96.0.0/16"  # the apiserver's --service-cluster-ip-range
DNS_IP = "10.96.0.10"
# A Service a program of this machine serves at its ClusterIP (held on the loopback
# interface) has no endpoints: kube-proxy would reject its traffic, so it skips the Services
# that name another proxy (k8s.io/kubernetes v1.36.3 cmd/kube-proxy/app/server.go).
SERVED_HERE = {"service.kubernetes.io/service-proxy-name": "fmnist-machine"}


def _corefile(ready_port: int) -> str:
    """Cluster names from the API, everything else from this machine's resolver."""
    return f""".:53 {{
    bind {DNS_IP}
    errors
    ready 127.0.0.1:{ready_port}
    kubernetes cluster.local in-addr.arpa ip6.arpa {{
        kubeconfig {KUBECONFIG}
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }}
    forward . /etc/resolv.conf
    cache 5
}}
"""


def hold_address(ip: str) -> None:
    """Put a Service's ClusterIP on the loopback interface (this kernel has no dummy links).

    A pod's packet to it goes out through the bridge gateway and is delivered locally, so a
    program of this machine listening there serves the Service with no service proxy. Kept
    across runs.
    """
    shown = subprocess.run(["ip", "-4", "addr", "show", "dev", "lo"], capture_output=True)
    if f"{ip}/32" not in shown.stdout.decode():
        subprocess.run(["ip", "addr", "add", f"{ip}/32", "dev", "lo"], check=True)


def start() -> dict[str, int]:
    """Start CoreDNS on DNS_IP; wait until its kubernetes plugin has synced."""
    hold_address(DNS_IP)
    ready = free_port()
    corefile = RUN / "coredns" / "Corefile"
    corefile.parent.mkdir(parents=True, exist_ok=True)
    corefile.write_text(_corefile(ready))
    process = Process("coredns", [str(BIN / "coredns"), "-conf", str(corefile)])
    pid = process.start()
    wait_for(
        "CoreDNS to be ready", lambda: http_ok(f"http://127.0.0.1:{ready}/ready"), 60, "coredns"
    )
    return {"coredns": pid}


def service() -> dict:
    """The kube-dns Service, so that DNS_IP is taken in the Service range as on a cluster."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "kube-dns",
            "namespace": "kube-system",
            "labels": {"k8s-app": "kube-dns", **SERVED_HERE},
        },
        "spec": {
            "clusterIP": DNS_IP,
            "ports": [
                {"name": "dns", "port": 53, "protocol": "UDP"},
                {"name": "dns-tcp", "port": 53, "protocol": "TCP"},
            ],
        },
    }
