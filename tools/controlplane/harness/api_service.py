"""The ``kubernetes`` Service for the real node's pods: the API at its ClusterIP, no kube-proxy.

Every pod gets ``KUBERNETES_SERVICE_HOST=10.96.0.1`` and ``KUBERNETES_SERVICE_PORT=443`` (the
first address of the Service range; k8s.io/kubernetes v1.36.3
pkg/kubelet/kubelet_pods.go ``getServiceEnvVarMap``), which is where an in-cluster client
(the train step creating its PyTorchJob, the KFP driver) connects. This machine holds that
address on its loopback interface, like CoreDNS's (dns.py), and tcp_forward.py relays it to
the kube-apiserver, which listens on loopback only; the apiserver's certificate names the
address (kwokctl's ``kubeApiserverCertSANs``, harness/control_plane.py).
"""

from __future__ import annotations

import socket
import sys

from harness.dns import SERVED_HERE, hold_address
from harness.paths import CONTROLPLANE
from harness.processes import Process, wait_for

CLUSTER_IP = "10.96.0.1"  # the first address of dns.SERVICE_RANGE: the kubernetes Service
PORT = 443


def _answers() -> bool:
    """Whether something accepts connections on the Service's address."""
    try:
        with socket.create_connection((CLUSTER_IP, PORT), timeout=1):
            return True
    except OSError:
        return False


def start(server: str) -> dict[str, int]:
    """Relay CLUSTER_IP:PORT to ``server`` (the kubeconfig's https://127.0.0.1:<port>)."""
    hold_address(CLUSTER_IP)
    target = server.removeprefix("https://")
    forward = Process(
        "api-service",
        [sys.executable, str(CONTROLPLANE / "tcp_forward.py"), f"{CLUSTER_IP}:{PORT}", target],
    )
    pid = forward.start()
    wait_for(f"the kubernetes Service on {CLUSTER_IP}:{PORT}", _answers, 20, "api-service")
    return {"api-service": pid}


def keep_from_kube_proxy(api) -> None:
    """Label the ``kubernetes`` Service as served here, so kube-proxy leaves its address be.

    The apiserver's reconciler rewrites only the Service's ports and type, never its labels
    (k8s.io/kubernetes v1.36.3 pkg/controlplane/controller/kubernetesservice/controller.go).
    """
    path = "/api/v1/namespaces/default/services/kubernetes"
    status, answer = api.call("PATCH", path, {"metadata": {"labels": SERVED_HERE}})
    if status != 200:
        raise SystemExit(f"labelling the kubernetes Service: {status} {answer.get('message')}")
