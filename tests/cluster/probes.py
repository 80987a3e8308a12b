"""Who can open a TCP connection to whom on the tier's pod network: one-shot probe pods.

A probe is a pod of the components image, pinned to one real node, that opens one TCP
connection to an address and port and exits 0 if the connection opened, 1 if not (refused,
reset or timed out after CONNECT_SECONDS). Its phase (Succeeded or Failed) is the answer.
Probing from both nodes covers both paths a packet takes: across the node's Linux bridge to
a pod of the same node, and routed between the nodes (harness/node_network.py).

``network_policies`` applies k8s/network-policies in a namespace the way an admin does in a
profile namespace (``kubectl apply -n <namespace> -k k8s/network-policies``), optionally
naming another namespace as the ingress gateway's; the nodes' kube-router enforces it
(tools/controlplane/harness/enforcer.py).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from real_pods import harness_node

from components.images import Images
from components.specs.pods import container_security_context, resources

REPO = Path(__file__).resolve().parents[2]
POLICIES = REPO / "k8s" / "network-policies"
CONNECT_SECONDS = 5
NAME_LABEL = "kubernetes.io/metadata.name"  # every namespace's own name (Kubernetes >= 1.21)
ENFORCED_SECONDS = 60  # how long kube-router may take to program a policy on both nodes
CONNECT = (
    "import socket, sys\n"
    "try:\n"
    f"    socket.create_connection((sys.argv[1], int(sys.argv[2])), {CONNECT_SECONDS}).close()\n"
    "except OSError as error:\n"
    "    sys.exit(f'not connected: {error}')\n"
    "print('connected')\n"
)


@dataclass(frozen=True)
class Probe:
    """A connection to try: from a pod in ``namespace`` (with ``labels``) on ``node``."""

    namespace: str
    node: str
    address: str
    port: int
    labels: dict = field(default_factory=dict, hash=False)


def probe_pod(probe: Probe) -> dict:
    """The probe's pod: restricted, no API token, on its node, never restarted."""
    container = {
        "name": "probe",
        "image": Images.resolve().components,
        "command": ["python", "-c", CONNECT, probe.address, str(probe.port)],
        "resources": resources("100m", "128Mi"),
        "securityContext": container_security_context(),
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "probe-", "labels": dict(probe.labels)},
        "spec": {
            "nodeName": probe.node,
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [container],
        },
    }


def connects(core, probe: Probe, timeout: float = 120) -> bool:
    """Whether the probe's pod opened its connection (the pod is deleted afterwards)."""
    pod = core.create_namespaced_pod(probe.namespace, probe_pod(probe))
    name = pod.metadata.name
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            phase = core.read_namespaced_pod(name, probe.namespace).status.phase
            if phase in ("Succeeded", "Failed"):
                return phase == "Succeeded"
            time.sleep(0.5)
        pytest.fail(f"probe pod {probe.namespace}/{name} did not finish in {timeout} s")
    finally:
        core.delete_namespaced_pod(name, probe.namespace, grace_period_seconds=0)


def from_both_nodes(namespace: str, address: str, port: int, labels=None) -> list[Probe]:
    """The same connection tried from a pod on each real node."""
    labels = labels or {}
    return [Probe(namespace, node, address, port, labels) for node in harness_node().NAMES]


def results(core, probes: list[Probe]) -> dict[Probe, bool]:
    """Each probe's answer, the probes run at once."""
    with ThreadPoolExecutor(len(probes)) as pool:
        return dict(zip(probes, pool.map(lambda p: connects(core, p), probes), strict=True))


def wait_until(core, expected: dict[Probe, bool]) -> float:
    """Seconds until one round of the probes answers as ``expected``; fails after
    ENFORCED_SECONDS, naming the probes that answered otherwise.

    Rounds, not one try: the enforcer lets a new pod's connections through only once it has
    seen the pod's address (kube-router v2.10.0 pkg/controllers/netpol/pod.go: a pod event
    requests a full sync of the chains and ipsets, which network_policy_controller.go Run
    does one at a time), so an allowed probe pod may be refused for a moment after it starts,
    as a neighbour may still connect for a moment after a policy is created.
    """
    started = time.monotonic()
    while True:
        found = results(core, list(expected))
        wrong = {probe: answer for probe, answer in found.items() if answer != expected[probe]}
        if not wrong:
            return time.monotonic() - started
        if time.monotonic() - started > ENFORCED_SECONDS:
            pytest.fail(f"within {ENFORCED_SECONDS} s these still answered otherwise: {wrong}")


def network_policies(kubectl, namespace: str, gateway: str = "") -> list[dict]:
    """k8s/network-policies applied in ``namespace``; ``gateway`` names the gateway's namespace.

    Naming it is the admin's patch of docs/security.md, done here on the rendered objects.
    """
    objects = [d for d in yaml.safe_load_all(kubectl("kustomize", str(POLICIES))) if d]
    if gateway:
        (predictor,) = [o for o in objects if o["metadata"]["name"] == "fmnist-predictor"]
        (rule,) = predictor["spec"]["ingress"]
        rule["from"][0]["namespaceSelector"]["matchLabels"][NAME_LABEL] = gateway
    kubectl("apply", "-n", namespace, "-f", "-", stdin=yaml.safe_dump_all(objects))
    return objects


def remove_network_policies(kubectl, namespace: str) -> None:
    """Delete k8s/network-policies from ``namespace``."""
    kubectl("delete", "-n", namespace, "-k", str(POLICIES), "--ignore-not-found")


@pytest.fixture
def isolated(namespace, kubectl) -> str:
    """This test's namespace with k8s/network-policies applied (import it into a module)."""
    network_policies(kubectl, namespace)
    return namespace
