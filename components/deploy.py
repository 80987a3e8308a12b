"""The ``deploy`` step: serve the model with KServe, or check the predictor locally."""

from kfp import dsl
from kfp.dsl import Dataset, Input, Model

from components.images import COMPONENTS_IMAGE


@dsl.component(base_image=COMPONENTS_IMAGE, install_kfp_package=False)
def deploy(
    model: Input[Model],
    dataset: Input[Dataset],
    run_id: str,
    backend: str,
    model_name: str,
    namespace: str,
    model_pvc: str,
    serving_image: str,
    serving_min_replicas: int,
    serving_max_replicas: int,
    serving_gpus: int,
    gpu_resource: str,
    deployment_mode: str,
    serving_timeout_seconds: int,
) -> str:
    """Serve the model: a KServe InferenceService on the cluster, a checked predictor locally.

    Args:
        model: The model directory to serve.
        dataset: The packed dataset; the local check uses its test images.
        run_id: The pipeline run's id; the model is published under it.
        backend: "pytorchjob" (KServe) or "local" (a predictor on a loopback port).
        model_name: The InferenceService name and the served model's name.
        namespace: The service's namespace; empty for this run's namespace.
        model_pvc: The PVC (mounted at /mnt/model-store) that keeps served models.
        serving_image: The predictor image.
        serving_min_replicas: Minimum predictor replicas (0 needs Knative).
        serving_max_replicas: Maximum predictor replicas.
        serving_gpus: GPUs per predictor replica.
        gpu_resource: The GPU resource name.
        deployment_mode: "Standard" or "Knative".
        serving_timeout_seconds: Fail if not Ready within this many seconds.

    Returns:
        The service URL (locally, the URL the stopped predictor used).
    """
    from components.params import PipelineParams

    params = PipelineParams(
        backend=backend,
        model_name=model_name,
        namespace=namespace,
        model_pvc=model_pvc,
        serving_image=serving_image,
        serving_min_replicas=serving_min_replicas,
        serving_max_replicas=serving_max_replicas,
        serving_gpus=serving_gpus,
        gpu_resource=gpu_resource,
        deployment_mode=deployment_mode,
        serving_timeout_seconds=serving_timeout_seconds,
    )
    if backend == "local":
        from components.local_predictor import deploy_local

        return deploy_local(params, model.path, dataset.path)
    from components.kserve_deploy import deploy_to_kserve

    return deploy_to_kserve(params, model.path, run_id)
