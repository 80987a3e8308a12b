"""The ``tune`` step: a Katib Experiment over lr and epochs; outputs the best training job.

Two components, as for ``train``: ``tune`` (KFP >= 2.15, the run workspace passed
through) and ``tune_on_pvc`` (older backends, a PVC the pipeline created).
"""

from typing import NamedTuple

from kfp import dsl
from kfp.dsl import Dataset, Input

from components.images import default_image
from components.steps.train import PASSTHROUGHS

IMAGE = default_image("components")


@dsl.component(base_image=IMAGE, install_kfp_package=False, task_config_passthroughs=PASSTHROUGHS)
def tune(
    dataset: Input[Dataset],
    job: dict,
    sweep: dict,
    workspace_path: str,
    run_id: str,
    task_config: dsl.TaskConfig,
) -> NamedTuple("Tuned", job=dict, accuracy=float):
    """Search lr and epochs (and momentum) with Katib; output the job with the best values.

    Stages the packed data in the run's workspace, creates an Experiment whose trials are
    the train step's job with the searched values (named after the run; a retried step
    adopts it), prints the trials as they progress, and fails if the Experiment fails.

    Args:
        dataset: The packed dataset the trials train on.
        job: The checked training job every trial runs (validate-training's output).
        sweep: The checked search space and budget (validate-sweep's output).
        workspace_path: The run's shared workspace (dsl.WORKSPACE_PATH_PLACEHOLDER).
        run_id: The pipeline run's id; the Experiment's name is derived from it.
        task_config: This task's volumes and env, passed on to every trial's pods.

    Returns:
        job: The training job with the best trial's lr, epochs (and momentum).
        accuracy: The best trial's test accuracy.
    """
    from components.runtime.train_and_tune import tune_job
    from components.specs.params import TrainingJob
    from components.specs.pods import placement_from
    from components.specs.sweep import Sweep

    training, search = TrainingJob.from_dict(job), Sweep.from_dict(sweep)
    placement = placement_from(task_config, workspace_path)
    return tune_job(training, search, dataset.path, workspace_path, run_id, placement)


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def tune_on_pvc(
    dataset: Input[Dataset],
    job: dict,
    sweep: dict,
    workspace_pvc: str,
    workspace_path: str,
    run_id: str,
) -> NamedTuple("Tuned", job=dict, accuracy=float):
    """Search lr and epochs with Katib on a PVC the pipeline created (backends before 2.15).

    Args:
        dataset: The packed dataset the trials train on.
        job: The checked training job every trial runs.
        sweep: The checked search space and budget.
        workspace_pvc: The PVC holding the run's workspace.
        workspace_path: Where this step (and the trials) mount it.
        run_id: The pipeline run's id; the Experiment's name is derived from it.

    Returns:
        job: The training job with the best trial's lr, epochs (and momentum).
        accuracy: The best trial's test accuracy.
    """
    from components.runtime.train_and_tune import pvc_placement, tune_job
    from components.specs.params import TrainingJob
    from components.specs.sweep import Sweep

    training, search = TrainingJob.from_dict(job), Sweep.from_dict(sweep)
    placement = pvc_placement(workspace_pvc, workspace_path)
    return tune_job(training, search, dataset.path, workspace_path, run_id, placement)
