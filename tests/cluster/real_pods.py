"""Fixtures for the tests whose pods run for real on the tier's kubelet node.

tools/controlplane/harness/node.py starts two real nodes: each containerd v2 with runc, a
bridge pod network, a kubelet and kube-proxy of the tier's own Kubernetes release; CoreDNS
answers cluster names. Our images and the stand-ins for the images controllers inject are
built on this machine (harness/images.py) and pulled by each node from the tier's registry
(harness/registry.py). A namespace's pods land on them when the namespace carries the
harness's PodNodeSelector / PodTolerationRestriction annotations; the ``real_namespace``
fixture adds them and a Pod Security level to enforce. Workspaces are local
PersistentVolumes both nodes mount, each a fresh ``root:root 0755`` folder the test can read.
"""

from __future__ import annotations

import importlib
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import kubernetes
import pytest
import requests

from components.runtime.kserve import ISVC_LABEL
from serving.defaults import HTTP_PORT

HARNESS = Path(__file__).resolve().parents[2] / "tools" / "controlplane"
TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


def token_mounts(pod) -> list[str]:
    """The containers of ``pod`` that mount a service-account token at TOKEN_DIR.

    k8s.io/kubernetes v1.36.3 plugin/pkg/admission/serviceaccount/admission.go: the real API
    server's ServiceAccount admission adds the projected ``kube-api-access-*`` volume at
    TOKEN_DIR to every container, unless the pod says ``automountServiceAccountToken: false``.
    """
    containers = [*(pod.spec.init_containers or []), *pod.spec.containers]
    return [
        c.name for c in containers if any(m.mount_path == TOKEN_DIR for m in c.volume_mounts or [])
    ]


def harness_module(name: str):
    """A module of tools/controlplane/harness (e.g. "volumes": the storage class)."""
    if str(HARNESS) not in sys.path:
        sys.path.insert(0, str(HARNESS))
    return importlib.import_module(f"harness.{name}")


def harness_node():
    """tools/controlplane/harness/node.py: the nodes' names, label and namespace annotations."""
    return harness_module("node")


@pytest.fixture(name="namespace", params=["baseline"])
def real_namespace(request, namespace_factory):
    """A test namespace whose pods run on the real nodes, enforcing ``request.param``.

    Import it into a test module to replace conftest's kwok-played ``namespace`` there. The
    Pod Security level is "baseline" unless a test parametrizes ``namespace`` indirectly.
    """
    labels = {"pod-security.kubernetes.io/enforce": request.param}
    return namespace_factory(labels, dict(harness_node().REAL_NAMESPACE_ANNOTATIONS))


@dataclass(frozen=True)
class Workspace:
    """A PVC bound to a local volume of the real nodes, and that volume's folder here."""

    pvc: str
    path: Path


def bind_workspace(core, namespace: str, name: str = "workspace", timeout: float = 60) -> Workspace:
    """Create a PVC of the node's local storage class; wait until it is bound."""
    body = {
        "metadata": {"name": name},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": harness_module("volumes").STORAGE_CLASS,
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }
    core.create_namespaced_persistent_volume_claim(namespace, body)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        claim = core.read_namespaced_persistent_volume_claim(name, namespace)
        if claim.status.phase == "Bound":
            volume = core.read_persistent_volume(claim.spec.volume_name)
            return Workspace(name, Path(volume.spec.local.path))
        time.sleep(0.5)
    pytest.fail(f"PVC {namespace}/{name} not bound after {timeout} s (free local volumes?)")


def pods_of(core, namespace: str, selector: str = "") -> list:
    """The namespace's pods (matching ``selector``)."""
    return core.list_namespaced_pod(namespace, label_selector=selector).items


def running_predictor(core, namespace: str, model: str):
    """The InferenceService's one predictor pod that runs and is not going away."""
    (pod,) = [
        p
        for p in pods_of(core, namespace, f"{ISVC_LABEL}={model}")
        if p.metadata.deletion_timestamp is None and p.status.phase == "Running"
    ]
    return pod


def v1_predictions(pod, model: str, images) -> list[dict]:
    """The predictor pod's v1 answer for ``images`` (uint8 [N, 28, 28])."""
    answer = requests.post(
        f"http://{pod.status.pod_ip}:{HTTP_PORT}/v1/models/{model}:predict",
        json={"instances": [image.tolist() for image in images]},
        timeout=60,
    )
    assert answer.status_code == 200, answer.text
    return answer.json()["predictions"]


def pod_log(core, namespace: str, pod: str, container: str | None = None) -> str:
    """The pod's log, from the kubelet through the apiserver."""
    return core.read_namespaced_pod_log(pod, namespace, container=container)


def describe_pods(core, namespace: str) -> str:
    """Each pod's phase, node and container states, and the namespace's warning events."""
    lines = []
    for pod in pods_of(core, namespace):
        lines.append(f"{pod.metadata.name}: {pod.status.phase} on {pod.spec.node_name}")
        statuses = (pod.status.init_container_statuses or []) + (
            pod.status.container_statuses or []
        )
        for status in statuses:
            state = kubernetes.client.ApiClient().sanitize_for_serialization(status.state)
            lines.append(f"  {status.name}: {state}")
    for event in core.list_namespaced_event(namespace).items:
        if event.type == "Warning":
            lines.append(f"event {event.involved_object.name}: {event.reason} {event.message}")
    return "\n".join(lines)


class PodRecorder:
    """While a step runs: the last state of each pod matching ``selector``, and the log of
    each container once it ended (the step deletes its job, and the job's pods, when done)."""

    def __init__(self, core, namespace: str, selector: str):
        self.core, self.namespace, self.selector = core, namespace, selector
        self.pods: dict[str, object] = {}
        self.logs: dict[tuple[str, str], str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._record, daemon=True)

    def __enter__(self) -> PodRecorder:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _record(self) -> None:
        while not self._stop.wait(0.5):
            try:
                self._look()
            except kubernetes.client.exceptions.ApiException:
                pass  # a pod deleted between listing it and reading its log

    def _look(self) -> None:
        for pod in pods_of(self.core, self.namespace, self.selector):
            name = pod.metadata.name
            self.pods[name] = pod
            statuses = (pod.status.init_container_statuses or []) + (
                pod.status.container_statuses or []
            )
            for status in statuses:
                if status.state.terminated and (name, status.name) not in self.logs:
                    self.logs[name, status.name] = pod_log(
                        self.core, self.namespace, name, status.name
                    )


@pytest.fixture
def restricted_init_container():
    """The Training Operator as k8s/training-operator configures it, restored after the test.

    Its ``--pytorch-init-container-template-file`` gives ``init-pytorch`` a securityContext
    Pod Security "restricted" admits (training-operator v1.9.4
    pkg/controller.v1/pytorch/initcontainer.go reads the template once, at start).
    """
    restarts = harness_module("restarts")
    template = HARNESS.parents[1] / "k8s" / "training-operator" / "initContainer.yaml"
    restarts.restart("training-operator", (f"--pytorch-init-container-template-file={template}",))
    yield
    restarts.restart("training-operator")
