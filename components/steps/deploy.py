"""The ``deploy`` step: serve the model with KServe, or check the predictor locally."""

# KFP reads the steps' annotations at run time and rejects PEP 604 unions (float | None).
# ruff: noqa: UP045

from typing import Optional

from kfp import dsl
from kfp.dsl import Dataset, Input, Model

from components.images import default_image


@dsl.component(base_image=default_image("components"), install_kfp_package=False)
def deploy(
    model: Input[Model],
    dataset: Input[Dataset],
    serving: dict,
    target: str,
    run_id: str,
    accuracy: Optional[float] = None,
) -> str:
    """Serve the model: a KServe InferenceService on the cluster, a checked predictor locally.

    On a cluster the model is copied to the model PVC (mounted at /mnt/model-store) under
    ``<model_name>/<run_id>``, the InferenceService is created or updated to serve it, and
    the step waits until the new model serves. With ``accuracy``, the served model must
    then answer test images about as well (the post-deploy check), or the service is
    rolled back to the model that served before and the step fails. Locally the predictor
    is started on a free loopback port, checked against the model on real test images, and
    stopped. With a model registry, the version the register step made (named ``run_id``)
    is served from its registered URI, and the InferenceService carries the registry's ids.

    Args:
        model: The model directory to serve.
        dataset: The packed dataset; the checks use its test images.
        serving: The checked serving parameters (validate-serving's output).
        target: "cluster" or "local".
        run_id: The pipeline run's id; the model is published under it.
        accuracy: The test accuracy the evaluate step measured; on a cluster, the served
            model's is checked against it. None: no post-deploy check.

    Returns:
        The service URL (locally, the URL the stopped predictor used).
    """
    from components.runtime.post_deploy import post_deploy_check
    from components.specs.params import Serving, check_target

    settings = Serving.from_dict(serving)
    local = check_target(target) == "local"
    check = None
    if accuracy is not None and not local:
        check = post_deploy_check(settings.model_name, dataset.path, accuracy)
    if settings.model_registry:  # the register step registered the model as version run_id
        from components.runtime.model_versions import check_registered_locally, deploy_registered

        if local:
            return check_registered_locally(settings, run_id, dataset.path)
        return deploy_registered(settings, run_id, check=check)
    if local:
        from components.runtime.local_predictor import deploy_local

        return deploy_local(settings, model.path, dataset.path)
    from components.runtime.kserve import deploy_to_kserve

    return deploy_to_kserve(settings, model.path, run_id, check=check)
