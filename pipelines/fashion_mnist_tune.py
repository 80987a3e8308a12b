"""The fashion-mnist-tune pipeline: pack -> Katib sweep -> train the best -> evaluate -> deploy."""

# KFP reads the pipeline's annotations at compile time and rejects PEP 604 unions.
# ruff: noqa: UP045
from typing import NamedTuple, Optional

from kfp import compiler, dsl, kubernetes

from components.deploy import deploy
from components.evaluate import evaluate
from components.katib import tune_hyperparameters
from components.kserve_deploy import MODEL_STORE_MOUNT
from components.manifests import GPU_TOLERATION
from components.pack_dataset import pack_dataset
from components.params import DEFAULTS as D
from components.sweep import SweepConfig
from components.train import train
from components.validate_params import validate_params
from pipelines.fashion_mnist import WORKSPACE

S = SweepConfig()


class Outputs(NamedTuple):
    """What a run returns."""

    accuracy: float
    model: dsl.Model
    metrics: dsl.Metrics
    report: dsl.Markdown


@dsl.pipeline(name="fashion-mnist-tune", pipeline_config=dsl.PipelineConfig(workspace=WORKSPACE))
def fashion_mnist_tune(
    algorithm: str = S.algorithm,
    lr_min: float = S.lr_min,
    lr_max: float = S.lr_max,
    lr_step: Optional[float] = None,
    epochs_min: int = S.epochs_min,
    epochs_max: int = S.epochs_max,
    epochs_step: Optional[int] = None,
    momentum_min: Optional[float] = None,
    momentum_max: Optional[float] = None,
    momentum_step: Optional[float] = None,
    max_trials: int = S.max_trials,
    parallel_trials: int = S.parallel_trials,
    max_failed_trials: int = S.max_failed_trials,
    goal: Optional[float] = None,
    seed: Optional[int] = None,
    sweep_timeout_seconds: int = 6 * 3600,
    batch_size: int = D.batch_size,
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
    """Tune lr and epochs with Katib, train with the best, evaluate, gate and deploy.

    Args:
        algorithm: Katib's algorithm: random, grid, bayesianoptimization, tpe,
            multivariate-tpe, cmaes or sobol.
        lr_min: Smallest learning rate tried.
        lr_max: Largest learning rate tried.
        lr_step: Grid spacing of the learning rate (grid needs it).
        epochs_min: Fewest epochs tried.
        epochs_max: Most epochs tried.
        epochs_step: Grid spacing of epochs (default 1).
        momentum_min: With momentum_max, also search SGD momentum or AdamW beta1 in this range.
        momentum_max: Upper end of the momentum range.
        momentum_step: Grid spacing of momentum (grid needs it when momentum is searched).
        max_trials: Trials to complete (at most the grid's size for grid).
        parallel_trials: Trials running at once.
        max_failed_trials: The sweep fails when this many trials have failed.
        goal: Stop the sweep once a trial's accuracy reaches this.
        seed: The suggestion algorithm's random_state, for repeatable sweeps.
        sweep_timeout_seconds: Fail the sweep (and delete the Experiment) after this long.
        batch_size: Global batch size, split over all processes.
        momentum: SGD momentum or AdamW beta1, unless it is searched.
        optimizer: "sgd" or "adamw".
        train_limit: Train on at most this many (the first) examples.
        test_limit: Evaluate on at most this many (the first) examples.
        workers: PyTorchJob replicas of every trial and of the final training: one Master
            and workers-1 Workers.
        nproc_per_node: Processes per replica; equal to gpus_per_worker when that is > 0.
        gpus_per_worker: GPUs (or MIG slices) per replica; 0 trains on CPU.
        gpu_resource: GPU resource name: nvidia.com/gpu, or a MIG profile such as
            nvidia.com/mig-1g.10gb (one slice per replica).
        cpu: CPU request and limit per replica.
        memory: Memory request and limit per replica.
        queue_name: Kueue LocalQueue that admits the PyTorchJobs.
        priority_class: Kueue WorkloadPriorityClass of the jobs; empty for none.
        namespace: Namespace of the Experiment, the jobs and the InferenceService; empty for
            the run's.
        timeout_seconds: Fail a trial, or the final training, after this many seconds.
        min_accuracy: Deploy only if the test accuracy reaches this, in [0, 1].
        model_name: Name of the InferenceService and of the served model.
        model_pvc: Existing PVC that keeps served models.
        serving_min_replicas: Minimum predictor replicas; 0 (scale to zero) needs Knative.
        serving_max_replicas: Maximum predictor replicas.
        serving_gpus: GPUs per predictor replica.
        serving_timeout_seconds: Fail the deploy step if the service is not Ready by then.
        deployment_mode: KServe deployment mode: "Standard" or "Knative".
        trainer_image: Image of the PyTorchJob pods.
        serving_image: Image of the KServe predictor.

    Returns:
        accuracy: The test accuracy of the model trained with the best parameters.
        model: That model's directory.
        metrics: Its test accuracy and loss.
        report: Per-class accuracy and the training curve, in Markdown.
    """
    job = dict(
        batch_size=batch_size,
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
    serving = dict(
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
    )
    checked = validate_params(
        backend="pytorchjob",
        epochs=epochs_max,
        lr=lr_max,
        momentum=momentum,
        train_limit=train_limit,
        test_limit=test_limit,
        min_accuracy=min_accuracy,
        **(job | serving),
    )
    packed = pack_dataset(train_limit=train_limit, test_limit=test_limit).after(checked)
    tuned = tune_hyperparameters(
        dataset=packed.outputs["dataset"],
        workspace_path=dsl.WORKSPACE_PATH_PLACEHOLDER,
        run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
        algorithm=algorithm,
        lr_min=lr_min,
        lr_max=lr_max,
        lr_step=lr_step,
        epochs_min=epochs_min,
        epochs_max=epochs_max,
        epochs_step=epochs_step,
        momentum_min=momentum_min,
        momentum_max=momentum_max,
        momentum_step=momentum_step,
        max_trials=max_trials,
        parallel_trials=parallel_trials,
        max_failed_trials=max_failed_trials,
        goal=goal,
        seed=seed,
        sweep_timeout_seconds=sweep_timeout_seconds,
        momentum=momentum,
        **job,
    ).set_caching_options(False)
    kubernetes.add_toleration(tuned, **GPU_TOLERATION)  # passed through to the trials' pods
    best = tuned.outputs
    trained = train(
        dataset=packed.outputs["dataset"],
        workspace_path=dsl.WORKSPACE_PATH_PLACEHOLDER,
        run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
        backend="pytorchjob",
        epochs=best["epochs"],
        lr=best["lr"],
        momentum=best["momentum"],
        **job,
    ).set_caching_options(False)
    kubernetes.add_toleration(trained, **GPU_TOLERATION)
    evaluated = evaluate(model=trained.outputs["model"], dataset=packed.outputs["dataset"])
    with dsl.If(evaluated.outputs["Output"] >= min_accuracy, name="accuracy-gate"):
        deployed = deploy(
            model=trained.outputs["model"],
            dataset=packed.outputs["dataset"],
            run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
            backend="pytorchjob",
            **serving,
        ).set_caching_options(False)
        kubernetes.mount_pvc(deployed, pvc_name=model_pvc, mount_path=MODEL_STORE_MOUNT)
    return Outputs(
        accuracy=evaluated.outputs["Output"],
        model=trained.outputs["model"],
        metrics=evaluated.outputs["metrics"],
        report=evaluated.outputs["report"],
    )


if __name__ == "__main__":
    compiler.Compiler().compile(fashion_mnist_tune, "build/pipelines/fashion-mnist-tune.yaml")
