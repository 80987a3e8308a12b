"""The tune step through ``.python_func``, with the Kubernetes API faked at the client boundary.

``fake_k8s`` (tests/conftest.py) stands in for ``CustomObjectsApi``: Katib's side (the
Experiment's status, its Trial objects) is scripted, and the tests check the exact
Experiment sent, the outputs, and what happens when it fails, ends empty, or times out.
"""

from dataclasses import asdict

import pytest
from kfp import dsl

import components.katib as katib
from components.katib import ExperimentFailed, best_trial, trial_from
from components.params import DEFAULTS
from components.sweep import SweepConfig

JOB_PARAMS = {
    name: value
    for name, value in asdict(DEFAULTS).items()
    if name in katib.tune_hyperparameters.component_spec.inputs
}
GRID = dict(
    algorithm="grid",
    lr_min=0.01,
    lr_max=0.05,
    lr_step=0.04,
    epochs_min=1,
    epochs_max=2,
    max_trials=4,
    parallel_trials=2,
    max_failed_trials=1,
    seed=5,
)
SWEEP = {**{k: v for k, v in asdict(SweepConfig()).items()}, **GRID}


def condition(kind: str, reason: str = "", message: str = "") -> dict:
    return {"type": kind, "status": "True", "reason": reason, "message": message}


def katib_trial(name: str, lr: str, epochs: str, state: str, accuracy: str | None = None):
    observation = {
        "metrics": [
            {"name": "accuracy", "latest": accuracy, "max": accuracy, "min": accuracy},
            {"name": "loss", "latest": "0.5", "max": "0.9", "min": "0.5"},
        ]
    }
    return {
        "metadata": {"name": name, "labels": {"katib.kubeflow.org/experiment": "x"}},
        "spec": {
            "parameterAssignments": [
                {"name": "lr", "value": lr},
                {"name": "epochs", "value": epochs},
            ]
        },
        "status": {
            "conditions": [condition("Created"), condition(state)],
            **({"observation": observation} if accuracy else {}),
        },
    }


RUNNING = {"conditions": [condition("Created"), condition("Running", "ExperimentRunning")]}
SUCCEEDED = {
    "conditions": [
        condition("Created"),
        condition("Succeeded", "ExperimentMaxTrialsReached", "max trials reached"),
    ],
    "currentOptimalTrial": {
        "bestTrialName": "tune-abc",
        "parameterAssignments": [{"name": "lr", "value": "0.05"}, {"name": "epochs", "value": "2"}],
        "observation": {
            "metrics": [
                {"name": "accuracy", "latest": "0.8312", "max": "0.8312", "min": "0.8100"},
                {"name": "loss", "latest": "0.47", "max": "0.6", "min": "0.47"},
            ]
        },
    },
}


@pytest.fixture
def step(tmp_path, packed_small, monkeypatch):
    """Call the tune step as the KFP launcher would; return its outputs."""
    monkeypatch.setattr(katib, "POLL_SECONDS", 0.01)
    workspace = tmp_path / "kfp-workspace"
    task_config = dsl.TaskConfig(
        volumes=[
            {"name": "kfp-workspace", "persistentVolumeClaim": {"claimName": "run-9-kfp-workspace"}}
        ],
        volume_mounts=[{"name": "kfp-workspace", "mountPath": str(workspace)}],
    )

    def call(**changes):
        arguments = {
            **JOB_PARAMS,
            **SWEEP,
            "namespace": "team-a",
            "workers": 2,
            "sweep_timeout_seconds": 60,
            **changes,
        }
        return katib.tune_hyperparameters.python_func(
            dataset=dsl.Dataset(uri=str(packed_small)),
            workspace_path=str(workspace),
            run_id="4d2c9e1b-1111",
            task_config=task_config,
            **arguments,
        )

    call.workspace = workspace
    return call


def test_creates_the_experiment_and_outputs_the_best_trial(
    step, fake_k8s, validate_katib_experiment, capsys
):
    fake_k8s.custom.statuses["experiments"] = [RUNNING, RUNNING, SUCCEEDED]
    fake_k8s.custom.listings["trials"] = [
        [katib_trial("tune-abc", "0.05", "2", "Running")],
        [
            katib_trial("tune-abc", "0.05", "2", "Succeeded", "0.8312"),
            katib_trial("tune-def", "0.01", "1", "Failed"),
        ],
    ]
    assert step() == (0.05, 2, DEFAULTS.momentum, 0.8312)

    (experiment,) = fake_k8s.custom.created("experiments")
    trial_job = validate_katib_experiment(experiment)
    name = experiment["metadata"]["name"]
    assert name.startswith("fmnist-tune-4d2c9e1b-")
    assert experiment["metadata"]["namespace"] == "team-a"
    assert experiment["spec"]["algorithm"] == {
        "algorithmName": "grid",
        "algorithmSettings": [{"name": "random_state", "value": "5"}],
    }
    assert (experiment["spec"]["maxTrialCount"], experiment["spec"]["parallelTrialCount"]) == (4, 2)
    worker = trial_job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    workspace = step.workspace
    assert worker["containers"][0]["args"] == [
        f"--data-dir={workspace}/train/data",
        f"--model-dir={workspace}/katib/{name}/example-trial/model",
        f"--checkpoint-dir={workspace}/katib/{name}/example-trial/checkpoints",
        "--epochs=1",
        f"--batch-size={DEFAULTS.batch_size}",
        "--lr=0.01",
        f"--momentum={DEFAULTS.momentum}",
        f"--optimizer={DEFAULTS.optimizer}",
    ]
    assert worker["volumes"] == [
        {"name": "kfp-workspace", "persistentVolumeClaim": {"claimName": "run-9-kfp-workspace"}}
    ]
    assert (workspace / "train" / "data" / "manifest.json").is_file()  # staged for the trials
    label = f"katib.kubeflow.org/experiment={name}"
    assert ("list", "kubeflow.org", "v1beta1", "team-a", "trials", label) in fake_k8s.custom.calls
    assert ("delete", "experiments") not in fake_k8s.custom.verbs()
    out = capsys.readouterr().out
    assert "tune-def" in out and "Failed" in out  # the trial table reached the step's log
    assert "best trial tune-abc" in out


def test_a_failed_experiment_fails_the_step_and_stays(step, fake_k8s):
    failed = {
        "conditions": [
            condition("Created"),
            condition(
                "Failed",
                "ExperimentFailed",
                "Experiment has failed because max failed count has reached",
            ),
        ]
    }
    fake_k8s.custom.statuses["experiments"] = [RUNNING, failed]
    with pytest.raises(ExperimentFailed, match="max failed count has reached"):
        step()
    assert ("delete", "experiments") not in fake_k8s.custom.verbs()


def test_an_experiment_without_a_best_trial_fails_the_step(step, fake_k8s):
    fake_k8s.custom.statuses["experiments"] = [{**SUCCEEDED, "currentOptimalTrial": {}}]
    with pytest.raises(ExperimentFailed, match="without a trial that reported accuracy"):
        step()


def test_timeout_deletes_the_experiment(step, fake_k8s):
    fake_k8s.custom.statuses["experiments"] = [RUNNING]
    with pytest.raises(TimeoutError, match="did not finish within 0 s"):
        step(sweep_timeout_seconds=0)
    assert fake_k8s.custom.verbs()[-1] == ("delete", "experiments")


def test_a_bad_sweep_fails_before_anything_is_created(step, fake_k8s):
    with pytest.raises(ValueError, match="lr_step must be set for the grid algorithm"):
        step(lr_step=None)
    assert fake_k8s.custom.calls == []
    assert not step.workspace.exists()


def test_searched_momentum_is_an_output(step, fake_k8s):
    best = {
        **SUCCEEDED["currentOptimalTrial"],
        "parameterAssignments": [
            {"name": "lr", "value": "0.02"},
            {"name": "epochs", "value": "3"},
            {"name": "momentum", "value": "0.85"},
        ],
    }
    fake_k8s.custom.statuses["experiments"] = [{**SUCCEEDED, "currentOptimalTrial": best}]
    outputs = step(algorithm="random", lr_step=None, momentum_min=0.8, momentum_max=0.95)
    assert outputs == (0.02, 3, 0.85, 0.8312)


def test_reading_trials_and_the_optimal_trial():
    trial = trial_from(katib_trial("t1", "0.03", "4", "MetricsUnavailable"))
    assert (trial.name, trial.assignment, trial.status, trial.metrics) == (
        "t1",
        {"lr": 0.03, "epochs": 4},
        "MetricsUnavailable",
        {},
    )
    unavailable = katib_trial("t2", "0.03", "4", "Succeeded", "unavailable")
    assert trial_from(unavailable).metrics == {"loss": 0.5}
    assert trial_from({"metadata": {"name": "t3"}}).status == "Pending"
    best = best_trial({"status": SUCCEEDED})
    assert (best.name, best.assignment, best.accuracy) == (
        "tune-abc",
        {"lr": 0.05, "epochs": 2},
        0.8312,
    )
    assert best_trial({"status": {}}) is None
