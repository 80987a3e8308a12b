"""Tune with Katib: create the Experiment, follow its trials, return the best parameters.

The Kubernetes calls are the few functions named ``*_experiment`` and ``list_trials``
(RBAC: experiments create/get/delete, trials list, in ``kubeflow.org``). The trials are
the train step's own PyTorchJob with ``${trialParameters...}`` in its arguments, reading
the data staged in the run's workspace; only the master pod prints the metric line Katib
reads. A failed Experiment fails the step with its conditions; an Experiment the step
stops waiting for (timeout, interrupt, API error) is deleted.
"""

# KFP reads the step's annotations at run time and rejects PEP 604 unions (float | None).
# ruff: noqa: UP045

import secrets
import time
from collections.abc import Callable
from dataclasses import fields
from typing import NamedTuple, Optional

from kfp import dsl
from kfp.dsl import Dataset, Input

from components.images import COMPONENTS_IMAGE
from components.k8s import KubeClient, current_namespace
from components.launch_pytorchjob import (
    WorkPaths,
    build_job,
    placement_from,
    stage_dataset,
    trainer_flags,
)
from components.manifests import (
    EXPERIMENT,
    TRIAL,
    Placement,
    katib_experiment,
    katib_trial_flags,
)
from components.params import PipelineParams
from components.sweep import SweepConfig, Trial
from components.train import PASSTHROUGHS

POLL_SECONDS = 15.0
EXPERIMENT_LABEL = "katib.kubeflow.org/experiment"
# A trial's state, in the order its conditions are checked (the first one True wins).
TRIAL_STATES = ("Succeeded", "Failed", "MetricsUnavailable", "EarlyStopped", "Killed", "Running")


class ExperimentFailed(RuntimeError):
    """The Katib Experiment failed, or ended without a trial that reported accuracy."""


def experiment_name(run_id: str) -> str:
    """A name unique to this attempt, traceable to the run: ``fmnist-tune-<run>-<random>``."""
    run = "".join(ch for ch in run_id.lower() if ch.isalnum())[:8] or "run"
    return f"fmnist-tune-{run}-{secrets.token_hex(2)}"


def build_experiment(
    params: PipelineParams,
    sweep: SweepConfig,
    name: str,
    namespace: str | None,
    workspace: str,
    placement: Placement,
) -> dict:
    """The Experiment whose trials are the train step's PyTorchJob with searched values.

    Trials read the data the step staged under ``workspace`` and write their model and
    checkpoints under ``<workspace>/katib/<experiment>/<trial>``.
    """
    paths = WorkPaths.under(workspace)
    flags = katib_trial_flags(trainer_flags(params, paths), sweep, f"{workspace}/katib/{name}")
    job = build_job(params, None, None, paths, placement, flags=flags)
    return katib_experiment(name=name, namespace=namespace, sweep=sweep, trial_job=job)


# --- the Kubernetes calls ----------------------------------------------------------------


def create_experiment(kube: KubeClient, experiment: dict) -> dict:
    """Create the Experiment in its namespace."""
    return kube.create(EXPERIMENT, experiment["metadata"]["namespace"], experiment)


def get_experiment(kube: KubeClient, namespace: str, name: str) -> dict | None:
    """The Experiment with its status, or None if it is gone."""
    return kube.get(EXPERIMENT, namespace, name)


def list_trials(kube: KubeClient, namespace: str, name: str) -> list[dict]:
    """The Experiment's Trial objects (Katib labels them with the Experiment's name)."""
    return kube.list(TRIAL, namespace, f"{EXPERIMENT_LABEL}={name}")


def delete_experiment(kube: KubeClient, namespace: str, name: str) -> None:
    """Delete the Experiment; Katib deletes its trials and their jobs with it."""
    kube.delete(EXPERIMENT, namespace, name)


# --- reading Katib's status --------------------------------------------------------------


def _true_conditions(obj: dict) -> dict[str, dict]:
    conditions = obj.get("status", {}).get("conditions", [])
    return {item["type"]: item for item in conditions if item.get("status") == "True"}


def experiment_outcome(experiment: dict) -> str | None:
    """``Succeeded`` or ``Failed`` once the Experiment has ended, else None."""
    true = _true_conditions(experiment)
    return next((kind for kind in ("Succeeded", "Failed") if kind in true), None)


def condition_message(obj: dict) -> str:
    """The reason and message of the object's latest condition."""
    conditions = obj.get("status", {}).get("conditions", [])
    if not conditions:
        return "(no conditions yet)"
    last = conditions[-1]
    return f"{last.get('type')}: {last.get('reason', '')} {last.get('message', '')}".strip()


def _assignment(pairs: list[dict]) -> dict[str, float | int]:
    return {
        p["name"]: int(p["value"]) if p["name"] == "epochs" else float(p["value"]) for p in pairs
    }


def _latest_metrics(observation: dict | None) -> dict[str, float]:
    metrics = {}
    for metric in (observation or {}).get("metrics", []):
        try:
            metrics[metric["name"]] = float(metric["latest"])
        except (KeyError, TypeError, ValueError):  # Katib writes "unavailable"
            continue
    return metrics


def trial_from(obj: dict) -> Trial:
    """A Katib Trial object as a ``Trial``."""
    true = _true_conditions(obj)
    status = next((state for state in TRIAL_STATES if state in true), "Pending")
    return Trial(
        name=obj["metadata"]["name"],
        assignment=_assignment(obj.get("spec", {}).get("parameterAssignments", [])),
        status=status,
        metrics=_latest_metrics(obj.get("status", {}).get("observation")),
        message=true.get(status, {}).get("message", ""),
    )


def best_trial(experiment: dict) -> Trial | None:
    """The Experiment's current optimal trial, if one has reported its metrics."""
    optimal = experiment.get("status", {}).get("currentOptimalTrial") or {}
    metrics = _latest_metrics(optimal.get("observation"))
    if not optimal.get("bestTrialName") or "accuracy" not in metrics:
        return None
    assignment = _assignment(optimal.get("parameterAssignments", []))
    return Trial(optimal["bestTrialName"], assignment, "Succeeded", metrics)


def wait_for_experiment(
    kube: KubeClient,
    namespace: str,
    name: str,
    timeout_seconds: float,
    on_poll: Callable[[dict, list[Trial]], None] | None = None,
    poll_seconds: float = POLL_SECONDS,
) -> dict:
    """Poll until the Experiment ends; call ``on_poll(experiment, trials)`` each time.

    Raises:
        ExperimentFailed: it failed, or disappeared.
        TimeoutError: it did not end within ``timeout_seconds``.
    """
    deadline = time.monotonic() + timeout_seconds
    while True:
        experiment = get_experiment(kube, namespace, name)
        if experiment is None:
            raise ExperimentFailed(f"Experiment {namespace}/{name} disappeared")
        if on_poll:
            on_poll(experiment, [trial_from(obj) for obj in list_trials(kube, namespace, name)])
        outcome = experiment_outcome(experiment)
        if outcome == "Succeeded":
            return experiment
        if outcome == "Failed":
            raise ExperimentFailed(
                f"Experiment {namespace}/{name} failed: {condition_message(experiment)}"
            )
        if time.monotonic() >= deadline:
            raise TimeoutError(
                f"Experiment {namespace}/{name} did not finish within "
                f"{timeout_seconds:g} s: {condition_message(experiment)}"
            )
        time.sleep(max(0.0, min(poll_seconds, deadline - time.monotonic())))


def run_experiment(
    kube: KubeClient,
    experiment: dict,
    timeout_seconds: float,
    on_poll: Callable[[dict, list[Trial]], None] | None = None,
    poll_seconds: float = POLL_SECONDS,
) -> Trial:
    """Create the Experiment, wait for it, and return its best trial.

    A failed Experiment stays for inspection; one we stop waiting for is deleted.

    Raises:
        ExperimentFailed: it failed or no trial reported accuracy.
    """
    namespace, name = experiment["metadata"]["namespace"], experiment["metadata"]["name"]
    create_experiment(kube, experiment)
    try:
        final = wait_for_experiment(kube, namespace, name, timeout_seconds, on_poll, poll_seconds)
    except ExperimentFailed:
        raise
    except BaseException:
        delete_experiment(kube, namespace, name)
        raise
    best = best_trial(final)
    if best is None:
        raise ExperimentFailed(
            f"Experiment {namespace}/{name} ended without a trial that "
            f"reported accuracy: {condition_message(final)}"
        )
    return best


def tune(
    params: PipelineParams,
    sweep: SweepConfig,
    dataset_dir: str,
    workspace_path: str,
    run_id: str,
    task_config,
    timeout_seconds: float,
    kube: KubeClient | None = None,
) -> Trial:
    """The tune step: stage the data, run the Experiment, and return the best trial."""
    kube = kube or KubeClient.connect()
    namespace, name = params.namespace or current_namespace(), experiment_name(run_id)
    placement = placement_from(task_config, workspace_path)
    stage_dataset(dataset_dir, WorkPaths.under(workspace_path))
    experiment = build_experiment(params, sweep, name, namespace, workspace_path, placement)
    print(
        f"created Katib Experiment {namespace}/{name} ({sweep.algorithm}, "
        f"{sweep.max_trials} trials, {sweep.parallel_trials} at a time)",
        flush=True,
    )
    return run_experiment(kube, experiment, timeout_seconds, print_progress(), POLL_SECONDS)


def run_tune_step(
    dataset, workspace_path: str, run_id: str, task_config, sweep_timeout_seconds: int, **values
) -> tuple[float, int, float, float]:
    """The tune step's work: its inputs -> (lr, epochs, momentum, accuracy) of the best trial.

    ``values`` holds every ``SweepConfig`` field and the ``PipelineParams`` the trials use;
    both are validated before anything is created.
    """
    sweep = SweepConfig(**{item.name: values.pop(item.name) for item in fields(SweepConfig)})
    params = PipelineParams(**values)
    best = tune(
        params, sweep, dataset.path, workspace_path, run_id, task_config, sweep_timeout_seconds
    )
    print(f"best trial {best.name}: {best.assignment}, accuracy {best.accuracy:.4f}", flush=True)
    chosen = best.assignment
    return chosen["lr"], chosen["epochs"], chosen.get("momentum", params.momentum), best.accuracy


def print_progress(echo: Callable[[str], None] = print) -> Callable[[dict, list[Trial]], None]:
    """An ``on_poll`` that prints the trial table whenever a trial changes state."""
    from components.sweep import trial_table

    seen: dict[str, tuple] = {}

    def on_poll(experiment: dict, trials: list[Trial]) -> None:
        states = {trial.name: (trial.status, tuple(trial.metrics.items())) for trial in trials}
        if states != seen:
            seen.clear()
            seen.update(states)
            echo(trial_table(trials))

    return on_poll


@dsl.component(
    base_image=COMPONENTS_IMAGE, install_kfp_package=False, task_config_passthroughs=PASSTHROUGHS
)
def tune_hyperparameters(
    dataset: Input[Dataset],
    workspace_path: str,
    run_id: str,
    task_config: dsl.TaskConfig,
    algorithm: str,
    lr_min: float,
    lr_max: float,
    epochs_min: int,
    epochs_max: int,
    max_trials: int,
    parallel_trials: int,
    max_failed_trials: int,
    sweep_timeout_seconds: int,
    batch_size: int,
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
    lr_step: Optional[float] = None,
    epochs_step: Optional[int] = None,
    momentum_min: Optional[float] = None,
    momentum_max: Optional[float] = None,
    momentum_step: Optional[float] = None,
    goal: Optional[float] = None,
    seed: Optional[int] = None,
) -> NamedTuple("BestParams", lr=float, epochs=int, momentum=float, accuracy=float):
    """Search lr and epochs (and momentum) with a Katib Experiment; output the best.

    Stages the packed data in the run's workspace, creates an Experiment whose trials
    are this pipeline's PyTorchJob with the searched values, prints the trials as they
    progress, and fails if the Experiment fails. Katib reads each trial's metric line
    from its master pod and keeps the latest accuracy (that of the saved model).

    Args:
        dataset: The packed dataset the trials train on.
        workspace_path: The run's shared workspace (dsl.WORKSPACE_PATH_PLACEHOLDER).
        run_id: The pipeline run's id; the Experiment's name is derived from it.
        task_config: This task's volumes and env, passed on to every trial's pods.
        algorithm: Katib's suggestion algorithm: random, grid, bayesianoptimization, tpe,
            multivariate-tpe, cmaes or sobol.
        lr_min: Smallest learning rate tried.
        lr_max: Largest learning rate tried.
        epochs_min: Fewest epochs tried.
        epochs_max: Most epochs tried.
        max_trials: Trials to complete.
        parallel_trials: Trials running at once.
        max_failed_trials: The Experiment fails when this many trials have failed.
        sweep_timeout_seconds: Fail (and delete the Experiment) after this many seconds.
        batch_size: Global batch size of every trial.
        momentum: SGD momentum or AdamW beta1 of every trial, unless momentum is searched.
        optimizer: "sgd" or "adamw".
        workers: Replicas per trial: one Master and workers-1 Workers.
        nproc_per_node: Processes per replica (one per GPU).
        gpus_per_worker: GPUs (or MIG slices) per replica; 0 trains on CPU.
        gpu_resource: The GPU resource name, e.g. nvidia.com/gpu.
        cpu: CPU request and limit per replica.
        memory: Memory request and limit per replica.
        queue_name: The Kueue LocalQueue that admits each trial's job.
        priority_class: The Kueue WorkloadPriorityClass; empty for none.
        namespace: Where the Experiment runs; empty for this run's namespace.
        timeout_seconds: Each trial's job fails after this many seconds.
        trainer_image: The image of the trial pods.
        lr_step: Grid spacing of the learning rate (needed by grid).
        epochs_step: Grid spacing of epochs (default 1).
        momentum_min: With momentum_max, also search momentum in this range.
        momentum_max: Upper end of the momentum range.
        momentum_step: Grid spacing of momentum (needed by grid when searched).
        goal: Stop once a trial's accuracy reaches this.
        seed: The suggestion algorithm's random_state.

    Returns:
        lr: The best trial's learning rate.
        epochs: The best trial's epochs.
        momentum: The best trial's momentum (the fixed one if not searched).
        accuracy: The best trial's test accuracy.
    """
    arguments = dict(locals())  # every input, by name
    from components.katib import run_tune_step

    return run_tune_step(**arguments)
