"""The fashion-mnist-tune pipeline: the sweep is checked before packing, Katib runs between
packing and training, and the final training takes the best trial's job."""

import pytest

from components.specs.params import ParamError
from components.specs.pods import GPU_TOLERATION, OWN_WORKSPACE_MOUNT_PATH
from components.specs.sweep import Sweep
from pipelines import PIPELINES

RUN_ID = {"runtimeValue": {"constant": "{{$.pipeline_job_uuid}}"}}


def output_of(task: str, key: str = "Output") -> dict:
    return {"taskOutputParameter": {"outputParameterKey": key, "producerTask": task}}


@pytest.fixture
def ir(compiled):
    spec, platform = compiled[("fashion-mnist-tune", "workspace")]
    return spec, platform["platforms"]["kubernetes"]


def test_registered_for_fmnist_compile():
    assert (
        PIPELINES["fashion-mnist-tune"]
        == "pipelines.fashion_mnist_tune:fashion_mnist_tune_pipeline"
    )


def test_the_sweep_is_checked_before_packing_and_katib_runs_before_training(ir):
    spec, _ = ir
    tasks = spec["root"]["dag"]["tasks"]
    assert {name: sorted(task.get("dependentTasks", [])) for name, task in tasks.items()} == {
        "validate-training": [],
        "validate-sweep": [],
        "validate-serving": [],
        "pack-dataset": ["validate-serving", "validate-sweep", "validate-training"],
        "tune": ["pack-dataset", "validate-sweep", "validate-training"],
        "train": ["pack-dataset", "tune"],
        "evaluate-and-deploy": ["pack-dataset", "train", "validate-serving"],
    }
    tail = spec["components"]["comp-evaluate-and-deploy"]["dag"]["tasks"]
    assert sorted(tail) == ["condition-1", "evaluate"]
    assert list(spec["components"]["comp-condition-1"]["dag"]["tasks"]) == [
        "condition-2",  # no registry: deploy
        "condition-3",  # a registry: register-model, deploy
    ]


def test_validate_sweep_takes_the_sweep_set_and_fails_on_a_bad_one(ir):
    from components.steps.validate import validate_sweep

    spec, _ = ir
    inputs = spec["components"]["comp-validate-sweep"]["inputDefinitions"]["parameters"]
    assert set(inputs) == set(Sweep.help())
    checked = validate_sweep.python_func(**{**Sweep().to_dict(), "max_trials": 4})
    assert Sweep.from_dict(checked) == Sweep(max_trials=4)
    with pytest.raises(ParamError, match="lr_step must be set for the grid algorithm"):
        validate_sweep.python_func(**{**Sweep().to_dict(), "algorithm": "grid"})


def test_training_uses_the_best_trials_job(ir):
    spec, _ = ir
    tasks = spec["root"]["dag"]["tasks"]
    assert tasks["tune"]["inputs"]["parameters"]["job"] == output_of("validate-training")
    assert tasks["tune"]["inputs"]["parameters"]["sweep"] == output_of("validate-sweep")
    train = tasks["train"]["inputs"]["parameters"]
    assert train["job"] == output_of("tune", "job")
    assert train["target"] == {"runtimeValue": {"constant": "cluster"}}
    outputs = spec["components"]["comp-tune"]["outputDefinitions"]["parameters"]
    assert {name: o["parameterType"] for name, o in outputs.items()} == {
        "job": "STRUCT",
        "accuracy": "NUMBER_DOUBLE",
    }


def test_the_katib_step_sees_the_workspace_and_is_never_cached(ir):
    spec, kubernetes = ir
    task = spec["root"]["dag"]["tasks"]["tune"]
    assert task.get("cachingOptions", {}).get("enableCache", False) is False
    assert task["inputs"]["parameters"]["workspace_path"] == {
        "runtimeValue": {"constant": "{{$.workspace_path}}"}
    }
    assert task["inputs"]["parameters"]["run_id"] == RUN_ID
    passthroughs = spec["components"]["comp-tune"]["taskConfigPassthroughs"]
    assert {"field": "KUBERNETES_VOLUMES", "applyToTask": True} in passthroughs
    executor = kubernetes["deploymentSpec"]["executors"]["exec-tune"]
    assert executor["tolerations"] == [GPU_TOLERATION]


def test_the_pvc_variant_tunes_and_trains_on_the_runs_pvc(compiled):
    spec, platform = compiled[("fashion-mnist-tune", "pvc")]
    tasks = spec["root"]["dag"]["tasks"]
    created = output_of("createpvc", "name")
    tune = tasks["tune"]["inputs"]["parameters"]
    assert tune["workspace_pvc"] == created
    assert tune["workspace_path"] == {"runtimeValue": {"constant": OWN_WORKSPACE_MOUNT_PATH}}
    assert tasks["train"]["inputs"]["parameters"]["job"] == output_of("tune", "job")
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    for name in ("exec-tune", "exec-train"):
        assert executors[name]["pvcMount"][0]["pvcNameParameter"] == created
        assert executors[name]["pvcMount"][0]["mountPath"] == OWN_WORKSPACE_MOUNT_PATH
    assert sorted(tasks["deletepvc"]["dependentTasks"]) == ["createpvc", "evaluate-and-deploy"]
