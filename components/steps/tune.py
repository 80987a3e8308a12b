"""The ``tune`` step: a Katib Experiment over lr and epochs; outputs the best training job.

One component for both backend generations, as for ``train``.
"""

from typing import NamedTuple

from kfp import dsl
from kfp.dsl import Dataset, Input

from components.images import default_image
from components.steps.task_config import PASSTHROUGHS

IMAGE = default_image("components")


@dsl.component(base_image=IMAGE, install_kfp_package=False, task_config_passthroughs=PASSTHROUGHS)
def tune(
    dataset: Input[Dataset],
    job: dict,
    sweep: dict,
    workspace_path: str,
    run_id: str,
    task_config: dsl.TaskConfig,
    workspace_pvc: str = "",
) -> NamedTuple("Tuned", job=dict, accuracy=float):
    """Search lr and epochs (and momentum) with Katib; output the job with the best values.

    Stages the packed data in the run's workspace, creates an Experiment whose trials are
    the train step's job with the searched values (named after the run; a retried step
    adopts it), prints the trials as they progress, and fails if the Experiment fails.

    Args:
        dataset: The packed dataset the trials train on.
        job: The checked training job every trial runs (validate-training's output).
        sweep: The checked search space and budget (validate-sweep's output).
        workspace_path: Where this step (and the trials) see the run's workspace.
        run_id: The pipeline run's id; the Experiment's name is derived from it.
        task_config: This task's volumes and env, passed on to every trial's pods.
        workspace_pvc: The PVC holding the workspace, on backends without a run workspace;
            empty: the workspace volume is in ``task_config``.

    Returns:
        job: The training job with the best trial's lr, epochs (and momentum).
        accuracy: The best trial's test accuracy.
    """
    from components.runtime.katib import tune_job
    from components.specs.params import TrainingJob
    from components.specs.pods import step_placement
    from components.specs.sweep import Sweep

    training, search = TrainingJob.from_dict(job), Sweep.from_dict(sweep)
    placement = step_placement(task_config, workspace_path, workspace_pvc)
    return tune_job(training, search, dataset.path, workspace_path, run_id, placement)
