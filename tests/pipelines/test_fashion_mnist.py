"""The fashion-mnist pipeline in both compiled variants: tasks, gate, caching, platform config,
and that the training job its train step creates mounts the very storage the steps use.

``workspace`` (KFP >= 2.15): the train task reads ``{{$.workspace_path}}``. The test replays
what the KFP driver does with it (kubeflow/pipelines 2.15.0 ``backend/src/v2/driver``:
``getTaskConfigOptions``, ``getWorkspaceMount``, ``needsWorkspaceMount``): the run's
workspace PVC ``<run>-kfp-workspace`` is mounted at the workspace path on the task's pod when
KUBERNETES_VOLUMES is passed through with applyToTask, and into the task's TaskConfig. It then
runs the train step with that TaskConfig against the fake Kubernetes API and compares the job
with the pod.

``pvc`` (KFP 2.2-2.14): kfp-kubernetes CreatePVC makes the run's PVC, the train task mounts
it (``pvcMount``) and is told its name; DeletePVC removes it at the end. No workspace, no
TaskConfig input and no passthroughs, which KFP 2.5's API server would refuse: the same
train component, compiled ``without_task_config``.
"""

from pathlib import Path

import pytest
import yaml
from kfp import dsl

from components.images import default_image
from components.runtime.registry_credentials import CREDENTIALS_DIR
from components.specs.params import DataSlice, Serving, TrainingJob
from components.specs.pods import GPU_TOLERATION, OWN_WORKSPACE_MOUNT_PATH
from pipelines import PIPELINES
from pipelines.settings import VARIANTS

COMPONENTS_IMAGE = default_image("components")
ARGO_STUBS = {"argostub/createpvc", "argostub/deletepvc"}  # kfp-kubernetes' PVC tasks
GATE = "inputs.parameter_values['pipelinechannel--evaluate-Output'] == true"
RUN_ID = {"runtimeValue": {"constant": "{{$.pipeline_job_uuid}}"}}


def dependencies(dag: dict) -> dict[str, list[str]]:
    return {name: sorted(task.get("dependentTasks", [])) for name, task in dag["tasks"].items()}


def test_every_pipeline_compiles_in_both_variants_with_its_steps_in_the_components_image(
    compiled,
):
    assert set(compiled) == {(name, variant) for name in PIPELINES for variant in VARIANTS}
    for (name, variant), (spec, _) in compiled.items():
        assert spec["pipelineInfo"]["name"] == name
        images = {
            executor["container"]["image"]
            for executor in spec["deploymentSpec"]["executors"].values()
        }
        stubs = ARGO_STUBS if variant == "pvc" else set()
        assert images == {COMPONENTS_IMAGE} | stubs, (name, variant)


@pytest.fixture
def ir(compiled):
    spec, platform = compiled[("fashion-mnist", "workspace")]
    return spec, platform["platforms"]["kubernetes"]


def test_tasks_and_their_order(ir):
    spec, _ = ir
    assert dependencies(spec["root"]["dag"]) == {
        "validate-training": [],
        "validate-serving": [],
        "pack-dataset": ["validate-serving", "validate-training"],
        "train": ["pack-dataset", "validate-training"],
        "evaluate-and-deploy": ["pack-dataset", "train", "validate-serving"],
    }
    tail = spec["components"]["comp-evaluate-and-deploy"]["dag"]
    assert dependencies(tail) == {"evaluate": [], "condition-1": ["evaluate"]}
    assert tail["tasks"]["condition-1"]["taskInfo"]["name"] == "accuracy-gate"
    gated = spec["components"]["comp-condition-1"]["dag"]["tasks"]
    assert {name: task["taskInfo"]["name"] for name, task in gated.items()} == {
        "condition-2": "no-model-registry",
        "condition-3": "model-registry",
    }
    assert list(spec["components"]["comp-condition-2"]["dag"]["tasks"]) == ["deploy"]
    assert dependencies(spec["components"]["comp-condition-3"]["dag"]) == {
        "register-model": [],
        "deploy-2": ["register-model"],
    }
    assert {task["taskInfo"]["name"] for task in deploy_tasks(spec)} == {"deploy"}


def test_the_model_is_registered_only_with_a_registry(ir):
    spec, _ = ir
    gated = spec["components"]["comp-condition-1"]["dag"]["tasks"]
    channel = "inputs.parameter_values['pipelinechannel--model_registry']"
    assert gated["condition-2"]["triggerPolicy"]["condition"] == f"{channel} == ''"
    assert gated["condition-3"]["triggerPolicy"]["condition"] == f"{channel} != ''"
    register = spec["components"]["comp-condition-3"]["dag"]["tasks"]["register-model"]
    assert register["inputs"]["artifacts"]["metrics"] == {
        "componentInputArtifact": "pipelinechannel--evaluate-metrics"  # evaluate's, via the gate
    }
    assert register["inputs"]["parameters"]["run_id"] == RUN_ID
    assert register["inputs"]["parameters"]["run_name"] == {
        "runtimeValue": {"constant": "{{$.pipeline_job_name}}"}  # the run's display name
    }


def deploy_tasks(spec: dict) -> list[dict]:
    """The deploy task without a registry (named ``deploy`` as before), and the one after
    registering."""
    return [
        spec["components"]["comp-condition-2"]["dag"]["tasks"]["deploy"],
        spec["components"]["comp-condition-3"]["dag"]["tasks"]["deploy-2"],
    ]


def test_deploy_is_gated_on_accuracy(ir):
    spec, _ = ir
    gate = spec["components"]["comp-evaluate-and-deploy"]["dag"]["tasks"]["condition-1"]
    assert gate["triggerPolicy"]["condition"] == GATE


def test_deploy_holds_the_served_model_to_the_evaluated_accuracy(ir):
    """Both deploy tasks get evaluate's accuracy for the post-deploy check, through the
    conditions around them (each hands it on as the channel of evaluate's output)."""
    spec, _ = ir
    channel = "pipelinechannel--evaluate-accuracy"
    tail = spec["components"]["comp-evaluate-and-deploy"]["dag"]["tasks"]
    assert tail["condition-1"]["inputs"]["parameters"][channel] == {
        "taskOutputParameter": {"outputParameterKey": "accuracy", "producerTask": "evaluate"}
    }
    branches = spec["components"]["comp-condition-1"]["dag"]["tasks"]
    for branch in ("condition-2", "condition-3"):
        assert branches[branch]["inputs"]["parameters"][channel] == {
            "componentInputParameter": channel
        }
    for deploy in deploy_tasks(spec):
        assert deploy["inputs"]["parameters"]["accuracy"] == {"componentInputParameter": channel}


def test_train_evaluate_and_deploy_are_never_cached(ir):
    spec, _ = ir
    tasks = spec["root"]["dag"]["tasks"]
    register = spec["components"]["comp-condition-3"]["dag"]["tasks"]["register-model"]
    evaluate = spec["components"]["comp-evaluate-and-deploy"]["dag"]["tasks"]["evaluate"]
    assert tasks["train"].get("cachingOptions", {}).get("enableCache", False) is False
    for task in [register, evaluate, *deploy_tasks(spec)]:  # evaluate: the serving model
        assert task.get("cachingOptions", {}).get("enableCache", False) is False
    assert tasks["pack-dataset"]["cachingOptions"]["enableCache"] is True


def test_job_names_and_namespaces_are_resolved_at_run_time(ir):
    spec, _ = ir
    train = spec["root"]["dag"]["tasks"]["train"]["inputs"]["parameters"]
    assert train["run_id"] == RUN_ID
    for deploy in deploy_tasks(spec):
        assert deploy["inputs"]["parameters"]["run_id"] == RUN_ID
    # No namespace parameter anywhere: every object goes to the namespace the step runs in.
    for component in [spec["root"], *spec["components"].values()]:
        assert "namespace" not in component.get("inputDefinitions", {}).get("parameters", {})


def test_each_step_receives_only_its_own_parameter_set(ir):
    spec, _ = ir
    inputs = {
        name: set(spec["components"][f"comp-{name}"]["inputDefinitions"]["parameters"])
        for name in ("validate-training", "validate-serving", "pack-dataset")
    }
    assert inputs == {
        "validate-training": set(TrainingJob.help()) | {"target"},
        "validate-serving": set(Serving.help()) | {"target"},
        "pack-dataset": set(DataSlice.help()),
    }
    train = spec["root"]["dag"]["tasks"]["train"]["inputs"]["parameters"]
    assert train["job"] == {
        "taskOutputParameter": {"outputParameterKey": "Output", "producerTask": "validate-training"}
    }
    evaluate = spec["components"]["comp-evaluate-and-deploy"]["dag"]["tasks"]["evaluate"]
    assert evaluate["inputs"]["parameters"] == {
        "serving": {"componentInputParameter": "serving"},  # validate-serving's checked set
        "target": {"componentInputParameter": "target"},
    }


def test_platform_config(ir):
    _, kubernetes = ir
    assert kubernetes["pipelineConfig"]["workspace"] == {
        "size": "5Gi",
        "kubernetes": {"pvcSpecPatch": {"accessModes": ["ReadWriteMany"]}},
    }
    executors = kubernetes["deploymentSpec"]["executors"]
    assert executors["exec-train"]["tolerations"] == [GPU_TOLERATION]

    def model_store(channel: str) -> list[dict]:
        return [
            {
                "componentInputParameter": channel,
                "mountPath": "/mnt/model-store",
                "pvcNameParameter": {"componentInputParameter": channel},
            }
        ]

    publishers = {"exec-register-model", "exec-deploy", "exec-deploy-2"}
    assert {name: executors[name]["pvcMount"] for name in publishers} == dict.fromkeys(
        publishers, model_store("pipelinechannel--model_pvc")
    )
    # evaluate reads the serving model there (outside the gate: the sub-pipeline's input)
    assert executors["exec-evaluate"]["pvcMount"] == model_store("model_pvc")
    assert set(executors) == {"exec-train", "exec-evaluate", *publishers}
    # The registry steps, only they, mount the Secret named by model_registry_secret, optional:
    # the KFP driver mounts it as a volume named after it (kubeflow/pipelines 2.5.0
    # backend/src/v2/driver/driver.go, 2.15.0 backend/src/v2/driver/k8s.go).
    credentials = [
        {
            "mountPath": CREDENTIALS_DIR,
            "optional": True,
            "secretNameParameter": {
                "componentInputParameter": "pipelinechannel--model_registry_secret"
            },
        }
    ]
    secrets = {name: executors[name].get("secretAsVolume") for name in publishers}
    assert secrets == {
        "exec-register-model": credentials,
        "exec-deploy-2": credentials,
        "exec-deploy": None,
    }


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


@pytest.fixture
def in_namespace(monkeypatch, tmp_path):
    """The step runs in namespace team-a (its service account's namespace file says so)."""
    path = tmp_path / "serviceaccount-namespace"
    path.write_text("team-a\n")
    monkeypatch.setattr("components.runtime.kube.SERVICE_ACCOUNT_NAMESPACE", path)
    return "team-a"


def succeeded_job(fake_k8s, tmp_path: Path, workspace: Path) -> Path:
    """Script a job that succeeds and leaves a model in the workspace, as the job would."""
    model_dir = workspace / "train" / "model"
    model_dir.mkdir(parents=True)
    (model_dir / "model.pt").write_bytes(b"w")
    fake_k8s.custom.statuses["pytorchjobs"] = [
        {"conditions": [{"type": "Succeeded", "status": "True"}]}
    ]
    return tmp_path / "model"


def training_pods(job: dict) -> list[dict]:
    return [replica["template"]["spec"] for replica in job["spec"]["pytorchReplicaSpecs"].values()]


def work_dirs(container: dict) -> list[str]:
    return [
        arg.split("=", 1)[1]
        for arg in container["args"]
        if arg.startswith(("--data-dir", "--model-dir", "--checkpoint-dir"))
    ]


def test_the_training_job_mounts_the_workspace_the_steps_use(
    ir, fake_k8s, in_namespace, tmp_path, packed_small, validate_crd
):
    from components.steps.train import train

    spec, kubernetes = ir
    workspace = tmp_path / "kfp-workspace"  # stands in for the driver's /kfp-workspace
    volumes, mounts, task_config, inputs = driver_view(
        spec, kubernetes, "train", "run-7", str(workspace)
    )
    assert volumes and mounts, "the train step's own pod must mount the workspace"
    model = succeeded_job(fake_k8s, tmp_path, Path(inputs["workspace_path"]))
    train.python_func(
        dataset=dsl.Dataset(uri=str(packed_small)),
        model=dsl.Model(uri=str(model)),
        job=TrainingJob().to_dict(),
        target="cluster",
        run_id="run-7",
        workspace_path=inputs["workspace_path"],
        task_config=task_config,
    )

    (job,) = fake_k8s.custom.created("pytorchjobs")
    validate_crd(job)
    assert job["metadata"]["namespace"] == in_namespace
    for pod in training_pods(job):
        (container,) = pod["containers"]
        assert pod["volumes"] == volumes  # the same PVC as the step's pod
        assert container["volumeMounts"] == mounts  # at the same path
        paths = work_dirs(container)
        assert len(paths) == 3
        assert all(Path(path).is_relative_to(mounts[0]["mountPath"]) for path in paths)
        assert (
            pod["tolerations"]
            == kubernetes["deploymentSpec"]["executors"]["exec-train"]["tolerations"]
        )
    assert (workspace / "train" / "data" / "manifest.json").is_file()  # staged by the step
    assert (model / "model.pt").read_bytes() == b"w"  # copied out by the step


# --- the pvc variant ---------------------------------------------------------------------


@pytest.fixture
def pvc_ir(compiled):
    spec, platform = compiled[("fashion-mnist", "pvc")]
    return spec, platform["platforms"]["kubernetes"]


def created_pvc():
    return {"taskOutputParameter": {"outputParameterKey": "name", "producerTask": "createpvc"}}


def test_pvc_variant_creates_mounts_and_deletes_its_own_pvc(pvc_ir):
    spec, kubernetes = pvc_ir
    tasks = spec["root"]["dag"]["tasks"]
    assert dependencies(spec["root"]["dag"]) == {
        "createpvc": [],
        "validate-training": [],
        "validate-serving": [],
        "pack-dataset": ["validate-serving", "validate-training"],
        "train": ["createpvc", "pack-dataset", "validate-training"],
        "evaluate-and-deploy": ["pack-dataset", "train", "validate-serving"],
        "deletepvc": ["createpvc", "evaluate-and-deploy"],
    }
    assert tasks["createpvc"]["inputs"]["parameters"] == {
        "access_modes": {"runtimeValue": {"constant": ["ReadWriteMany"]}},
        "pvc_name_suffix": {"runtimeValue": {"constant": "-fmnist-workspace"}},
        "size": {"runtimeValue": {"constant": "5Gi"}},
        "storage_class_name": {"runtimeValue": {"constant": "nfs-rwx"}},
    }
    assert tasks["deletepvc"]["inputs"]["parameters"] == {"pvc_name": created_pvc()}
    train = tasks["train"]["inputs"]["parameters"]
    assert train["workspace_pvc"] == created_pvc()
    assert train["workspace_path"] == {"runtimeValue": {"constant": OWN_WORKSPACE_MOUNT_PATH}}
    assert train["target"] == {"runtimeValue": {"constant": "cluster"}}
    assert train["run_id"] == RUN_ID
    executor = kubernetes["deploymentSpec"]["executors"]["exec-train"]
    assert executor["pvcMount"] == [
        {"mountPath": OWN_WORKSPACE_MOUNT_PATH, "pvcNameParameter": created_pvc(), **created_pvc()}
    ]
    assert executor["tolerations"] == [GPU_TOLERATION]


def test_pvc_variant_has_no_workspace_task_config_or_target(pvc_ir):
    spec, kubernetes = pvc_ir
    assert "pipelineConfig" not in kubernetes
    assert all("taskConfigPassthroughs" not in c for c in spec["components"].values())
    types = [
        item.get("parameterType")
        for component in spec["components"].values()
        for item in component.get("inputDefinitions", {}).get("parameters", {}).values()
    ]
    assert "TASK_CONFIG" not in types  # KFP 2.5's pipeline spec has no such type
    assert "workspace_path}}" not in yaml.safe_dump(spec)
    assert "target" not in spec["root"]["inputDefinitions"]["parameters"]  # cluster only
    for deploy in deploy_tasks(spec):
        assert deploy["inputs"]["parameters"]["target"] == {
            "componentInputParameter": "pipelinechannel--target"
        }
    tail = spec["root"]["dag"]["tasks"]["evaluate-and-deploy"]["inputs"]["parameters"]
    assert tail["target"] == {"runtimeValue": {"constant": "cluster"}}


def test_the_training_job_mounts_the_pvc_the_step_uses(
    pvc_ir, fake_k8s, in_namespace, tmp_path, packed_small, validate_crd
):
    from components.steps.train import train

    workspace = tmp_path / "fmnist-workspace"  # stands in for the PVC at its mount path
    model = succeeded_job(fake_k8s, tmp_path, workspace)
    train.python_func(  # the pvc variant's inputs; no TaskConfig comes: kfp passes an empty one
        dataset=dsl.Dataset(uri=str(packed_small)),
        model=dsl.Model(uri=str(model)),
        job=TrainingJob().to_dict(),
        target="cluster",
        workspace_path=str(workspace),
        run_id="run-7",
        task_config=dsl.TaskConfig(),
        workspace_pvc="run-7-fmnist-workspace",
    )
    (job,) = fake_k8s.custom.created("pytorchjobs")
    validate_crd(job)
    for pod in training_pods(job):
        (container,) = pod["containers"]
        (volume,) = pod["volumes"]
        assert volume["persistentVolumeClaim"] == {"claimName": "run-7-fmnist-workspace"}
        assert container["volumeMounts"] == [{"name": volume["name"], "mountPath": str(workspace)}]
        assert all(Path(path).is_relative_to(workspace) for path in work_dirs(container))
        assert pod["tolerations"] == [GPU_TOLERATION]
    assert (workspace / "train" / "data" / "manifest.json").is_file()
    assert (model / "model.pt").read_bytes() == b"w"


@pytest.mark.parametrize("step", ["train", "tune"])
def test_both_variants_run_one_and_the_same_step(compiled, step):
    """One component per step: the pvc variant's is the same code, minus the TaskConfig."""
    found = 0
    for name in PIPELINES:
        workspace, _ = compiled[(name, "workspace")]
        pvc, _ = compiled[(name, "pvc")]
        if f"comp-{step}" not in workspace["components"]:
            continue
        found += 1
        executors = [
            spec["deploymentSpec"]["executors"][f"exec-{step}"] for spec in (workspace, pvc)
        ]
        assert executors[0] == executors[1]
        inputs = [
            set(spec["components"][f"comp-{step}"]["inputDefinitions"]["parameters"])
            for spec in (workspace, pvc)
        ]
        assert inputs[0] - inputs[1] == {"task_config"} and inputs[1] <= inputs[0]
    assert found == (2 if step == "train" else 1)
