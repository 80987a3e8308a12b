"""The ``validate-params`` step: reject bad pipeline parameters before any work starts."""

from kfp import dsl

from components.images import COMPONENTS_IMAGE


@dsl.component(base_image=COMPONENTS_IMAGE, install_kfp_package=False)
def validate_params(
    backend: str,
    epochs: int,
    batch_size: int,
    lr: float,
    momentum: float,
    optimizer: str,
    train_limit: int,
    test_limit: int,
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
    min_accuracy: float,
    model_name: str,
    model_pvc: str,
    serving_min_replicas: int,
    serving_max_replicas: int,
    serving_gpus: int,
    serving_timeout_seconds: int,
    deployment_mode: str,
    trainer_image: str,
    serving_image: str,
):
    """Check every pipeline parameter; fail with one naming the first bad one.

    The rules are those of ``components.params.PipelineParams``, which ``fmnist run``,
    ``render`` and ``compile`` also apply to their flags.

    Args:
        backend: "pytorchjob" or "local".
        epochs: Passes over the training set (>= 1).
        batch_size: Global batch size (>= 1).
        lr: Learning rate (> 0).
        momentum: SGD momentum or AdamW beta1, in [0, 1).
        optimizer: "sgd" or "adamw".
        train_limit: Training examples to use (>= 1).
        test_limit: Test examples to use (>= 1).
        workers: PyTorchJob replicas (>= 1).
        nproc_per_node: Processes per replica; equal to gpus_per_worker when that is > 0.
        gpus_per_worker: GPUs or MIG slices per replica (>= 0; 1 for a MIG profile).
        gpu_resource: An extended resource name such as nvidia.com/gpu.
        cpu: A Kubernetes CPU quantity.
        memory: A Kubernetes memory quantity.
        queue_name: A Kueue LocalQueue name.
        priority_class: Empty, or a WorkloadPriorityClass name.
        namespace: Empty, or a namespace name.
        timeout_seconds: Training timeout (>= 1).
        min_accuracy: The deployment gate, in [0, 1].
        model_name: The InferenceService name (a DNS label of at most 45 characters).
        model_pvc: The PVC that holds served models.
        serving_min_replicas: Minimum predictor replicas (0 only with Knative).
        serving_max_replicas: Maximum predictor replicas (>= max(1, min)).
        serving_gpus: GPUs per predictor replica (>= 0).
        serving_timeout_seconds: Deployment timeout (>= 1).
        deployment_mode: "Standard" or "Knative".
        trainer_image: The trainer image.
        serving_image: The serving image.
    """
    arguments = dict(locals())
    from components.params import PipelineParams

    print(PipelineParams(**arguments))
