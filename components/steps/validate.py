"""The validate steps: one per parameter set, each returning the checked set as a dict.

They turn the run's flat parameters into the set the later steps receive. A bad value
fails the run here, before any data is packed, with a message naming the parameter and
its allowed range. On a cluster they also check that the cluster can run the set.

A KFP component's parameters must be written out in its source, so each signature lists
its set's fields and the body hands each to the set by name (tests/components/test_params.py
checks both against the set's fields).
"""

# KFP reads the steps' annotations at run time and rejects PEP 604 unions (float | None).
# ruff: noqa: UP045

from typing import Optional

from kfp import dsl

from components.images import default_image

IMAGE = default_image("components")  # each task's image is set at compile time


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def validate_training(
    target: str,
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
    shm_size: str,
    queue_name: str,
    priority_class: str,
    timeout_seconds: int,
    job_api: str,
    trainjob_runtime: str,
    trainer_image: str,
    trainer_cpu_image: str,
) -> dict:
    """Check the training job's parameters; on a cluster, that its job API is served.

    The parameters are the fields of ``components.specs.params.TrainingJob``, with
    ``target`` ("cluster" or "local"). Returns the checked set.
    """
    from components.runtime.checks import check_training_on_cluster
    from components.specs.params import TrainingJob, check_target

    job = TrainingJob(
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
        shm_size=shm_size,
        queue_name=queue_name,
        priority_class=priority_class,
        timeout_seconds=timeout_seconds,
        job_api=job_api,
        trainjob_runtime=trainjob_runtime,
        trainer_image=trainer_image,
        trainer_cpu_image=trainer_cpu_image,
    )
    if check_target(target) == "cluster":
        api = check_training_on_cluster(job)
        print(f"the cluster serves {api}s; queue {job.queue}; trainer image {job.image}")
    return job.to_dict()


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def validate_serving(
    target: str,
    min_accuracy: float,
    min_improvement: float,
    model_name: str,
    model_pvc: str,
    serving_min_replicas: int,
    serving_max_replicas: int,
    serving_cpu: str,
    serving_memory: str,
    serving_gpus: int,
    serving_gpu_resource: str,
    serving_timeout_seconds: int,
    deployment_mode: str,
    serving_image: str,
    model_registry: str,
    model_registry_secret: str,
    model_registry_insecure: bool,
    serving_service_account: str,
    take_over_service: bool,
) -> dict:
    """Check the gate's and the InferenceService's parameters; on a cluster, the namespace.

    The parameters are the fields of ``components.specs.params.Serving``, with ``target``.
    Returns the checked set.
    """
    from components.runtime.checks import check_serving_on_cluster
    from components.specs.params import Serving, check_target

    serving = Serving(
        min_accuracy=min_accuracy,
        min_improvement=min_improvement,
        model_name=model_name,
        model_pvc=model_pvc,
        serving_min_replicas=serving_min_replicas,
        serving_max_replicas=serving_max_replicas,
        serving_cpu=serving_cpu,
        serving_memory=serving_memory,
        serving_gpus=serving_gpus,
        serving_gpu_resource=serving_gpu_resource,
        serving_timeout_seconds=serving_timeout_seconds,
        deployment_mode=deployment_mode,
        serving_image=serving_image,
        model_registry=model_registry,
        model_registry_secret=model_registry_secret,
        model_registry_insecure=model_registry_insecure,
        serving_service_account=serving_service_account,
        take_over_service=take_over_service,
    )
    if check_target(target) == "cluster":
        print(f"serving {serving.model_name} in namespace {check_serving_on_cluster(serving)}")
    return serving.to_dict()


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def validate_sweep(
    algorithm: str,
    lr_min: float,
    lr_max: float,
    epochs_min: int,
    epochs_max: int,
    sweep_timeout_seconds: int,
    median_stop: bool,
    median_stop_trials: int,
    median_stop_epochs: int,
    max_trials: Optional[int] = None,
    parallel_trials: Optional[int] = None,
    max_failed_trials: Optional[int] = None,
    lr_step: Optional[float] = None,
    epochs_step: Optional[int] = None,
    momentum_min: Optional[float] = None,
    momentum_max: Optional[float] = None,
    momentum_step: Optional[float] = None,
    goal: Optional[float] = None,
    seed: Optional[int] = None,
) -> dict:
    """Check the sweep's search space and budget.

    The parameters are the fields of ``components.specs.sweep.Sweep``. Returns the
    checked set.
    """
    from components.specs.sweep import Sweep

    sweep = Sweep(
        algorithm=algorithm,
        lr_min=lr_min,
        lr_max=lr_max,
        epochs_min=epochs_min,
        epochs_max=epochs_max,
        sweep_timeout_seconds=sweep_timeout_seconds,
        median_stop=median_stop,
        median_stop_trials=median_stop_trials,
        median_stop_epochs=median_stop_epochs,
        max_trials=max_trials,
        parallel_trials=parallel_trials,
        max_failed_trials=max_failed_trials,
        lr_step=lr_step,
        epochs_step=epochs_step,
        momentum_min=momentum_min,
        momentum_max=momentum_max,
        momentum_step=momentum_step,
        goal=goal,
        seed=seed,
    )
    return sweep.to_dict()
