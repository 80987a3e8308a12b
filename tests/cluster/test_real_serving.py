"""The deploy step with a real predictor: the serving image answers on the tier's kubelet node.

The deploy step (components/steps/deploy.py, components/runtime/kserve.py), run here as the
pipeline's account, publishes a model trained on this machine to a workspace PVC bound to a
local volume of the real nodes and creates the InferenceService (Standard/raw). KServe's
Deployment starts ``python -m serving`` from ghcr.io/fmnist-pipeline/serving in a real
container; the test then speaks v1 and v2 over real HTTP to the pod's IP and compares the
answers with the same model loaded here (test_serving_faults.py goes through the Service).

Upstream behaviour relied on:
- kserve v0.15.2 pkg/webhook/admission/pod/storage_initializer_injector.go
  InjectStorageInitializer: with ``enableDirectPvcVolumeMount`` (true in the tier's
  inferenceservice-config) a ``pvc://<claim>/<path>`` URI is the claim mounted into
  kserve-container at /mnt/models with ``subPath: <path>``, read-only (annotation
  ``storage.kserve.io/readonly`` unset), and no storage-initializer init container;
  STORAGE_URI becomes /mnt/models.
- kserve v0.15.2 pkg/controller/v1beta1/inferenceservice/reconcilers/deployment/
  deployment_reconciler.go setDefaultPodSpec: kserve-container without a readinessProbe gets
  a TCP probe on its first containerPort (8080), period 10 s.
- k8s.io/kubernetes v1.36.3 pkg/volume/local/local.go SetUpAt: a local volume gets the
  pod's fsGroup. pkg/kubelet/kuberuntime/kuberuntime_container_linux.go toKubeContainerUser
  and pkg/kubelet/kubelet_pods.go convertContainerStatusUser: the uid, gid and supplemental
  groups the runtime reports for the container's process are
  ``status.containerStatuses[].user.linux`` (pkg/features/kube_features.go:
  SupplementalGroupsPolicy, GA and locked on since v1.35).
  pkg/kubelet/kuberuntime/security_context_others.go verifyRunAsNonRoot: a container the
  kubelet refuses never starts (warning event "Failed"): a Ready predictor whose only kubelet
  warnings are failed readiness probes had nothing of KServe's refused.
"""

from __future__ import annotations

import json
import time
import uuid
from datetime import datetime

import numpy as np
import pytest
import requests
from real_pods import (  # noqa: F401  (real_namespace: this module's ``namespace``)
    bind_workspace,
    describe_pods,
    harness_node,
    pod_log,
    pods_of,
    real_namespace,
    token_mounts,
)

from components.runtime import kserve, volumes
from components.specs.inferenceservice import PREDICTOR_CONTAINER
from components.specs.params import Serving
from components.specs.pods import IMAGE_USER, container_security_context, pod_security_context
from serving.defaults import HTTP_PORT, MODEL_NAME
from trainer.model_dir import SERVED

pytestmark = [pytest.mark.cluster, pytest.mark.real_pods, pytest.mark.usefixtures("quick_polls")]
IMAGES = 16  # known test images per request
STORE = "fmnist-models"  # Serving's default model_pvc: the workspace PVC serves as the store
# A predictor's start, seen through a TCP readiness probe, is a few failed probes; the kubelet
# may warn of nothing else (FailedMount, Failed: a refused container, BackOff, ...).
EXPECTED_WARNINGS = {"Unhealthy"}
# First mounts the kubelet fails and retries on its own (k8s.io/kubernetes v1.36.3):
# - the pod's claim, refused while the Node authorizer's graph lags the pod's binding by a
#   moment (plugin/pkg/auth/authorizer/node/node_authorizer.go); seen in CI on 2026-12-01;
# - the service-account volume's kube-root-ca.crt, whose watch must sync within one second
#   (pkg/kubelet/util/manager/watch_based_manager.go, objectCache.Get), which a busy 2-CPU
#   node or the same lag can miss; seen in CI on 2026-12-02.
TRANSIENT_MOUNT_FAILURES = (
    "no relationship found between node",
    "failed to sync configmap cache: timed out waiting for the condition",
)


@pytest.fixture
def known_images(packed_small) -> tuple[np.ndarray, np.ndarray]:
    """The first IMAGES real test images (uint8 [N, 28, 28]) and their true labels."""
    from trainer.data import load_packed

    test = load_packed(packed_small).test
    return np.array(test.images[:IMAGES]), np.array(test.labels[:IMAGES])


def local_probabilities(model_dir, images: np.ndarray) -> np.ndarray:
    """What the model directory predicts here, with the predictor's own loader, [N, 10]."""
    import torch

    from serving.loader import load_served_model
    from trainer.model import normalize

    net, card = load_served_model(model_dir)
    with torch.inference_mode():
        inputs = normalize(torch.from_numpy(images), card.pixel_mean, card.pixel_std)
        return net(inputs).exp().numpy()


def deploy_for_real(namespace: str, core, model_dir, run_id: str) -> str:
    """The deploy step on the cluster, printing the pods if it fails; returns the URL."""
    from kfp import dsl

    from components.steps.deploy import deploy

    try:
        return deploy.python_func(
            model=dsl.Model(uri=str(model_dir)),
            dataset=dsl.Dataset(uri=str(model_dir)),  # read only by the local check
            serving=Serving(model_pvc=STORE, serving_timeout_seconds=420).to_dict(),
            target="cluster",
            run_id=run_id,
        )
    except BaseException:
        print(describe_pods(core, namespace))
        raise


def pod_json(kubectl, namespace: str, name: str) -> dict:
    """The pod as the apiserver has it (with fields the Python client may not model yet)."""
    return json.loads(kubectl("get", "pod", "-n", namespace, name, "-o", "json"))


def seconds_between(earlier: str, later: str) -> float:
    """Seconds from one API timestamp (RFC 3339, whole seconds) to another."""
    parse = datetime.fromisoformat
    return (parse(later) - parse(earlier)).total_seconds()


def is_transient_mount_failure(message: str) -> bool:
    """Whether a FailedMount message is one the kubelet retries on its own (see above)."""
    return any(words in message for words in TRANSIENT_MOUNT_FAILURES)


def kubelet_warnings(core, namespace: str, pod: str) -> dict[str, str]:
    """Reason -> message of the kubelet's warning events about ``pod``.

    The scheduler's (FailedScheduling while other tests hold the node's CPUs) are not the
    kubelet refusing anything, and are left out; so are the first mounts the kubelet retries
    (TRANSIENT_MOUNT_FAILURES).
    """
    events = core.list_namespaced_event(namespace).items
    return {
        e.reason: e.message
        for e in events
        if e.type == "Warning"
        and e.involved_object.name == pod
        and "kubelet" in {(e.source.component if e.source else None), e.reporting_component}
        and not (e.reason == "FailedMount" and is_transient_mount_failure(e.message))
    }


@pytest.mark.parametrize("namespace", ["baseline", "restricted"], indirect=True)
def test_the_serving_image_answers_v1_and_v2_from_the_pvc(
    as_pipeline,
    namespace,
    core,
    kubectl,
    monkeypatch,
    trained_model_dir,
    known_images,
    capsys,
    record_property,
):
    """The predictor pod runs on a real node as uid 10001, reads the model from the PVC
    mounted by KServe, passes its readiness probe and answers v1 and v2 as the model does here.
    """
    images, labels = known_images
    expected = local_probabilities(trained_model_dir, images)
    started = time.monotonic()
    store = bind_workspace(core, namespace, STORE)
    monkeypatch.setattr(volumes, "MODEL_STORE", str(store.path))  # the step's PVC mount
    run_id = f"run-{uuid.uuid4().hex[:6]}"
    deploy_for_real(namespace, core, trained_model_dir, run_id)
    deployed = time.monotonic()
    assert (store.path / MODEL_NAME / run_id / "model.pt").is_file()
    out = capsys.readouterr().out
    assert "serves the new model" in out, out

    (pod,) = [
        p
        for p in pods_of(core, namespace, f"{kserve.ISVC_LABEL}={MODEL_NAME}")
        if p.metadata.deletion_timestamp is None
    ]
    name = pod.metadata.name
    assert pod.spec.node_name in harness_node().NAMES
    assert pod.status.phase == "Running", describe_pods(core, namespace)
    # KServe's injections: the claim at /mnt/models, no init container, a TCP readiness probe.
    assert not pod.spec.init_containers
    assert token_mounts(pod) == []  # the predictor never calls the API
    assert [c.name for c in pod.spec.containers] == [PREDICTOR_CONTAINER]
    (container,) = pod.spec.containers
    (mount,) = [m for m in container.volume_mounts if m.mount_path == SERVED]
    assert (mount.sub_path, mount.read_only) == (f"{MODEL_NAME}/{run_id}", True)
    claims = {v.name: v.persistent_volume_claim for v in pod.spec.volumes}
    assert claims[mount.name].claim_name == STORE
    assert container.readiness_probe.tcp_socket.port == HTTP_PORT
    assert container.readiness_probe.period_seconds == 1  # ours, kept by KServe
    assert {e.name: e.value for e in container.env}["STORAGE_URI"] == SERVED
    # Our securityContext, unchanged by KServe, and what the real process runs as.
    client = core.api_client
    assert client.sanitize_for_serialization(container.security_context) == (
        container_security_context()
    )
    assert client.sanitize_for_serialization(pod.spec.security_context) == pod_security_context()
    pod_status = pod_json(kubectl, namespace, name)["status"]
    (status,) = pod_status["containerStatuses"]
    assert status["ready"] and status["restartCount"] == 0, describe_pods(core, namespace)
    start_to_ready = seconds_between(
        status["state"]["running"]["startedAt"],
        next(c for c in pod_status["conditions"] if c["type"] == "Ready")["lastTransitionTime"],
    )
    record_property("predictor_start_to_ready_s", start_to_ready)
    assert status["user"]["linux"]["uid"] == IMAGE_USER, status
    assert IMAGE_USER in status["user"]["linux"].get("supplementalGroups", []), status
    warnings = kubelet_warnings(core, namespace, name)
    assert set(warnings) <= EXPECTED_WARNINGS, warnings
    assert "Readiness probe failed" in warnings.get("Unhealthy", "Readiness probe failed")
    assert (store.path / MODEL_NAME / run_id / "model.pt").stat().st_gid == IMAGE_USER  # fsGroup

    base = f"http://{pod.status.pod_ip}:{HTTP_PORT}"
    assert requests.get(f"{base}/v2/models/{MODEL_NAME}/ready", timeout=10).json() == {
        "name": MODEL_NAME,
        "ready": True,
    }
    v1 = requests.post(
        f"{base}/v1/models/{MODEL_NAME}:predict",
        json={"instances": [image.tolist() for image in images]},
        timeout=60,
    )
    assert v1.status_code == 200, v1.text
    predictions = v1.json()["predictions"]
    assert [p["label"] for p in predictions] == expected.argmax(axis=1).tolist()
    probabilities = np.array([p["probabilities"] for p in predictions])
    np.testing.assert_allclose(probabilities, expected, atol=1e-4)
    tensor = {"name": "image", "shape": [IMAGES, 28, 28], "datatype": "UINT8"}
    v2 = requests.post(
        f"{base}/v2/models/{MODEL_NAME}/infer",
        json={"id": run_id, "inputs": [tensor | {"data": images.reshape(-1).tolist()}]},
        timeout=60,
    )
    assert v2.status_code == 200, v2.text
    outputs = {output["name"]: output for output in v2.json()["outputs"]}
    assert outputs["label"]["data"] == expected.argmax(axis=1).tolist()
    np.testing.assert_allclose(
        np.array(outputs["probabilities"]["data"]).reshape(IMAGES, 10), expected, atol=1e-4
    )
    assert (expected.argmax(axis=1) == labels).mean() > 0.5  # a trained model, not a guess
    log = pod_log(core, namespace, name, PREDICTOR_CONTAINER)
    print(
        f"deploy {deployed - started:.1f} s, container start to ready {start_to_ready} s, "
        f"requests {time.monotonic() - deployed:.1f} s; "
        f"kubelet warnings {warnings}; predictor log:\n{log[-3000:]}"
    )
