"""The ``train`` step: a PyTorchJob on the cluster, or torchrun in the step itself."""

from kfp import dsl
from kfp.dsl import Dataset, Input, Model, Output

from components.images import COMPONENTS_IMAGE

# The train task's volumes (the run's workspace among them) and env reach the PyTorchJob
# and stay on the task's own pod; tolerations, node selector and affinity set on the task
# are meant for the GPU pods only.
PASSTHROUGHS = [
    dsl.TaskConfigPassthrough(field=dsl.TaskConfigField.KUBERNETES_VOLUMES, apply_to_task=True),
    dsl.TaskConfigPassthrough(field=dsl.TaskConfigField.ENV, apply_to_task=True),
    dsl.TaskConfigField.KUBERNETES_TOLERATIONS,
    dsl.TaskConfigField.KUBERNETES_NODE_SELECTOR,
    dsl.TaskConfigField.KUBERNETES_AFFINITY,
]


@dsl.component(
    base_image=COMPONENTS_IMAGE, install_kfp_package=False, task_config_passthroughs=PASSTHROUGHS
)
def train(
    dataset: Input[Dataset],
    model: Output[Model],
    workspace_path: str,
    run_id: str,
    task_config: dsl.TaskConfig,
    backend: str,
    epochs: int,
    batch_size: int,
    lr: float,
    momentum: float,
    optimizer: str,
    workers: int,
    nproc_per_node: int,
    gpus_per_worker: int,
    gpu_resource: str,
    cpu: str,
    memory: str,
    queue_name: str,
    priority_class: str,
    namespace: str,
    timeout_seconds: int,
    trainer_image: str,
):
    """Train the network with DDP: as a PyTorchJob, or with torchrun in this step.

    With ``backend="pytorchjob"`` the step stages the data in the run's workspace,
    creates a PyTorchJob (Master + Workers, Kueue queue, the GPUs asked for) that
    mounts the same workspace, streams the master pod's log here, fails if the job
    fails or times out, and copies the model into ``model``. With ``backend="local"``
    it runs ``torchrun --nproc-per-node workers*nproc_per_node -m trainer`` itself.

    Args:
        dataset: The packed dataset.
        model: The trained model directory (model.pt + model.json).
        workspace_path: The run's shared workspace (dsl.WORKSPACE_PATH_PLACEHOLDER).
        run_id: The pipeline run's id; the job's name is derived from it.
        task_config: This task's volumes, env, tolerations, node selector and affinity.
        backend: "pytorchjob" or "local".
        epochs: Passes over the training set.
        batch_size: Global batch size, split over all processes.
        lr: (Peak) learning rate.
        momentum: SGD momentum or AdamW beta1.
        optimizer: "sgd" or "adamw".
        workers: PyTorchJob replicas: one Master and workers-1 Workers.
        nproc_per_node: Processes per replica (one per GPU).
        gpus_per_worker: GPUs (or MIG slices) per replica; 0 trains on CPU.
        gpu_resource: The GPU resource name, e.g. nvidia.com/gpu or nvidia.com/mig-1g.10gb.
        cpu: CPU request and limit per replica.
        memory: Memory request and limit per replica.
        queue_name: The Kueue LocalQueue that admits the job.
        priority_class: The Kueue WorkloadPriorityClass; empty for none.
        namespace: The job's namespace; empty for this run's namespace.
        timeout_seconds: Fail (and delete the job) after this many seconds.
        trainer_image: The image of the PyTorchJob pods.
    """
    from components.params import PipelineParams

    params = PipelineParams(
        backend=backend,
        epochs=epochs,
        batch_size=batch_size,
        lr=lr,
        momentum=momentum,
        optimizer=optimizer,
        workers=workers,
        nproc_per_node=nproc_per_node,
        gpus_per_worker=gpus_per_worker,
        gpu_resource=gpu_resource,
        cpu=cpu,
        memory=memory,
        queue_name=queue_name,
        priority_class=priority_class,
        namespace=namespace,
        timeout_seconds=timeout_seconds,
        trainer_image=trainer_image,
    )
    if backend == "local":
        from components.local_train import run_local_training

        run_local_training(params, dataset.path, model.path, workspace_path)
    else:
        from components.launch_pytorchjob import run_pytorchjob

        run_pytorchjob(params, dataset.path, model.path, workspace_path, run_id, task_config)
    model.metadata.update({"framework": "pytorch", "backend": backend, "epochs": epochs})
