"""Parameter checks: every bad value fails with a message naming the parameter and its range."""

from dataclasses import asdict

import pytest

from components.params import DEFAULTS, ParamError, PipelineParams, is_mig_profile
from components.validate_params import validate_params


def test_defaults_are_valid_and_follow_the_trainer():
    from trainer.config import TrainConfig

    train = TrainConfig()
    assert (DEFAULTS.epochs, DEFAULTS.batch_size, DEFAULTS.lr, DEFAULTS.momentum) == (
        train.epochs,
        train.batch_size,
        train.lr,
        train.momentum,
    )
    assert DEFAULTS.processes == 2


@pytest.mark.parametrize(
    ("changes", "name", "allowed"),
    [
        (dict(backend="slurm"), "backend", "one of pytorchjob, local"),
        (dict(epochs=0), "epochs", "an integer >= 1"),
        (dict(batch_size=-8), "batch_size", "an integer >= 1"),
        (dict(lr=0.0), "lr", "a number > 0"),
        (dict(momentum=1.0), "momentum", "in [0, 1)"),
        (dict(optimizer="lbfgs"), "optimizer", "one of sgd, adamw"),
        (dict(train_limit=0), "train_limit", "an integer >= 1"),
        (dict(workers=0), "workers", "an integer >= 1"),
        (dict(nproc_per_node=0), "nproc_per_node", "an integer >= 1"),
        (dict(gpus_per_worker=-1), "gpus_per_worker", "an integer >= 0"),
        (dict(gpu_resource="gpu"), "gpu_resource", "an extended resource name"),
        (dict(gpu_resource="nvidia.com/GPU s"), "gpu_resource", "an extended resource name"),
        (
            dict(gpus_per_worker=2, nproc_per_node=2, gpu_resource="nvidia.com/mig-1g.10gb"),
            "gpus_per_worker",
            "1 with a MIG profile",
        ),
        (
            dict(gpus_per_worker=4, nproc_per_node=2),
            "nproc_per_node",
            "equal to gpus_per_worker (4)",
        ),
        (dict(cpu="two"), "cpu", "a Kubernetes quantity"),
        (dict(memory="4 GB"), "memory", "a Kubernetes quantity"),
        (dict(queue_name=""), "queue_name", "a LocalQueue name"),
        (dict(priority_class="High!"), "priority_class", "empty or a lowercase DNS subdomain"),
        (dict(namespace="Team_A"), "namespace", "empty or a lowercase DNS label"),
        (dict(timeout_seconds=0), "timeout_seconds", "an integer >= 1"),
        (dict(min_accuracy=1.5), "min_accuracy", "in [0, 1]"),
        (dict(min_accuracy=-0.1), "min_accuracy", "in [0, 1]"),
        (dict(model_name="Fashion_MNIST"), "model_name", "a lowercase DNS label"),
        (dict(model_name="m" * 46), "model_name", "at most 45 characters"),
        (dict(model_pvc="Models"), "model_pvc", "a PVC name"),
        (dict(deployment_mode="Serverless"), "deployment_mode", "one of Standard, Knative"),
        (dict(serving_min_replicas=0), "serving_min_replicas", "an integer >= 1 (Standard mode)"),
        (
            dict(serving_min_replicas=3, serving_max_replicas=2),
            "serving_max_replicas",
            ">= max(1, serving_min_replicas)",
        ),
        (dict(serving_gpus=-1), "serving_gpus", "an integer >= 0"),
        (dict(trainer_image=" "), "trainer_image", "an image reference"),
    ],
)
def test_bad_values_name_the_parameter_and_its_range(changes, name, allowed):
    with pytest.raises(ParamError) as error:
        PipelineParams(**changes)
    assert error.value.name == name
    assert str(error.value).startswith(f"{name} must be ")
    assert allowed in str(error.value)


@pytest.mark.parametrize(
    "changes",
    [
        dict(gpus_per_worker=1, gpu_resource="nvidia.com/mig-1g.10gb"),
        dict(gpus_per_worker=8, nproc_per_node=8, gpu_resource="amd.com/gpu"),
        dict(deployment_mode="Knative", serving_min_replicas=0),
        dict(cpu="500m", memory="512Mi", priority_class="batch-low", namespace="team-a"),
        dict(min_accuracy=0.0),
        dict(min_accuracy=1.0),
    ],
)
def test_good_values_pass(changes):
    assert PipelineParams(**changes)


def test_mig_profiles_are_recognised():
    assert is_mig_profile("nvidia.com/mig-1g.10gb")
    assert is_mig_profile("nvidia.com/mig-3g.40gb")
    assert not is_mig_profile("nvidia.com/gpu")


def test_validate_params_step_accepts_the_defaults(capsys):
    validate_params.python_func(**asdict(DEFAULTS))
    assert "PipelineParams(backend='pytorchjob'" in capsys.readouterr().out


def test_validate_params_step_fails_naming_the_parameter():
    with pytest.raises(ParamError, match="workers must be an integer >= 1, got 0"):
        validate_params.python_func(**{**asdict(DEFAULTS), "workers": 0})
