"""The tune step through ``.python_func``, with the Kubernetes API faked at the client boundary.

``fake_k8s`` (tests/fake_kube.py) stands in for the ``kubernetes`` client: Katib's side
(the Experiment's status, its Trial objects) is scripted, and the tests check the exact
Experiment sent, the outputs, and what happens when it fails, ends empty, times out, or is
retried. Katib's trial status fields are those of kubeflow/katib v0.19.0
``pkg/apis/controller/trials/v1beta1/trial_types.go`` and ``experiments/v1beta1/
experiment_types.go`` (``currentOptimalTrial``).
"""

import pytest
from kfp import dsl

from components.runtime import katib, waiting
from components.runtime.katib import ExperimentFailed, best_trial, trial_from
from components.runtime.objects import NotOurs
from components.specs.params import TrainingJob
from components.specs.sweep import Sweep
from components.steps.tune import tune

DEFAULTS = TrainingJob()
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
SWEEP = Sweep(**GRID, sweep_timeout_seconds=60)


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
def step(tmp_path, packed_small, monkeypatch, fake_k8s):
    """Call the tune step as the KFP launcher would; return its outputs."""
    monkeypatch.setattr(waiting, "POLL_SECONDS", 0.01)
    monkeypatch.setattr(katib, "POLL_SECONDS", 0.01)
    monkeypatch.setattr("components.runtime.katib.current_namespace", lambda: "team-a")
    workspace = tmp_path / "kfp-workspace"
    task_config = dsl.TaskConfig(
        volumes=[
            {"name": "kfp-workspace", "persistentVolumeClaim": {"claimName": "run-9-kfp-workspace"}}
        ],
        volume_mounts=[{"name": "kfp-workspace", "mountPath": str(workspace)}],
    )

    def call(sweep=SWEEP, **changes):
        return tune.python_func(
            dataset=dsl.Dataset(uri=str(packed_small)),
            job=TrainingJob(**{"workers": 2, **changes}).to_dict(),
            sweep=sweep.to_dict(),
            workspace_path=str(workspace),
            run_id="4d2c9e1b-1111",
            task_config=task_config,
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
    job, accuracy = step()
    assert accuracy == 0.8312
    assert TrainingJob.from_dict(job) == TrainingJob(workers=2, lr=0.05, epochs=2)

    (experiment,) = fake_k8s.custom.created("experiments")
    trial_job = validate_katib_experiment(experiment)
    name = experiment["metadata"]["name"]
    assert name == "fmnist-tune-4d2c9e1b1111"
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
        "--num-threads=2",  # the CPU limit of a node
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
    with pytest.raises(TimeoutError, match="did not finish within 1 s"):
        step(Sweep(**GRID, sweep_timeout_seconds=1))
    assert fake_k8s.custom.verbs()[-1] == ("delete", "experiments")


def test_a_retried_step_adopts_its_experiment(step, fake_k8s):
    fake_k8s.custom.statuses["experiments"] = [SUCCEEDED]
    step()
    step()
    assert len(fake_k8s.custom.created("experiments")) == 1
    with pytest.raises(NotOurs, match="Experiment team-a/fmnist-tune-4d2c9e1b1111 exists"):
        step(Sweep(**{**GRID, "seed": 6}))


def test_trials_are_trainjobs_where_the_cluster_serves_only_trainjobs(
    step, fake_k8s, crd_schemas, validate_katib_experiment
):
    """Katib v0.19.0 runs TrainJob trials with its TrainJob defaults (constants.go)."""
    fake_k8s.served = {"trainer.kubeflow.org/v1alpha1": ["trainjobs"]}
    schema = crd_schemas[("trainer.kubeflow.org/v1alpha1", "TrainJob")]
    fake_k8s.serve_schema("trainer.kubeflow.org/v1alpha1", "TrainJob", schema)
    fake_k8s.custom.statuses["experiments"] = [SUCCEEDED]
    step()
    (experiment,) = fake_k8s.custom.created("experiments")
    trial_job = validate_katib_experiment(experiment)
    assert trial_job["kind"] == "TrainJob"
    template = experiment["spec"]["trialTemplate"]
    assert template["primaryContainerName"] == "node"
    assert (
        template["successCondition"] == 'status.conditions.#(type=="Complete")#|#(status=="True")#'
    )
    assert "--lr=0.01" in trial_job["spec"]["trainer"]["args"]


MIG_NODE = {
    "requests": {"cpu": "2", "memory": "4Gi"},
    "limits": {"cpu": "2", "memory": "4Gi", "nvidia.com/mig-1g.10gb": "1"},
}


@pytest.mark.parametrize("trainer", [None, "v2.3.0", "v2.1.0"], ids=["pytorchjob", "v2.3", "v2.1"])
def test_trials_ask_for_the_gpu_resource_of_the_job(
    step, fake_k8s, crd_schemas_at, validate_katib_experiment, trainer
):
    """Each trial's pods get the MIG slice the job names, whatever job kind Katib runs."""
    if trainer:
        fake_k8s.served = {"trainer.kubeflow.org/v1alpha1": ["trainjobs"]}
        schemas = crd_schemas_at("trainer", trainer)
        schema = schemas[("trainer.kubeflow.org/v1alpha1", "TrainJob")]
        fake_k8s.serve_schema("trainer.kubeflow.org/v1alpha1", "TrainJob", schema)
    fake_k8s.custom.statuses["experiments"] = [SUCCEEDED]
    step(gpus_per_worker=1, gpu_resource="nvidia.com/mig-1g.10gb")
    (experiment,) = fake_k8s.custom.created("experiments")
    trial_spec = experiment["spec"]["trialTemplate"]["trialSpec"]
    if trainer:
        assert trial_spec["spec"]["trainer"]["resourcesPerNode"] == MIG_NODE
        return
    validate_katib_experiment(experiment)
    replicas = trial_spec["spec"]["pytorchReplicaSpecs"]
    assert sorted(replicas) == ["Master", "Worker"]
    for replica in replicas.values():
        assert replica["template"]["spec"]["containers"][0]["resources"] == MIG_NODE
    assert trial_spec["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "fmnist-mig"


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
    sweep = Sweep(algorithm="random", momentum_min=0.8, momentum_max=0.95)
    job, accuracy = step(sweep)
    assert (job["lr"], job["epochs"], job["momentum"], accuracy) == (0.02, 3, 0.85, 0.8312)


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


def test_a_bad_sweep_fails_before_anything_is_created(step, fake_k8s):
    bad = {**SWEEP.to_dict(), "lr_step": None}
    with pytest.raises(ValueError, match="lr_step must be set for the grid algorithm"):
        tune.python_func(
            dataset=dsl.Dataset(uri="unused"),
            job=TrainingJob().to_dict(),
            sweep=bad,
            workspace_path=str(step.workspace),
            run_id="r",
            task_config=dsl.TaskConfig(),
        )
    assert fake_k8s.custom.calls == []
    assert not step.workspace.exists()
