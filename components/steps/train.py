"""The ``train`` step: a PyTorchJob or TrainJob on the cluster, or torchrun in the step itself.

Two components, one per Kubeflow Pipelines backend generation: ``train`` (KFP >= 2.15)
finds the run's workspace volume in its passed-through task config; ``train_on_pvc``
(older backends) is told the PVC the pipeline created for the run.
"""

from kfp import dsl
from kfp.dsl import Dataset, Input, Model, Output

from components.images import default_image

IMAGE = default_image("components")
# The train task's volumes (the run's workspace among them) and env reach the training
# job and stay on the task's own pod; tolerations, node selector and affinity set on the
# task are meant for the GPU pods only.
PASSTHROUGHS = [
    dsl.TaskConfigPassthrough(field=dsl.TaskConfigField.KUBERNETES_VOLUMES, apply_to_task=True),
    dsl.TaskConfigPassthrough(field=dsl.TaskConfigField.ENV, apply_to_task=True),
    dsl.TaskConfigField.KUBERNETES_TOLERATIONS,
    dsl.TaskConfigField.KUBERNETES_NODE_SELECTOR,
    dsl.TaskConfigField.KUBERNETES_AFFINITY,
]


@dsl.component(base_image=IMAGE, install_kfp_package=False, task_config_passthroughs=PASSTHROUGHS)
def train(
    dataset: Input[Dataset],
    model: Output[Model],
    job: dict,
    target: str,
    workspace_path: str,
    run_id: str,
    task_config: dsl.TaskConfig,
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
        workspace_path: The run's shared workspace (dsl.WORKSPACE_PATH_PLACEHOLDER).
        run_id: The pipeline run's id; the job's name is derived from it.
        task_config: This task's volumes, env, tolerations, node selector and affinity.
    """
    from components.runtime.train_and_tune import train_model

    train_model(job, target, dataset.path, model.path, workspace_path, run_id, task_config)
    model.metadata.update({"framework": "pytorch", "target": target, "epochs": job["epochs"]})


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def train_on_pvc(
    dataset: Input[Dataset],
    model: Output[Model],
    job: dict,
    workspace_pvc: str,
    workspace_path: str,
    run_id: str,
):
    """Train the network as a PyTorchJob or TrainJob on a PVC the pipeline created.

    For Kubeflow Pipelines backends before 2.15, which have no run workspace: the job
    mounts ``workspace_pvc`` at ``workspace_path``, as this step does.

    Args:
        dataset: The packed dataset.
        model: The trained model directory (model.pt + model.json).
        job: The checked training job (validate-training's output).
        workspace_pvc: The PVC holding the run's workspace.
        workspace_path: Where this step (and the job) mount it.
        run_id: The pipeline run's id; the job's name is derived from it.
    """
    from components.runtime.train_and_tune import train_model_on_pvc

    train_model_on_pvc(job, dataset.path, model.path, workspace_pvc, workspace_path, run_id)
    model.metadata.update({"framework": "pytorch", "target": "cluster", "epochs": job["epochs"]})
