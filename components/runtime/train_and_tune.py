"""What the train and tune steps do, behind their KFP signatures: local or cluster."""

from __future__ import annotations

from components.runtime.kube import KubeClient, current_namespace
from components.runtime.launcher import run_training_job
from components.runtime.local_train import run_local_training
from components.runtime.objects import run_object_name
from components.specs.params import TrainingJob, check_target
from components.specs.pods import Placement, step_placement
from components.specs.sweep import Sweep


def train_model(
    job: dict,
    target: str,
    dataset_dir: str,
    model_dir: str,
    workspace_path: str,
    run_id: str,
    task_config,
    workspace_pvc: str = "",
) -> None:
    """The train step: torchrun here, or a job on the step's workspace (``step_placement``)."""
    training = TrainingJob.from_dict(job)
    if check_target(target) == "local":
        run_local_training(training, dataset_dir, model_dir, workspace_path)
        return
    placement = step_placement(task_config, workspace_path, workspace_pvc)
    run_training_job(training, dataset_dir, model_dir, workspace_path, run_id, placement)


def tune_job(
    job: TrainingJob,
    sweep: Sweep,
    dataset_dir: str,
    workspace_path: str,
    run_id: str,
    placement: Placement,
) -> tuple[dict, float]:
    """The tune step: the training job with the best trial's values, and its accuracy."""
    from components.runtime.katib import tune

    best, accuracy = tune(
        job,
        sweep,
        dataset_dir,
        workspace_path,
        current_namespace(),
        run_object_name("fmnist-tune", run_id),
        placement,
        KubeClient.connect(),
    )
    return best.to_dict(), accuracy
