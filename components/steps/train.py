"""The ``train`` step: a PyTorchJob or TrainJob on the cluster, or torchrun in the step itself.

One component for both Kubeflow Pipelines backend generations: on KFP >= 2.15 the step
finds the run's workspace volume in its passed-through task config; the pvc variant
(older backends) tells it the PVC the pipeline created (``workspace_pvc``) and compiles it
``without_task_config`` (``components.steps.task_config``).
"""

from kfp import dsl
from kfp.dsl import Dataset, Input, Model, Output

from components.images import default_image
from components.steps.task_config import PASSTHROUGHS

IMAGE = default_image("components")


@dsl.component(base_image=IMAGE, install_kfp_package=False, task_config_passthroughs=PASSTHROUGHS)
def train(
    dataset: Input[Dataset],
    model: Output[Model],
    job: dict,
    target: str,
    workspace_path: str,
    run_id: str,
    task_config: dsl.TaskConfig,
    workspace_pvc: str = "",
):
    """Train the network with DDP: as a PyTorchJob or TrainJob, or with torchrun here.

    On a cluster the step stages the data in the run's workspace, creates the job (named
    after the run; a retried step adopts it) with the workspace mounted, streams rank 0's
    log, fails if the job fails or times out, and copies the model into ``model``.
    Locally it runs ``torchrun --nproc-per-node workers*nproc_per_node -m trainer``.

    Args:
        dataset: The packed dataset.
        model: The trained model directory (model.pt + model.json).
        job: The checked training job (validate-training's output).
        target: "cluster" or "local".
        workspace_path: Where this step (and the job) see the run's workspace.
        run_id: The pipeline run's id; the job's name is derived from it.
        task_config: This task's volumes, env, tolerations, node selector and affinity.
        workspace_pvc: The PVC holding the workspace, on backends without a run workspace;
            empty: the workspace volume is in ``task_config``.
    """
    from components.specs.params import TrainingJob, check_target

    training = TrainingJob.from_dict(job)
    if check_target(target) == "local":
        from components.runtime.local_train import run_local_training

        run_local_training(training, dataset.path, model.path, workspace_path)
    else:
        from components.runtime.launcher import run_training_job
        from components.specs.pods import step_placement

        placement = step_placement(task_config, workspace_path, workspace_pvc)
        run_training_job(training, dataset.path, model.path, workspace_path, run_id, placement)
    model.metadata.update({"framework": "pytorch", "target": target, "epochs": job["epochs"]})
