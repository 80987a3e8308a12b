"""Every pipeline compiles; the fashion-mnist IR has the right tasks, gate, caching and platform
config, and the PyTorchJob its train step creates mounts the very storage the steps use.

The last test replays what the KFP driver does with the compiled IR for the train task
(backend/src/v2/driver: ``getTaskConfigOptions``, ``getWorkspaceMount``,
``needsWorkspaceMount``): a ``{{$.workspace_path}}`` input mounts the run's workspace PVC
``<run>-kfp-workspace`` at the workspace path, on the task's pod when KUBERNETES_VOLUMES is
passed through with applyToTask, and into the task's TaskConfig. It then runs the train step
with that TaskConfig against the fake Kubernetes API and compares the job with the pod.
"""

from pathlib import Path

import pytest
import yaml
from kfp import dsl

from components.images import COMPONENTS_IMAGE
from components.params import DEFAULTS, PipelineParams
from pipelines import PIPELINES
from pipelines.commands.compile import compile_pipeline


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> dict[str, list[dict]]:
    """Every registered pipeline compiled with the default images: name -> YAML documents."""
    from components.images import Images

    out = tmp_path_factory.mktemp("compiled")
    return {
        name: list(yaml.safe_load_all(compile_pipeline(name, out, Images.defaults()).read_text()))
        for name in PIPELINES
    }


def test_every_pipeline_compiles_and_runs_its_steps_from_the_components_image(compiled):
    assert "fashion-mnist" in compiled
    for name, (spec, *_) in compiled.items():
        assert spec["pipelineInfo"]["name"] == name
        images = {
            executor["container"]["image"]
            for executor in spec["deploymentSpec"]["executors"].values()
        }
        assert images == {COMPONENTS_IMAGE}, name


@pytest.fixture
def ir(compiled):
    spec, platform = compiled["fashion-mnist"]
    return spec, platform["platforms"]["kubernetes"]


def test_tasks_and_their_order(ir):
    spec, _ = ir
    tasks = spec["root"]["dag"]["tasks"]
    assert {name: sorted(task.get("dependentTasks", [])) for name, task in tasks.items()} == {
        "validate-params": [],
        "pack-dataset": ["validate-params"],
        "train": ["pack-dataset"],
        "evaluate": ["pack-dataset", "train"],
        "condition-1": ["evaluate", "pack-dataset", "train"],
    }
    gate = spec["components"]["comp-condition-1"]["dag"]["tasks"]
    assert list(gate) == ["deploy"]
    assert tasks["condition-1"]["taskInfo"]["name"] == "accuracy-gate"


def test_deploy_is_gated_on_accuracy(ir):
    spec, _ = ir
    condition = spec["root"]["dag"]["tasks"]["condition-1"]["triggerPolicy"]["condition"]
    assert condition == (
        "inputs.parameter_values['pipelinechannel--evaluate-Output'] >= "
        "inputs.parameter_values['pipelinechannel--min_accuracy']"
    )


def test_train_and_deploy_are_never_cached(ir):
    spec, _ = ir
    tasks = spec["root"]["dag"]["tasks"]
    deploy = spec["components"]["comp-condition-1"]["dag"]["tasks"]["deploy"]
    assert tasks["train"].get("cachingOptions", {}).get("enableCache", False) is False
    assert deploy.get("cachingOptions", {}).get("enableCache", False) is False
    assert tasks["pack-dataset"]["cachingOptions"]["enableCache"] is True


def test_parameters_match_pipeline_params_with_their_defaults(ir):
    spec, _ = ir
    parameters = spec["root"]["inputDefinitions"]["parameters"]
    assert set(parameters) == set(PipelineParams.__dataclass_fields__)
    for name, parameter in parameters.items():
        assert parameter["defaultValue"] == getattr(DEFAULTS, name), name
        assert parameter["description"], name


def test_job_names_and_namespaces_are_resolved_at_run_time(ir):
    spec, _ = ir
    tasks = spec["root"]["dag"]["tasks"]
    deploy = spec["components"]["comp-condition-1"]["dag"]["tasks"]["deploy"]
    for task in (tasks["train"], deploy):
        inputs = task["inputs"]["parameters"]
        assert inputs["run_id"] == {"runtimeValue": {"constant": "{{$.pipeline_job_uuid}}"}}
        # Passed on from the pipeline parameter; an empty one becomes the pod's namespace.
        assert inputs["namespace"]["componentInputParameter"].endswith("namespace")


def test_platform_config(ir):
    _, kubernetes = ir
    assert kubernetes["pipelineConfig"]["workspace"] == {
        "size": "5Gi",
        "kubernetes": {"pvcSpecPatch": {"accessModes": ["ReadWriteMany"]}},
    }
    executors = kubernetes["deploymentSpec"]["executors"]
    assert executors["exec-train"]["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert executors["exec-deploy"]["pvcMount"] == [
        {
            "componentInputParameter": "pipelinechannel--model_pvc",
            "mountPath": "/mnt/model-store",
            "pvcNameParameter": {"componentInputParameter": "pipelinechannel--model_pvc"},
        }
    ]


def driver_view(spec: dict, kubernetes: dict, task: str, run_name: str, mount_path: str):
    """What the KFP driver gives one task: (its pod's volumes, mounts, TaskConfig, inputs)."""
    component = spec["components"][spec["root"]["dag"]["tasks"][task]["componentRef"]["name"]]
    passthroughs = {
        item["field"]: item.get("applyToTask", False)
        for item in component.get("taskConfigPassthroughs", [])
    }
    inputs = {
        name: value["runtimeValue"]["constant"].replace("{{$.workspace_path}}", mount_path)
        for name, value in spec["root"]["dag"]["tasks"][task]["inputs"]["parameters"].items()
        if "runtimeValue" in value
    }
    assert "{{$.workspace_path}}" in str(spec["root"]["dag"]["tasks"][task]["inputs"])
    assert kubernetes["pipelineConfig"]["workspace"]["size"]
    volume = {
        "name": "kfp-workspace",
        "persistentVolumeClaim": {"claimName": f"{run_name}-kfp-workspace"},
    }
    mount = {"name": "kfp-workspace", "mountPath": mount_path}
    on_pod = passthroughs.get("KUBERNETES_VOLUMES", True)
    in_config = "KUBERNETES_VOLUMES" in passthroughs
    tolerations = kubernetes["deploymentSpec"]["executors"][f"exec-{task}"].get("tolerations")
    task_config = dsl.TaskConfig(
        volumes=[volume] if in_config else None,
        volume_mounts=[mount] if in_config else None,
        tolerations=tolerations if "KUBERNETES_TOLERATIONS" in passthroughs else None,
    )
    return ([volume] if on_pod else [], [mount] if on_pod else [], task_config, inputs)


def test_the_pytorchjob_mounts_the_storage_the_steps_use(
    ir, fake_k8s, tmp_path, packed_small, validate_crd
):
    from components.train import train

    spec, kubernetes = ir
    workspace = tmp_path / "kfp-workspace"  # stands in for the driver's /kfp-workspace
    workspace.mkdir()
    volumes, mounts, task_config, inputs = driver_view(
        spec, kubernetes, "train", "run-7", str(workspace)
    )
    assert volumes and mounts, "the train step's own pod must mount the workspace"
    model_dir = Path(inputs["workspace_path"]) / "train" / "model"  # as if the job wrote it
    model_dir.mkdir(parents=True)
    (model_dir / "model.pt").write_bytes(b"w")
    fake_k8s.custom.statuses["pytorchjobs"] = [
        {"conditions": [{"type": "Succeeded", "status": "True"}]}
    ]
    arguments = {
        name: value
        for name, value in DEFAULTS.__dict__.items()
        if name in train.component_spec.inputs
    }
    train.python_func(
        dataset=dsl.Dataset(uri=str(packed_small)),
        model=dsl.Model(uri=str(tmp_path / "model")),
        run_id="run-7",
        workspace_path=inputs["workspace_path"],
        task_config=task_config,
        **{**arguments, "namespace": "team-a"},
    )

    (job,) = fake_k8s.custom.created("pytorchjobs")
    validate_crd(job)
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        pod = replica["template"]["spec"]
        container = pod["containers"][0]
        assert pod["volumes"] == volumes  # the same PVC as the step's pod
        assert container["volumeMounts"] == mounts  # at the same path
        paths = [
            arg.split("=", 1)[1]
            for arg in container["args"]
            if arg.startswith(("--data-dir", "--model-dir", "--checkpoint-dir"))
        ]
        assert len(paths) == 3
        assert all(Path(path).is_relative_to(mounts[0]["mountPath"]) for path in paths)
        assert (
            pod["tolerations"]
            == kubernetes["deploymentSpec"]["executors"]["exec-train"]["tolerations"]
        )
    assert (workspace / "train" / "data" / "manifest.json").is_file()  # staged by the step
    assert (tmp_path / "model" / "model.pt").read_bytes() == b"w"  # copied out by the step


def test_every_parameter_is_documented():
    reference = (Path(__file__).parents[2] / "docs" / "pipeline.md").read_text()
    for name in PipelineParams.__dataclass_fields__:
        assert f"| `{name}` |" in reference, name
