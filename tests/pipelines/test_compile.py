"""``fmnist compile``: both variants of every pipeline, the images, the workspace flags.

Images are fixed when ``fmnist compile`` runs (flags, else ``$FMNIST_*_IMAGE``, else the
release's), never when a module is imported: the components image is set on every step
task with ``PipelineTask.set_container_image`` (kfp >= 2.17).
"""

from __future__ import annotations

import pytest
import yaml

from cli.main import main
from components.images import default_image
from pipelines import PIPELINES

STUBS = ("argostub/createpvc", "argostub/deletepvc")


def load(path) -> tuple[dict, dict]:
    spec, platform = yaml.safe_load_all(path.read_text())
    return spec, platform["platforms"]["kubernetes"]


def executor_images(spec: dict) -> list[str]:
    return [e["container"]["image"] for e in spec["deploymentSpec"]["executors"].values()]


def test_compile_writes_both_variants_of_every_pipeline(tmp_path, capsys):
    assert main(["compile", "--out-dir", str(tmp_path), "--workspace-storage-class", "nfs"]) == 0
    written = capsys.readouterr().out.split()
    assert sorted(written) == sorted(
        str(tmp_path / f"{name}{suffix}.yaml") for name in PIPELINES for suffix in ("", "-pvc")
    )
    for name in PIPELINES:
        spec, kubernetes = load(tmp_path / f"{name}.yaml")
        assert "workspace" in kubernetes["pipelineConfig"] and "createpvc" not in str(spec)
        spec, kubernetes = load(tmp_path / f"{name}-pvc.yaml")
        assert "pipelineConfig" not in kubernetes and "createpvc" in spec["root"]["dag"]["tasks"]


def test_without_a_storage_class_the_pvc_variant_is_skipped_and_why(tmp_path, capsys):
    """KFP 2.2-2.14 create the PVC with the class named, else one called "standard"
    (kubeflow/pipelines 2.14.0 backend/src/v2/driver/k8s.go, createPVC)."""
    assert main(["compile", "--out-dir", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert sorted(out.split()) == sorted(str(tmp_path / f"{name}.yaml") for name in PIPELINES)
    assert "skipped the pvc variant" in err and "--workspace-storage-class" in err
    assert main(["compile", "--variant", "pvc", "--out-dir", str(tmp_path / "pvc")]) == 2
    assert "needs --workspace-storage-class" in capsys.readouterr().err


def test_one_pipeline_in_one_variant(tmp_path, capsys):
    argv = ["compile", "fashion-mnist", "--variant", "pvc", "--out-dir", str(tmp_path)]
    assert main([*argv, "--workspace-storage-class", "nfs"]) == 0
    assert capsys.readouterr().out.split() == [str(tmp_path / "fashion-mnist-pvc.yaml")]
    assert [path.name for path in tmp_path.iterdir()] == ["fashion-mnist-pvc.yaml"]


def _component_inputs(spec: dict, task: dict) -> dict:
    return spec["components"][task["componentRef"]["name"]].get("inputDefinitions", {})


def _fed_by_optional_roots(spec: dict):
    """(task, input, component input) for each task input fed by an optional pipeline
    parameter without a default, in every DAG the root input reaches by name."""
    roots = spec["root"]["inputDefinitions"]["parameters"]
    unset = {n for n, p in roots.items() if p.get("isOptional") and "defaultValue" not in p}
    dags = [spec["root"]] + [c for c in spec["components"].values() if "dag" in c]
    for dag in dags:
        for name, task in dag["dag"]["tasks"].items():
            declared = _component_inputs(spec, task).get("parameters", {})
            for key, source in task.get("inputs", {}).get("parameters", {}).items():
                if source.get("componentInputParameter") in unset:
                    yield name, key, declared[key]


@pytest.mark.parametrize("pipeline", sorted(PIPELINES))
def test_a_pipeline_parameter_left_unset_reaches_only_optional_inputs(tmp_path, pipeline):
    """A run that leaves an optional parameter (default None) unset sends null; KFP's driver
    fails the task on a null input unless the component declares that input optional
    (kubeflow/pipelines 2.15.0 backend/src/v2/driver/resolve.go resolveInputs:
    "the resolved input parameter is null"). Seen: every run of fashion-mnist-tune on KFP
    2.15 failed in validate-sweep on ``max_failed_trials`` unless all were set."""
    assert main(["compile", pipeline, "--variant", "workspace", "--out-dir", str(tmp_path)]) == 0
    spec, _ = load(tmp_path / f"{pipeline}.yaml")
    fed = list(_fed_by_optional_roots(spec))
    if pipeline == "fashion-mnist-tune":
        assert {key for _, key, _ in fed} >= {"max_trials", "max_failed_trials", "lr_step"}
    required = [(task, key) for task, key, declared in fed if not declared.get("isOptional")]
    assert not required, required


def test_the_components_image_is_on_every_step_and_nowhere_else(tmp_path, monkeypatch):
    monkeypatch.setenv("FMNIST_SERVING_IMAGE", "registry.local/serving:env")
    argv = [
        "compile",
        "fashion-mnist",
        "--out-dir",
        str(tmp_path),
        "--workspace-storage-class",
        "c",
    ]
    images = ["--trainer-image", "registry.local/trainer:7"]
    images += ["--trainer-cpu-image", "registry.local/trainer:7-cpu"]
    assert main([*argv, *images, "--components-image", "registry.local/components:7"]) == 0
    for name in ("fashion-mnist.yaml", "fashion-mnist-pvc.yaml"):
        text = (tmp_path / name).read_text()
        spec, _ = load(tmp_path / name)
        steps = [image for image in executor_images(spec) if image not in STUBS]
        assert set(steps) == {"registry.local/components:7"}
        assert len(steps) == 8  # validate x2, pack, train, evaluate, register, deploy x2
        assert text.count("registry.local/components:7") == len(steps)
        assert default_image("components") not in text
        parameters = spec["root"]["inputDefinitions"]["parameters"]
        assert parameters["trainer_image"]["defaultValue"] == "registry.local/trainer:7"
        assert parameters["trainer_cpu_image"]["defaultValue"] == "registry.local/trainer:7-cpu"
        assert parameters["serving_image"]["defaultValue"] == "registry.local/serving:env"


def test_image_variables_set_after_import_take_effect(tmp_path, monkeypatch):
    import pipelines.fashion_mnist  # noqa: F401 - the module builds its default pipeline

    monkeypatch.setenv("FMNIST_COMPONENTS_IMAGE", "registry.local/components:late")
    monkeypatch.setenv("FMNIST_TRAINER_IMAGE", "registry.local/trainer:late")
    monkeypatch.setenv("FMNIST_TRAINER_CPU_IMAGE", "registry.local/trainer:late-cpu")
    argv = ["compile", "fashion-mnist", "--variant", "workspace", "--out-dir", str(tmp_path)]
    assert main(argv) == 0
    spec, _ = load(tmp_path / "fashion-mnist.yaml")
    assert set(executor_images(spec)) == {"registry.local/components:late"}
    parameters = spec["root"]["inputDefinitions"]["parameters"]
    assert parameters["trainer_image"]["defaultValue"] == "registry.local/trainer:late"
    assert parameters["trainer_cpu_image"]["defaultValue"] == "registry.local/trainer:late-cpu"


def test_workspace_flags_shape_both_variants(tmp_path):
    argv = ["compile", "fashion-mnist", "--out-dir", str(tmp_path)]
    workspace = [
        "--workspace-storage-class",
        "fast-rwx",
        "--workspace-size",
        "7Gi",
        "--workspace-access-mode",
        "ReadWriteOnce",
    ]
    assert main([*argv, *workspace]) == 0
    _, kubernetes = load(tmp_path / "fashion-mnist.yaml")
    assert kubernetes["pipelineConfig"]["workspace"] == {
        "size": "7Gi",
        "kubernetes": {
            "pvcSpecPatch": {"accessModes": ["ReadWriteOnce"], "storageClassName": "fast-rwx"}
        },
    }
    spec, _ = load(tmp_path / "fashion-mnist-pvc.yaml")
    created = spec["root"]["dag"]["tasks"]["createpvc"]["inputs"]["parameters"]
    assert {name: value["runtimeValue"]["constant"] for name, value in created.items()} == {
        "access_modes": ["ReadWriteOnce"],
        "pvc_name_suffix": "-fmnist-workspace",
        "size": "7Gi",
        "storage_class_name": "fast-rwx",
    }


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["nope"], "unknown pipeline(s) nope; choose from fashion-mnist, fashion-mnist-tune"),
        (["--trainer-image", " "], "the trainer image must not be empty"),
        (["--workspace-size", "lots"], "--workspace-size must be a Kubernetes quantity > 0"),
        (["--workspace-size", "0"], "--workspace-size must be a Kubernetes quantity > 0"),
        (["--trainer-image", "bad image!!"], "--trainer-image must be an image reference"),
        (["--workspace-storage-class", "Fast_Class"], "--workspace-storage-class must be empty or"),
    ],
)
def test_bad_input_is_one_usage_error_line(tmp_path, capsys, flags, message):
    assert main(["compile", "--out-dir", str(tmp_path / "out"), *flags]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("fmnist compile: error: ")
    assert len(err.splitlines()) == 1 and message in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("below", ["", "sub"])
def test_an_out_dir_that_is_a_file_is_one_line_and_the_file_stays(tmp_path, capsys, below):
    taken = tmp_path / "taken"
    taken.write_text("keep me\n")
    out_dir = taken / below if below else taken
    assert main(["compile", "--out-dir", str(out_dir)]) == 2
    err = capsys.readouterr().err
    expected = "is not a directory" if not below else "Not a directory"
    assert err.count("\n") == 1 and f"--out-dir {out_dir}" in err and expected in err
    assert taken.read_text() == "keep me\n"


def test_every_step_pod_has_cpu_and_memory_requests_and_limits(compiled):
    """The step pods hold the pipeline runner's RBAC: none may run unbounded.

    KFP's driver puts a task's ``resourceCpuRequest``, ``resourceCpuLimit``,
    ``resourceMemoryRequest`` and ``resourceMemoryLimit`` on its container (kubeflow/pipelines
    2.5.0 and 2.15.0 ``backend/src/v2/driver/driver.go``, ``initPodSpecPatch``); on 2.15 a
    component with task config passthroughs gets them on its pod only when RESOURCES is
    passed through with ``applyToTask`` (2.15.0 ``driver.go``, ``getTaskConfigOptions``).
    createpvc and deletepvc run no container of theirs: the driver does the work
    (2.5.0 ``driver.go``, ``createPVC``/``deletePVC``).
    """
    wanted = ("resourceCpuRequest", "resourceCpuLimit", "resourceMemoryRequest",
              "resourceMemoryLimit")  # fmt: skip
    for (name, variant), (spec, _) in compiled.items():
        executors = spec["deploymentSpec"]["executors"]
        for executor, body in executors.items():
            if body["container"]["image"] in STUBS:
                continue
            resources = body["container"].get("resources", {})
            assert [key for key in wanted if key not in resources] == [], (name, variant, executor)
        for component in spec["components"].values():
            passthroughs = component.get("taskConfigPassthroughs")
            if passthroughs:
                assert {"field": "RESOURCES", "applyToTask": True} in passthroughs


def test_the_steps_that_hold_the_dataset_get_more_memory(compiled):
    """pack and evaluate peak at 879 and 761 MiB on the full dataset (pipelines/settings.py)."""
    spec, _ = compiled[("fashion-mnist", "workspace")]
    executors = spec["deploymentSpec"]["executors"]
    memory = {
        name: e["container"]["resources"]["resourceMemoryLimit"] for name, e in executors.items()
    }
    assert memory == {
        "exec-validate-training": "1Gi",
        "exec-validate-serving": "1Gi",
        "exec-pack-dataset": "2Gi",
        "exec-train": "1Gi",
        "exec-evaluate": "2Gi",
        "exec-register-model": "1Gi",
        "exec-deploy": "1Gi",
        "exec-deploy-2": "1Gi",
    }
