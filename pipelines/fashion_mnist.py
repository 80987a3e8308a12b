"""The fashion-mnist pipeline: validate -> pack -> train -> evaluate -> gate -> deploy."""

from typing import NamedTuple

from kfp import compiler, dsl, kubernetes

from components.deploy import deploy
from components.evaluate import evaluate
from components.kserve_deploy import MODEL_STORE_MOUNT
from components.manifests import GPU_TOLERATION
from components.pack_dataset import pack_dataset
from components.params import DEFAULTS as D
from components.train import train
from components.validate_params import validate_params

# The run's shared workspace: the train step stages data there and the PyTorchJob's pods
# (on several nodes) write checkpoints and the model there, hence ReadWriteMany.
WORKSPACE = dsl.WorkspaceConfig(
    size="5Gi",
    kubernetes=dsl.KubernetesWorkspaceConfig(pvcSpecPatch={"accessModes": ["ReadWriteMany"]}),
)


class Outputs(NamedTuple):
    """What a run returns."""

    accuracy: float
    model: dsl.Model
    metrics: dsl.Metrics
    report: dsl.Markdown


@dsl.pipeline(name="fashion-mnist", pipeline_config=dsl.PipelineConfig(workspace=WORKSPACE))
def fashion_mnist(
    backend: str = D.backend,
    epochs: int = D.epochs,
    batch_size: int = D.batch_size,
    lr: float = D.lr,
    momentum: float = D.momentum,
    optimizer: str = D.optimizer,
    train_limit: int = D.train_limit,
    test_limit: int = D.test_limit,
    workers: int = D.workers,
    nproc_per_node: int = D.nproc_per_node,
    gpus_per_worker: int = D.gpus_per_worker,
    gpu_resource: str = D.gpu_resource,
    cpu: str = D.cpu,
    memory: str = D.memory,
    queue_name: str = D.queue_name,
    priority_class: str = D.priority_class,
    namespace: str = D.namespace,
    timeout_seconds: int = D.timeout_seconds,
    min_accuracy: float = D.min_accuracy,
    model_name: str = D.model_name,
    model_pvc: str = D.model_pvc,
    serving_min_replicas: int = D.serving_min_replicas,
    serving_max_replicas: int = D.serving_max_replicas,
    serving_gpus: int = D.serving_gpus,
    serving_timeout_seconds: int = D.serving_timeout_seconds,
    deployment_mode: str = D.deployment_mode,
    trainer_image: str = D.trainer_image,
    serving_image: str = D.serving_image,
) -> Outputs:
    """FashionMNIST from raw files to a served model: PyTorchJob training, KServe serving.

    Args:
        backend: "pytorchjob" trains as a PyTorchJob and serves with KServe; "local"
            trains with torchrun in the step and checks a local predictor.
        epochs: Passes over the training set.
        batch_size: Global batch size, split over all processes.
        lr: (Peak) learning rate.
        momentum: SGD momentum or AdamW beta1, in [0, 1).
        optimizer: "sgd" or "adamw".
        train_limit: Train on at most this many (the first) examples.
        test_limit: Evaluate on at most this many (the first) examples.
        workers: PyTorchJob replicas: one Master and workers-1 Workers.
        nproc_per_node: Processes per replica; equal to gpus_per_worker when that is > 0.
        gpus_per_worker: GPUs (or MIG slices) per replica; 0 trains on CPU.
        gpu_resource: GPU resource name: nvidia.com/gpu, or a MIG profile such as
            nvidia.com/mig-1g.10gb (one slice per replica).
        cpu: CPU request and limit per replica.
        memory: Memory request and limit per replica.
        queue_name: Kueue LocalQueue that admits the PyTorchJob.
        priority_class: Kueue WorkloadPriorityClass of the job; empty for none.
        namespace: Namespace of the PyTorchJob and InferenceService; empty for the run's.
        timeout_seconds: Fail the training step (and delete the job) after this many seconds.
        min_accuracy: Deploy only if the test accuracy reaches this, in [0, 1].
        model_name: Name of the InferenceService and of the served model.
        model_pvc: Existing PVC that keeps served models (the run's workspace is deleted
            with the run).
        serving_min_replicas: Minimum predictor replicas; 0 (scale to zero) needs Knative.
        serving_max_replicas: Maximum predictor replicas.
        serving_gpus: GPUs per predictor replica.
        serving_timeout_seconds: Fail the deploy step if the service is not Ready by then.
        deployment_mode: KServe deployment mode: "Standard" or "Knative".
        trainer_image: Image of the PyTorchJob pods.
        serving_image: Image of the KServe predictor.

    Returns:
        accuracy: The test accuracy of the trained model.
        model: The trained model directory.
        metrics: Test accuracy and loss.
        report: Per-class accuracy and the training curve, in Markdown.
    """
    everything = dict(locals())  # every parameter, checked before any work is done
    checked = validate_params(**everything)
    packed = pack_dataset(train_limit=train_limit, test_limit=test_limit).after(checked)
    trained = train(
        dataset=packed.outputs["dataset"],
        workspace_path=dsl.WORKSPACE_PATH_PLACEHOLDER,
        run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
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
    ).set_caching_options(False)
    kubernetes.add_toleration(trained, **GPU_TOLERATION)  # passed through to the GPU pods
    evaluated = evaluate(model=trained.outputs["model"], dataset=packed.outputs["dataset"])
    with dsl.If(evaluated.outputs["Output"] >= min_accuracy, name="accuracy-gate"):
        deployed = deploy(
            model=trained.outputs["model"],
            dataset=packed.outputs["dataset"],
            run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
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
        ).set_caching_options(False)
        kubernetes.mount_pvc(deployed, pvc_name=model_pvc, mount_path=MODEL_STORE_MOUNT)
    return Outputs(
        accuracy=evaluated.outputs["Output"],
        model=trained.outputs["model"],
        metrics=evaluated.outputs["metrics"],
        report=evaluated.outputs["report"],
    )


if __name__ == "__main__":
    compiler.Compiler().compile(fashion_mnist, "build/pipelines/fashion-mnist.yaml")
