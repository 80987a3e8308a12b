"""The ``register-model`` step: record a model that passed the gate in Kubeflow Model Registry."""

from kfp import dsl
from kfp.dsl import Input, Metrics, Model

from components.images import default_image


@dsl.component(base_image=default_image("components"), install_kfp_package=False)
def register_model(
    model: Input[Model],
    metrics: Input[Metrics],
    serving: dict,
    target: str,
    run_id: str,
    run_name: str,
) -> str:
    """Register the model as a version, named after the run, of the ``model_name`` model.

    The version's artifact holds the model's storage URI (on a cluster the model is first
    copied to the model PVC, mounted at /mnt/model-store, under ``<model_name>/<run_id>``);
    its properties hold the test accuracy and loss, the training recipe and the run id; on a
    cluster its ``model_source_*`` fields name the run (id, name, namespace).

    Args:
        model: The model directory.
        metrics: The evaluate step's test accuracy and loss.
        serving: The checked serving parameters (their ``model_registry`` is the server).
        target: "cluster" or "local".
        run_id: The pipeline run's id: the version's name.
        run_name: The pipeline run's name, as the KFP UI shows it.

    Returns:
        The registered version's id.
    """
    from components.runtime.model_versions import register_run_model
    from components.specs.params import Serving, check_target

    settings = Serving.from_dict(serving)
    return register_run_model(
        settings, model.path, dict(metrics.metadata), check_target(target), run_id, run_name
    ).id
