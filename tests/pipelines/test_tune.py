"""The fashion-mnist-tune pipeline compiles, with the Katib step between packing and training."""

from dataclasses import asdict

import pytest
import yaml

from components.params import DEFAULTS
from components.sweep import SweepConfig
from pipelines import PIPELINES
from pipelines.cli import main

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


@pytest.fixture(scope="module")
def ir(tmp_path_factory):
    """The compiled pipeline (via ``fmnist compile``): its spec and Kubernetes platform config."""
    out = tmp_path_factory.mktemp("compiled")
    assert main(["compile", "fashion-mnist-tune", "--out-dir", str(out)]) == 0
    spec, platform = yaml.safe_load_all((out / "fashion-mnist-tune.yaml").read_text())
    return spec, platform["platforms"]["kubernetes"]


def test_registered_for_fmnist_compile():
    assert PIPELINES["fashion-mnist-tune"] == "pipelines.fashion_mnist_tune:fashion_mnist_tune"


def test_the_katib_step_runs_between_packing_and_training(ir):
    spec, _ = ir
    tasks = spec["root"]["dag"]["tasks"]
    assert {name: sorted(task.get("dependentTasks", [])) for name, task in tasks.items()} == {
        "validate-params": [],
        "pack-dataset": ["validate-params"],
        "tune-hyperparameters": ["pack-dataset"],
        "train": ["pack-dataset", "tune-hyperparameters"],
        "evaluate": ["pack-dataset", "train"],
        "condition-1": ["evaluate", "pack-dataset", "train"],
    }
    assert list(spec["components"]["comp-condition-1"]["dag"]["tasks"]) == ["deploy"]


def test_training_uses_the_best_parameters(ir):
    spec, _ = ir
    inputs = spec["root"]["dag"]["tasks"]["train"]["inputs"]["parameters"]
    for name in ("lr", "epochs", "momentum"):
        assert inputs[name] == {
            "taskOutputParameter": {
                "outputParameterKey": name,
                "producerTask": "tune-hyperparameters",
            }
        }
    assert inputs["backend"] == {"runtimeValue": {"constant": "pytorchjob"}}
    outputs = spec["components"]["comp-tune-hyperparameters"]["outputDefinitions"]["parameters"]
    assert {name: o["parameterType"] for name, o in outputs.items()} == {
        "lr": "NUMBER_DOUBLE",
        "epochs": "NUMBER_INTEGER",
        "momentum": "NUMBER_DOUBLE",
        "accuracy": "NUMBER_DOUBLE",
    }


def test_the_katib_step_sees_the_workspace_and_is_never_cached(ir):
    spec, kubernetes = ir
    task = spec["root"]["dag"]["tasks"]["tune-hyperparameters"]
    assert task.get("cachingOptions", {}).get("enableCache", False) is False
    assert task["inputs"]["parameters"]["workspace_path"] == {
        "runtimeValue": {"constant": "{{$.workspace_path}}"}
    }
    assert task["inputs"]["parameters"]["run_id"] == {
        "runtimeValue": {"constant": "{{$.pipeline_job_uuid}}"}
    }
    passthroughs = spec["components"]["comp-tune-hyperparameters"]["taskConfigPassthroughs"]
    assert {"field": "KUBERNETES_VOLUMES", "applyToTask": True} in passthroughs
    executor = kubernetes["deploymentSpec"]["executors"]["exec-tune-hyperparameters"]
    assert executor["tolerations"] == [GPU_TOLERATION]


def test_parameters_have_the_sweep_and_training_defaults(ir):
    spec, _ = ir
    parameters = spec["root"]["inputDefinitions"]["parameters"]
    defaults = {**asdict(DEFAULTS), **asdict(SweepConfig())}
    for name, parameter in parameters.items():
        assert parameter["description"], name
        if name in defaults and defaults[name] is not None and name != "backend":
            assert parameter["defaultValue"] == defaults[name], name
    for name in ("lr_step", "epochs_step", "momentum_min", "momentum_max", "goal", "seed"):
        assert parameters[name].get("isOptional") is True and "defaultValue" not in parameters[name]
    assert "backend" not in parameters and "epochs" not in parameters and "lr" not in parameters
