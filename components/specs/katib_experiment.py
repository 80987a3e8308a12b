"""The Katib Experiment (``kubeflow.org/v1beta1``) whose trials are the pipeline's training job.

The trial template is the very PyTorchJob or TrainJob the train step creates, with
``${trialParameters...}`` for the searched values and a per-trial output directory.
Success and failure conditions, primary pod labels and container follow Katib's own
defaults for each kind (kubeflow/katib v0.19.0 ``pkg/apis/controller/experiments/v1beta1/
constants.go`` and ``experiment_defaults.go``), written out so the object says what it does.
The StdOut collector reads only the primary pod, so rank 0 prints the metric line; each
line starts with an RFC 3339 time that Katib stores as the observation time, so the
``latest`` strategy is the last epoch (the saved model).
"""

from __future__ import annotations

from components.specs.kinds import EXPERIMENT, JobKind
from components.specs.params import TrainingJob
from components.specs.pods import TrainerFlags
from components.specs.sweep import MEDIAN_STOP, TRIAL_PARAMETER_NAMES, Sweep, is_integer
from trainer.metrics import KATIB_METRICS_FILTER

TRIAL_NAME_PARAMETER = "trialName"  # ${trialSpec.Name}: keeps each trial's files apart
# Katib's trialTemplate conditions per job kind (constants.go, v0.19.0); the primary pod's
# labels are the job kind's rank-0 labels (compat.RANK0_POD_LABELS).
TRIAL_SETTINGS = {
    "PyTorchJob": {
        "successCondition": 'status.conditions.#(type=="Succeeded")#|#(status=="True")#',
        "failureCondition": 'status.conditions.#(type=="Failed")#|#(status=="True")#',
    },
    "TrainJob": {
        "successCondition": 'status.conditions.#(type=="Complete")#|#(status=="True")#',
        "failureCondition": 'status.conditions.#(type=="Failed")#|#(status=="True")#',
    },
}


def trial_placeholder(name: str) -> str:
    """``${trialParameters.<name>}``: Katib substitutes the trial's value for it."""
    return f"${{trialParameters.{name}}}"


def trial_flags(flags: TrainerFlags, sweep: Sweep, root: str) -> TrainerFlags:
    """``flags`` with the searched values as placeholders and per-trial output dirs.

    Args:
        flags: the trainer flags every trial shares (data, batch size, optimizer, ...).
        sweep: which parameters are searched.
        root: a directory on the shared volume; trial ``t`` writes under ``root/t``.
    """
    trial_dir = f"{root.rstrip('/')}/{trial_placeholder(TRIAL_NAME_PARAMETER)}"
    searched = {
        name: trial_placeholder(TRIAL_PARAMETER_NAMES[name]) for name in sweep.parameter_names
    }
    return flags.for_trial(searched, trial_dir)


def parameters(sweep: Sweep) -> list[dict]:
    """``spec.parameters``: lr and momentum as doubles, epochs as an int (values as strings)."""
    specs = []
    for name in sweep.parameter_names:
        low, high, step = sweep.bounds(name)
        space = {"min": str(low), "max": str(high)}
        if step is not None:
            space["step"] = str(step)
        kind = "int" if is_integer(name) else "double"
        specs.append({"name": name, "parameterType": kind, "feasibleSpace": space})
    return specs


def trial_parameters(sweep: Sweep) -> list[dict]:
    """``trialTemplate.trialParameters``: one per searched parameter, plus the trial name."""
    params = [
        {
            "name": TRIAL_PARAMETER_NAMES[name],
            "reference": name,
            "description": f"{TrainingJob.help()[name]} (trainer --{name.replace('_', '-')})",
        }
        for name in sweep.parameter_names
    ]
    params.append(
        {
            "name": TRIAL_NAME_PARAMETER,
            "reference": "${trialSpec.Name}",
            "description": "the trial's name: its output directory",
        }
    )
    return params


def objective(sweep: Sweep) -> dict:
    """Maximise accuracy, also collect loss; both keep the latest value (the saved model)."""
    spec = {
        "type": "maximize",
        "objectiveMetricName": "accuracy",
        "additionalMetricNames": ["loss"],
        "metricStrategies": [
            {"name": "accuracy", "value": "latest"},
            {"name": "loss", "value": "latest"},
        ],
    }
    if sweep.goal is not None:
        spec["goal"] = sweep.goal
    return spec


def algorithm(sweep: Sweep) -> dict:
    """``spec.algorithm``, with ``random_state`` when seeded (``Sweep`` allows it only there)."""
    spec = {"algorithmName": sweep.algorithm}
    if sweep.seed is not None:
        spec["algorithmSettings"] = [{"name": "random_state", "value": str(sweep.seed)}]
    return spec


def early_stopping(sweep: Sweep) -> dict:
    """``spec.earlyStopping``: medianstop with both of its settings written out."""
    settings = {
        "min_trials_required": sweep.median_stop_trials,
        "start_step": sweep.median_stop_epochs,
    }
    return {
        "algorithmName": MEDIAN_STOP,
        "algorithmSettings": [
            {"name": name, "value": str(value)} for name, value in settings.items()
        ],
    }


def trial_template(sweep: Sweep, kind: JobKind, trial_job: dict) -> dict:
    """``spec.trialTemplate`` for a trial job of ``kind``.

    Raises:
        ValueError: if ``trial_job`` sets a name or namespace (Katib sets them per trial).
    """
    if {"name", "namespace"} & set(trial_job.get("metadata", {})):
        raise ValueError("the trial job must leave metadata.name and namespace to Katib")
    return {
        "primaryContainerName": kind.container,
        **TRIAL_SETTINGS[kind.resource.kind],
        "primaryPodLabels": kind.rank0_labels,
        "trialParameters": trial_parameters(sweep),
        "trialSpec": trial_job,
    }


def experiment(*, name: str, namespace: str | None, sweep: Sweep, template: dict) -> dict:
    """A Katib Experiment running ``template`` (from ``trial_template``) per trial."""
    metadata = {"name": name, **({"namespace": namespace} if namespace else {})}
    stopping = {"earlyStopping": early_stopping(sweep)} if sweep.median_stop else {}
    return {
        "apiVersion": EXPERIMENT.api_version,
        "kind": EXPERIMENT.kind,
        "metadata": metadata,
        "spec": {
            "objective": objective(sweep),
            "algorithm": algorithm(sweep),
            **stopping,
            "parallelTrialCount": sweep.parallel_trials,
            "maxTrialCount": sweep.max_trials,
            "maxFailedTrialCount": sweep.max_failed_trials,
            "metricsCollectorSpec": {
                "collector": {"kind": "StdOut"},
                "source": {"filter": {"metricsFormat": [KATIB_METRICS_FILTER]}},
            },
            "parameters": parameters(sweep),
            "trialTemplate": template,
        },
    }
