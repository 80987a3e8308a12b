"""The Katib Experiment builder: schema-valid, Katib's own rules, and a filter that works.

Validation runs offline against Katib's OpenAPI spec and the PyTorchJob CRD (the
``validate_katib_experiment`` fixture); the filter test parses the real trainer's stdout.
"""

import json
import re
import subprocess
import sys

import pytest

from components.specs import katib_experiment
from components.specs.compat import JOB_NAME_LABELS
from components.specs.kinds import JOB_KINDS, PYTORCHJOB_KIND
from components.specs.params import TrainingJob
from components.specs.pods import Placement, TrainerFlags
from components.specs.pytorchjob import pytorchjob
from components.specs.sweep import Sweep
from trainer.metrics import KATIB_METRICS_FILTER, metric_series, parse_metric_lines

FLAGS = TrainerFlags(
    data_dir="/kfp-workspace/train/data",
    model_dir="/unused",
    checkpoint_dir="/unused",
    recipe=dict(epochs=10, batch_size=128, lr=0.05, momentum=0.9, optimizer="sgd"),
)
ROOT = "/kfp-workspace/katib/tune-1"


def seeded(algorithm: str, seed: int) -> dict:
    return {
        "algorithmName": algorithm,
        "algorithmSettings": [{"name": "random_state", "value": str(seed)}],
    }


KATIB_SUCCESS_CONDITION = katib_experiment.TRIAL_SETTINGS["PyTorchJob"]["successCondition"]
KATIB_FAILURE_CONDITION = katib_experiment.TRIAL_SETTINGS["PyTorchJob"]["failureCondition"]


def build(sweep: Sweep, workers: int = 2) -> dict:
    args = katib_experiment.trial_flags(FLAGS, sweep, ROOT).args()
    job = pytorchjob(
        name=None,
        namespace=None,
        job=TrainingJob(workers=workers),
        args=args,
        placement=Placement(),
    )
    template = katib_experiment.trial_template(sweep, PYTORCHJOB_KIND, job)
    return katib_experiment.experiment(
        name="tune-1", namespace="team", sweep=sweep, template=template
    )


def test_default_sweep_is_the_documented_experiment(validate_katib_experiment):
    experiment = build(Sweep())
    validate_katib_experiment(experiment)
    spec = experiment["spec"]
    assert experiment["metadata"] == {"name": "tune-1", "namespace": "team"}
    assert spec["objective"] == {
        "type": "maximize",
        "objectiveMetricName": "accuracy",
        "additionalMetricNames": ["loss"],
        "metricStrategies": [
            {"name": "accuracy", "value": "latest"},
            {"name": "loss", "value": "latest"},
        ],
    }
    assert spec["algorithm"] == {"algorithmName": "random"}
    assert (spec["parallelTrialCount"], spec["maxTrialCount"], spec["maxFailedTrialCount"]) == (
        3,
        12,
        3,
    )
    assert spec["metricsCollectorSpec"] == {
        "collector": {"kind": "StdOut"},
        "source": {"filter": {"metricsFormat": [KATIB_METRICS_FILTER]}},
    }
    assert spec["parameters"] == [
        {
            "name": "lr",
            "parameterType": "double",
            "feasibleSpace": {"min": "0.001", "max": "0.01"},
        },
        {"name": "epochs", "parameterType": "int", "feasibleSpace": {"min": "2", "max": "8"}},
    ]
    template = spec["trialTemplate"]
    assert template["primaryContainerName"] == "pytorch"
    assert template["primaryPodLabels"] == {"training.kubeflow.org/job-role": "master"}
    assert template["successCondition"] == KATIB_SUCCESS_CONDITION
    assert template["failureCondition"] == KATIB_FAILURE_CONDITION
    assert [(p["name"], p["reference"]) for p in template["trialParameters"]] == [
        ("learningRate", "lr"),
        ("epochs", "epochs"),
        ("trialName", "${trialSpec.Name}"),
    ]


@pytest.mark.parametrize("kind", JOB_KINDS.values(), ids=list(JOB_KINDS))
def test_the_launcher_follows_the_pod_katib_reads(kind):
    """The pod whose log the train step streams is the trial's primary pod, for each kind."""
    template = katib_experiment.trial_template(Sweep(), kind, {"spec": {}})
    selector = dict(item.split("=") for item in kind.rank0_selector("job-1").split(","))
    assert template["primaryPodLabels"].items() <= selector.items()
    assert selector[JOB_NAME_LABELS[kind.resource.kind]] == "job-1"
    assert len(selector) == len(template["primaryPodLabels"]) + 1


def test_conditions_are_katibs_defaults_for_kubeflow_jobs():
    # kubeflow/katib v0.19.0 pkg/apis/controller/experiments/v1beta1/constants.go; gjson.
    assert KATIB_SUCCESS_CONDITION == 'status.conditions.#(type=="Succeeded")#|#(status=="True")#'
    assert KATIB_FAILURE_CONDITION == 'status.conditions.#(type=="Failed")#|#(status=="True")#'


@pytest.mark.parametrize(
    ("sweep", "algorithm", "parameters"),
    [
        (
            Sweep(
                algorithm="grid",
                lr_min=0.01,
                lr_max=0.05,
                lr_step=0.02,
                epochs_min=1,
                epochs_max=3,
                max_trials=9,
                parallel_trials=2,
                seed=7,
            ),
            seeded("grid", 7),
            [
                {
                    "name": "lr",
                    "parameterType": "double",
                    "feasibleSpace": {"min": "0.01", "max": "0.05", "step": "0.02"},
                },
                {
                    "name": "epochs",
                    "parameterType": "int",
                    "feasibleSpace": {"min": "1", "max": "3"},
                },
            ],
        ),
        (
            Sweep(lr_min=0.001, lr_max=0.2, momentum_min=0.5, momentum_max=0.95, seed=3, goal=0.92),
            seeded("random", 3),
            [
                {
                    "name": "lr",
                    "parameterType": "double",
                    "feasibleSpace": {"min": "0.001", "max": "0.2"},
                },
                {
                    "name": "epochs",
                    "parameterType": "int",
                    "feasibleSpace": {"min": "2", "max": "8"},
                },
                {
                    "name": "momentum",
                    "parameterType": "double",
                    "feasibleSpace": {"min": "0.5", "max": "0.95"},
                },
            ],
        ),
        (Sweep(algorithm="tpe"), {"algorithmName": "tpe"}, None),
        (Sweep(algorithm="sobol"), {"algorithmName": "sobol"}, None),
        (
            Sweep(algorithm="bayesianoptimization", seed=2),
            seeded("bayesianoptimization", 2),
            None,
        ),
    ],
    ids=["grid", "random-momentum-goal", "tpe", "sobol-unseeded", "bayesian"],
)
def test_variants_are_valid(validate_katib_experiment, sweep, algorithm, parameters):
    experiment = build(sweep)
    trial = validate_katib_experiment(experiment)
    assert experiment["spec"]["algorithm"] == algorithm
    if parameters is not None:
        assert experiment["spec"]["parameters"] == parameters
    assert experiment["spec"]["objective"].get("goal") == sweep.goal
    args = trial["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    assert f"--lr={sweep.lr_min}" in args["args"]


def test_median_stop_is_off_by_default_and_katibs_medianstop_when_on(
    validate_katib_experiment, katib_file
):
    """Read in kubeflow/katib v0.19.0 (the pinned module): medianstop's settings, their
    defaults (3 and 4) and checks (``pkg/earlystopping/v1beta1/medianstop/service.py``), the
    webhook's ``validateEarlyStopping`` (``pkg/webhook/v1beta1/experiment/validator/
    validator.go``: an algorithm of katib-config's ``earlyStoppings``,
    ``manifests/v1beta1/installs/katib-standalone/katib-config.yaml``) and the
    ``v1beta1.EarlyStoppingSpec`` schema (``api/openapi-spec/swagger.json``). Each start_step
    is one metric line, and the trainer prints one per epoch (``cmd/metricscollector/
    v1beta1/file-metricscollector/main.go``, ``watchMetricsFile``)."""
    assert "earlyStopping" not in build(Sweep())["spec"]
    service = katib_file("pkg/earlystopping/v1beta1/medianstop/service.py").read_text()
    defaults = dict(re.findall(r"self\.(min_trials_required|start_step) = (\d+)", service))
    assert defaults == {
        "min_trials_required": str(Sweep().median_stop_trials),
        "start_step": str(Sweep().median_stop_epochs),
    }
    experiment = build(Sweep(median_stop=True, median_stop_trials=2, median_stop_epochs=3))
    validate_katib_experiment(experiment)
    assert experiment["spec"]["earlyStopping"] == {
        "algorithmName": "medianstop",
        "algorithmSettings": [
            {"name": "min_trials_required", "value": "2"},
            {"name": "start_step", "value": "3"},
        ],
    }


def test_the_schema_check_sees_early_stopping_katib_would_refuse(validate_katib_experiment):
    experiment = build(Sweep(median_stop=True))
    stopping = experiment["spec"]["earlyStopping"]
    stopping["algorithmSettings"][1]["value"] = "0"  # medianstop wants start_step >= 1
    with pytest.raises(AssertionError, match="start_step must be greater or equal than one"):
        validate_katib_experiment(experiment)
    stopping["algorithmName"] = "hyperband"  # a suggestion, not an early stopping algorithm
    with pytest.raises(AssertionError, match="hyperband"):
        validate_katib_experiment(experiment)


def test_trial_args_carry_placeholders_in_every_replica():
    sweep = Sweep(momentum_min=0.8, momentum_max=0.95)
    job = build(sweep, workers=3)["spec"]["trialTemplate"]["trialSpec"]
    assert "name" not in job["metadata"] and "namespace" not in job["metadata"]
    for replica in ("Master", "Worker"):
        container = job["spec"]["pytorchReplicaSpecs"][replica]["template"]["spec"]["containers"][0]
        assert container["command"] == ["torchrun", "-m", "trainer"]
        assert container["args"] == [
            "--data-dir=/kfp-workspace/train/data",
            f"--model-dir={ROOT}/${{trialParameters.trialName}}/model",
            f"--checkpoint-dir={ROOT}/${{trialParameters.trialName}}/checkpoints",
            "--epochs=${trialParameters.epochs}",
            "--batch-size=128",
            "--lr=${trialParameters.learningRate}",
            "--momentum=${trialParameters.momentum}",
            "--optimizer=sgd",
            "--num-threads=2",
        ]


def test_trial_job_with_a_name_is_refused():
    job = pytorchjob(
        name="fixed", namespace=None, job=TrainingJob(), args=[], placement=Placement()
    )
    with pytest.raises(ValueError, match="metadata.name"):
        katib_experiment.trial_template(Sweep(), PYTORCHJOB_KIND, job)


def test_schema_catches_what_the_crd_would_not(validate_katib_experiment):
    experiment = build(Sweep())
    experiment["spec"]["objective"]["metricStrategy"] = "latest"  # a typo of metricStrategies
    with pytest.raises(Exception, match="metricStrategy"):
        validate_katib_experiment(experiment)


def test_undeclared_placeholder_is_caught(validate_katib_experiment):
    experiment = build(Sweep())
    master = experiment["spec"]["trialTemplate"]["trialSpec"]["spec"]["pytorchReplicaSpecs"]
    master["Master"]["template"]["spec"]["containers"][0]["args"].append(
        "--seed=${trialParameters.seed}"
    )
    with pytest.raises(AssertionError, match="undeclared"):
        validate_katib_experiment(experiment)


@pytest.mark.slow
def test_filter_reads_accuracy_and_loss_from_the_real_trainer(packed_small, tmp_path):
    """Katib's StdOut collector, with the Experiment's own filter, on a real 1-epoch run."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainer",
            "--epochs",
            "1",
            "--data-dir",
            str(packed_small),
            "--train-limit",
            "2000",
            "--test-limit",
            "500",
            "--model-dir",
            str(tmp_path),
            "--num-threads",
            "1",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    spec = build(Sweep())["spec"]
    (metrics_format,) = spec["metricsCollectorSpec"]["source"]["filter"]["metricsFormat"]
    wanted = [spec["objective"]["objectiveMetricName"], *spec["objective"]["additionalMetricNames"]]
    observed = parse_metric_lines(done.stdout.splitlines(), wanted)
    saved = json.loads((tmp_path / "model.json").read_text())["metrics"]
    assert metric_series(observed, "accuracy") == [round(saved["accuracy"], 4)]
    assert metric_series(observed, "loss") == [round(saved["loss"], 4)]
    # The same matches straight from the Experiment's regex (Katib compiles it with RE2).
    matches = [m.group(1, 2) for m in re.finditer(metrics_format, done.stdout)]
    assert [name for name, _ in matches] == ["accuracy", "loss"]
