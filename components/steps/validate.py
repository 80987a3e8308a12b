"""The validate steps: one per parameter set, each returning the checked set as a dict.

They turn the run's flat parameters into the set the later steps receive. A bad value
fails the run here, before any data is packed, with a message naming the parameter and
its allowed range. On a cluster they also check that the cluster can run the set.

A KFP component's parameters must be written out in its source, so each signature lists
its set's fields (tests/components/test_params.py checks they are the same, in order and
type); the body hands them to the set (``from_parameters``), so nothing else names them.
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

    job = TrainingJob.from_parameters(locals())
    if check_target(target) == "cluster":
        api = check_training_on_cluster(job)
        print(f"the cluster serves {api}s; queue {job.queue}; trainer image {job.image}")
    return job.to_dict()


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def validate_serving(
    target: str,
    min_accuracy: float,
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
) -> dict:
    """Check the gate's and the InferenceService's parameters; on a cluster, the namespace.

    The parameters are the fields of ``components.specs.params.Serving``, with ``target``.
    Returns the checked set.
    """
    from components.runtime.checks import check_serving_on_cluster
    from components.specs.params import Serving, check_target

    serving = Serving.from_parameters(locals())
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

    sweep = Sweep.from_parameters(locals())
    return sweep.to_dict()
