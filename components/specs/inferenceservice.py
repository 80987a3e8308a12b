"""The InferenceService (``serving.kserve.io/v1beta1``) that serves a published model.

A custom predictor: ``python -m serving`` from the serving image (KServe names the
container ``kserve-container``), with ``STORAGE_URI`` pointing at the model on a PVC, which
KServe's pod mutator mounts at /mnt/models (kserve v0.15.2 ``pkg/webhook/admission/pod/
storage_initializer_injector.go``). The pod runs restricted. With ``serving_gpus`` the
predictor runs the network on CUDA (``--device=cuda``: an image without CUDA torch stops at
start with a one-line error instead of holding an idle GPU) and tolerates the GPU nodes'
taint, like the training pods. The deployment mode annotation
is written in the naming the installed KServe understands (``compat.deployment_mode_name``).

In Standard mode a replica that is going away drains first: its preStop hook calls the
predictor's drain route (serving/drain.py), which answers every request from then on with
``Connection: close`` and returns after DRAIN_SECONDS, while the pod, already out of its
Service's endpoints, stops getting new connections; only then does the kubelet send SIGTERM
(k8s.io/kubernetes v1.36.3 pkg/kubelet/kuberuntime/kuberuntime_container.go killContainer).
Clients that keep connections open reconnect to a ready replica instead of having a
request cut off. Knative's queue-proxy drains its pods itself. The hook is an ``exec`` in
the container that calls the route on loopback: the predictor takes the drain call from a
loopback peer only, and a kubelet's ``httpGet`` hook comes from the node's address.

The predictor never calls the Kubernetes API, so its pod mounts no service-account token.

The predictor's pods carry ``spec.predictor.labels`` (kserve v0.15.2 ``pkg/controller/
v1beta1/inferenceservice/components/predictor.go`` buildObjectMeta, then the Deployment's pod
template in ``reconcilers/deployment/deployment_reconciler.go``): the role the NetworkPolicies
of k8s/network-policies select them by.

A Standard predictor is also probed every second: KServe's default readiness probe, a TCP
connect every 10 s (kserve v0.15.2 ``pkg/controller/v1beta1/inferenceservice/reconcilers/
deployment/deployment_reconciler.go`` setDefaultPodSpec, used only when the container has
none), kept a started predictor out of its Service for up to 10 s. The server opens its
port once the model is loaded (serving/__main__.py), so the same connect, every second,
makes a new replica ready within a second of that. Knative probes aggressively by itself.
"""

from __future__ import annotations

from components.specs.kinds import INFERENCESERVICE
from components.specs.params import Serving
from components.specs.pods import (
    GPU_TOLERATION,
    PREDICTOR_ROLE,
    ROLE_LABEL,
    container_security_context,
    pod_security_context,
    resources,
)
from serving.defaults import DRAIN_PATH, DRAIN_SECONDS, HTTP_PORT
from trainer.model_dir import SERVED


def drain_command() -> list[str]:
    """The preStop hook: ``GET DRAIN_PATH`` on loopback, from inside the container."""
    url = f"http://127.0.0.1:{HTTP_PORT}{DRAIN_PATH}"
    call = f"import urllib.request; urllib.request.urlopen({url!r}, timeout={DRAIN_SECONDS + 5})"
    return ["python", "-c", call]


DEPLOYMENT_MODE_ANNOTATION = "serving.kserve.io/deploymentMode"
# On every InferenceService this project creates: a deploy replaces no other (kserve.py).
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "fmnist-pipeline"
PREDICTOR_CONTAINER = "kserve-container"  # KServe's name for the predictor's main container
READINESS_PROBE = {
    "tcpSocket": {"port": HTTP_PORT},
    "periodSeconds": 1,
    "timeoutSeconds": 1,
    "failureThreshold": 3,
}


def inference_service(
    *, serving: Serving, namespace: str | None, storage_uri: str, mode_annotation: str
) -> dict:
    """The InferenceService named after the model, serving the model at ``storage_uri``.

    ``mode_annotation`` is the deployment mode as the cluster's KServe spells it.
    """
    args = [
        f"--model_name={serving.model_name}",
        f"--model_dir={SERVED}",
        f"--http_port={HTTP_PORT}",
    ]
    if serving.serving_gpus:
        args.append("--device=cuda")
    container = {
        "name": PREDICTOR_CONTAINER,
        "image": serving.serving_image,
        "command": ["python", "-m", "serving"],
        "args": args,
        "env": [{"name": "STORAGE_URI", "value": storage_uri}],
        "ports": [{"containerPort": HTTP_PORT, "protocol": "TCP"}],
        "resources": resources(
            serving.serving_cpu,
            serving.serving_memory,
            serving.serving_gpus,
            serving.serving_gpu_resource,
        ),
        "securityContext": container_security_context(),
    }
    metadata = {"name": serving.model_name, "labels": {MANAGED_BY_LABEL: MANAGED_BY}}
    if namespace:
        metadata["namespace"] = namespace
    metadata["annotations"] = {DEPLOYMENT_MODE_ANNOTATION: mode_annotation}
    predictor = {
        "labels": {ROLE_LABEL: PREDICTOR_ROLE},  # on its pods, for k8s/network-policies
        "minReplicas": serving.serving_min_replicas,
        "maxReplicas": serving.serving_max_replicas,
        "securityContext": pod_security_context(),
        "serviceAccountName": serving.serving_service_account,
        "automountServiceAccountToken": False,
        "containers": [container],
    }
    if serving.serving_gpus:
        predictor["tolerations"] = [dict(GPU_TOLERATION)]
    if serving.mode == "Standard":
        container["lifecycle"] = {"preStop": {"exec": {"command": drain_command()}}}
        container["readinessProbe"] = dict(READINESS_PROBE)
        # The drain, then the server's own graceful stop (default grace: 30 s).
        predictor["terminationGracePeriodSeconds"] = DRAIN_SECONDS + 30
    return {
        "apiVersion": INFERENCESERVICE.api_version,
        "kind": INFERENCESERVICE.kind,
        "metadata": metadata,
        "spec": {"predictor": predictor},
    }
