"""Tune with Katib: create (or adopt) the Experiment, follow its trials, return the best.

The trials are the train step's own job (PyTorchJob or TrainJob, whichever the cluster
serves) with ``${trialParameters...}`` in the trainer's flags, reading the data staged in
the workspace. A failed Experiment fails the step with its conditions; one the step stops
waiting for (its timeout, SIGTERM, Ctrl-C) is deleted, and Katib deletes its trials.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from components.runtime.discovery import find_target
from components.runtime.kube import KubeClient, current_namespace
from components.runtime.objects import create_or_adopt, run_object_name
from components.runtime.signals import terminate_on_sigterm
from components.runtime.volumes import stage_dataset
from components.runtime.waiting import condition_summary, true_conditions, wait_until
from components.specs import katib_experiment
from components.specs.kinds import EXPERIMENT, TRIAL, Target
from components.specs.params import TrainingJob
from components.specs.pods import Placement, TrainerFlags, WorkPaths
from components.specs.sweep import Sweep, Trial, assignment, trial_table
from components.specs.training_job import training_job

POLL_SECONDS = 15.0
EXPERIMENT_LABEL = "katib.kubeflow.org/experiment"
# A trial's state, in the order its conditions are checked (the first one True wins).
TRIAL_STATES = ("Succeeded", "Failed", "MetricsUnavailable", "EarlyStopped", "Killed", "Running")


class ExperimentFailed(RuntimeError):
    """The Katib Experiment failed, or ended without a trial that reported accuracy."""


def build_experiment(
    job: TrainingJob,
    sweep: Sweep,
    target: Target,
    name: str,
    namespace: str | None,
    workspace: str,
    placement: Placement,
) -> dict:
    """The Experiment whose trials are the train step's job with the searched values.

    Trials read the data staged under ``workspace`` and write their model and
    checkpoints under ``<workspace>/katib/<experiment>/<trial>``.
    """
    paths = WorkPaths.under(workspace)
    flags = katib_experiment.trial_flags(
        TrainerFlags.for_job(job, paths), sweep, f"{workspace}/katib/{name}"
    )
    trial_job = training_job(
        target.api,
        name=None,
        namespace=None,
        job=job,
        flags=flags,
        placement=placement,
        generation=target.generation,
    )
    template = katib_experiment.trial_template(sweep, target.kind, trial_job)
    return katib_experiment.experiment(
        name=name, namespace=namespace, sweep=sweep, template=template
    )


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
    true = true_conditions(obj)
    status = next((state for state in TRIAL_STATES if state in true), "Pending")
    return Trial(
        name=obj["metadata"]["name"],
        assignment=assignment(obj.get("spec", {}).get("parameterAssignments", [])),
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
    values = assignment(optimal.get("parameterAssignments", []))
    return Trial(optimal["bestTrialName"], values, "Succeeded", metrics)


class ExperimentWatch:
    """One poll of an Experiment and its trials."""

    def __init__(self, kube: KubeClient, namespace: str, name: str, on_poll=None):
        self.kube, self.namespace, self.name, self.on_poll = kube, namespace, name, on_poll
        self.last: dict | None = None

    def check(self) -> dict | None:
        """The Experiment once it succeeded; None while it runs; raises if it failed."""
        experiment = self.kube.get(EXPERIMENT, self.namespace, self.name)
        if experiment is None:
            raise ExperimentFailed(f"Experiment {self.namespace}/{self.name} disappeared")
        self.last = experiment
        if self.on_poll:
            objects = self.kube.list(TRIAL, self.namespace, f"{EXPERIMENT_LABEL}={self.name}")
            self.on_poll(experiment, [trial_from(obj) for obj in objects])
        true = true_conditions(experiment)
        if "Succeeded" in true:
            return experiment
        if "Failed" in true:
            raise ExperimentFailed(
                f"Experiment {self.namespace}/{self.name} failed:\n{self.describe()}"
            )
        return None

    def describe(self) -> str:
        """The Experiment's conditions."""
        return f"Conditions:\n{condition_summary(self.last)}"


def run_experiment(
    kube: KubeClient,
    experiment: dict,
    timeout_seconds: float,
    on_poll: Callable[[dict, list[Trial]], None] | None = None,
    poll_seconds: float | None = None,
    before_create: Callable[[], None] = lambda: None,
) -> Trial:
    """Create (or adopt) the Experiment, wait for it, and return its best trial.

    A failed Experiment stays for inspection; one the step stops waiting for is deleted.

    Raises:
        ExperimentFailed: it failed or no trial reported accuracy.
    """
    namespace, name = experiment["metadata"]["namespace"], experiment["metadata"]["name"]
    watch = ExperimentWatch(kube, namespace, name, on_poll)
    with terminate_on_sigterm():
        create_or_adopt(kube, EXPERIMENT, experiment, before_create)
        try:
            final = wait_until(
                watch.check,
                what=f"Experiment {namespace}/{name}",
                timeout_seconds=timeout_seconds,
                describe=watch.describe,
                poll_seconds=poll_seconds or POLL_SECONDS,
            )
        except (TimeoutError, KeyboardInterrupt):
            kube.delete(EXPERIMENT, namespace, name)
            raise
    best = best_trial(final)
    if best is None:
        raise ExperimentFailed(
            f"Experiment {namespace}/{name} ended without a trial that reported accuracy:\n"
            f"{watch.describe()}"
        )
    return best


def print_progress(echo: Callable[[str], None] = print) -> Callable[[dict, list[Trial]], None]:
    """An ``on_poll`` that prints the trial table whenever a trial changes state."""
    seen: dict[str, tuple] = {}

    def on_poll(experiment: dict, trials: list[Trial]) -> None:
        states = {trial.name: (trial.status, tuple(trial.metrics.items())) for trial in trials}
        if states != seen:
            seen.clear()
            seen.update(states)
            echo(trial_table(trials))

    return on_poll


def tune(
    job: TrainingJob,
    sweep: Sweep,
    dataset_dir: str,
    workspace_path: str,
    namespace: str,
    name: str,
    placement: Placement,
    kube: KubeClient,
) -> tuple[TrainingJob, float]:
    """Stage the data, run the Experiment; the job with the best trial's values, its accuracy."""
    target = find_target(kube, job.job_api)
    experiment = build_experiment(job, sweep, target, name, namespace, workspace_path, placement)
    print(
        f"Katib Experiment {namespace}/{name}: {sweep.algorithm}, {sweep.max_trials} "
        f"{target.kind.resource.kind} trials, {sweep.parallel_trials} at a time",
        flush=True,
    )
    best = run_experiment(
        kube,
        experiment,
        sweep.sweep_timeout_seconds,
        print_progress(),
        before_create=lambda: stage_dataset(dataset_dir, WorkPaths.under(workspace_path)),
    )
    print(f"best trial {best.name}: {best.assignment}, accuracy {best.accuracy:.4f}", flush=True)
    return replace(job, **best.assignment), best.accuracy


def tune_job(
    job: TrainingJob,
    sweep: Sweep,
    dataset_dir: str,
    workspace_path: str,
    run_id: str,
    placement: Placement,
) -> tuple[dict, float]:
    """The tune step: the training job with the best trial's values, and its accuracy."""
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
