"""Serve a model with KServe: publish it on a lasting PVC, apply the InferenceService, wait.

The run's workspace is deleted with the run, so the model is copied onto a PVC that
outlives it (mounted in the deploy step at MODEL_STORE_MOUNT); the InferenceService
reads it through ``STORAGE_URI=pvc://<pvc>/<model>/<run>``. The service is created or
updated, and counts as Ready only once Ready is reported for its current generation.
"""

import shutil
import time
from pathlib import Path

from components.k8s import KubeClient, apply, current_namespace
from components.launch_pytorchjob import condition_summary
from components.manifests import INFERENCESERVICE, inference_service, resources
from components.params import PipelineParams

MODEL_STORE_MOUNT = "/mnt/model-store"  # where the pipeline mounts the model_pvc
SERVING_CPU, SERVING_MEMORY = "1", "2Gi"  # per predictor replica
POLL_SECONDS = 5.0


def publish_model(model_dir: str, store_root: str, model_name: str, run_id: str) -> str:
    """Copy the model to ``<store_root>/<model_name>/<run_id>``; return that path relative."""
    relative = f"{model_name}/{run_id}"
    shutil.copytree(model_dir, Path(store_root) / relative, dirs_exist_ok=True)
    return relative


def build_isvc(params: PipelineParams, namespace: str | None, storage_uri: str) -> dict:
    """The InferenceService the deploy step applies for these parameters."""
    return inference_service(
        name=params.model_name,
        namespace=namespace,
        image=params.serving_image,
        storage_uri=storage_uri,
        resource_spec=resources(
            SERVING_CPU, SERVING_MEMORY, params.serving_gpus, params.gpu_resource
        ),
        min_replicas=params.serving_min_replicas,
        max_replicas=params.serving_max_replicas,
        deployment_mode=params.deployment_mode,
    )


def isvc_ready(isvc: dict) -> bool:
    """Ready=True, and not left over from a previous generation of the object."""
    status = isvc.get("status", {})
    observed = status.get("observedGeneration")
    if observed is not None and observed < isvc.get("metadata", {}).get("generation", 0):
        return False
    return any(
        item.get("type") == "Ready" and item.get("status") == "True"
        for item in status.get("conditions", [])
    )


def isvc_failure(isvc: dict) -> str | None:
    """Why the model can never become ready (it failed to load), else None."""
    model_status = isvc.get("status", {}).get("modelStatus", {})
    if model_status.get("states", {}).get("targetModelState") != "FailedToLoad":
        return None
    info = model_status.get("lastFailureInfo", {})
    return f"model failed to load: {info.get('reason', '?')}: {info.get('message', '')}"


def wait_for_isvc(kube: KubeClient, namespace: str, name: str, timeout_seconds: float) -> dict:
    """Poll until the InferenceService is Ready.

    Raises:
        RuntimeError: the model failed to load, or it was not Ready in time; the
            message lists the service's conditions.
    """
    deadline = time.monotonic() + timeout_seconds
    while True:
        isvc = kube.get(INFERENCESERVICE, namespace, name)
        if isvc is not None and isvc_ready(isvc):
            return isvc
        failure = isvc and isvc_failure(isvc)
        if failure or time.monotonic() >= deadline:
            what = failure or f"not Ready within {timeout_seconds:g} s"
            raise RuntimeError(
                f"InferenceService {namespace}/{name}: {what}.\nConditions:\n"
                f"{condition_summary(isvc or {})}"
            )
        time.sleep(max(0.0, min(POLL_SECONDS, deadline - time.monotonic())))


def deploy_to_kserve(params: PipelineParams, model_dir: str, run_id: str) -> str:
    """Publish the model, apply the InferenceService, wait for Ready; return its URL."""
    kube = KubeClient.connect()
    namespace = params.namespace or current_namespace()
    relative = publish_model(model_dir, MODEL_STORE_MOUNT, params.model_name, run_id)
    isvc = build_isvc(params, namespace, f"pvc://{params.model_pvc}/{relative}")
    apply(kube, INFERENCESERVICE, isvc)
    print(
        f"applied InferenceService {namespace}/{params.model_name} serving {relative}", flush=True
    )
    ready = wait_for_isvc(kube, namespace, params.model_name, params.serving_timeout_seconds)
    url = ready["status"].get("url", "")
    print(f"InferenceService {namespace}/{params.model_name} is Ready at {url}", flush=True)
    return url
