"""The components image runs the pipeline's steps as the KFP launcher starts them, on real pods.

Each step's container gets the command and args the compiled pipeline gives it (``sh -ec``
writing the component's source to a file, then ``python3 -m kfp.dsl.executor_main
--executor_input <json> --function_to_execute <name>``), as uid 10001 under our pod security
context (components/specs/pods.py), restartPolicy Never, in a namespace enforcing Pod Security
"restricted", on the tier's real kubelet node. The workspace PVC is mounted where the KFP
driver mounts a run's workspace (``/kfp-workspace``). pack-dataset runs on the image's Debian
dataset; evaluate then reads that packed dataset and a model trained on this machine.

How the executor input is made, and where each path points:
- The JSON is kfp 2.17.3's own: ``kfp/local/executor_input_utils.py``
  ``construct_executor_input`` from the compiled component spec, ``executor_input_to_dict``
  (ints stay ints, as the backend's protojson writes them), replacing ``{{$}}`` in the args
  as the launcher does (kubeflow/pipelines ``backend/src/v2/component/launcher_v2.go``,
  ``getPlaceholders``).
- Output artifact URIs are ``<pipeline root>/<task>/<output>`` (kubeflow/pipelines
  ``backend/src/v2/driver/driver.go`` ``provisionOutputs`` / ``generateOutputURI``) under
  KFP's default root ``minio://mlpipeline/v2/artifacts/<pipeline>/<run>``; the executor file
  is the launcher's ``/tmp/kfp_outputs/output_metadata.json`` (``OutputMetadataFilepath``).
- The SDK maps ``minio://`` to the local path ``/minio/...`` (kfp 2.17.3
  ``kfp/dsl/types/artifact_types.py`` ``Artifact._get_path``); an input artifact whose
  metadata has ``_kfp_workspace: true`` maps to ``/kfp-workspace/.artifacts/minio/...``, and
  the launcher does not download it (launcher_v2.go ``downloadArtifacts``). Here the
  workspace's ``.artifacts/minio`` is mounted at ``/minio`` and a folder of it at
  ``/tmp/kfp_outputs``: what a step writes lands where the launcher would leave it for the
  next task, and the test reads it on the volume's folder.

Upstream behaviour relied on besides: k8s.io/kubernetes v1.36.3 ``pkg/volume/local/local.go``
``SetUpAt`` gives a local volume the pod's fsGroup, and ``pkg/kubelet/kubelet_pods.go``
``makeMounts`` creates a missing subPath folder with the volume root's mode.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import kubernetes
import pytest
import yaml
from google.protobuf import json_format
from kfp import compiler
from kfp.dsl import Dataset, Model
from kfp.local import executor_input_utils
from kfp.pipeline_spec import pipeline_spec_pb2
from real_pods import (  # noqa: F401  (real_namespace: this module's ``namespace``)
    bind_workspace,
    describe_pods,
    harness_node,
    pod_log,
    real_namespace,
    restricted_init_container,
)

from components.images import Images
from components.runtime.evaluation import evaluate_model_dir
from components.specs import pods
from components.specs.params import Serving, TrainingJob
from pipelines.fashion_mnist import fashion_mnist
from trainer.data import DEBIAN_DIR, pack

pytestmark = [pytest.mark.cluster, pytest.mark.real_pods]
REPO = Path(__file__).resolve().parents[2]
PIPELINE_ROOT = "minio://mlpipeline/v2/artifacts/fashion-mnist"  # KFP's default root
OUTPUT_METADATA = "/tmp/kfp_outputs/output_metadata.json"  # launcher_v2.go's file
ARTIFACTS = ".artifacts/minio"  # the workspace folder of minio:// artifacts
POD_SECONDS = 600
TRAIN_LIMIT, TEST_LIMIT = 2000, 500


@pytest.fixture(scope="module")
def pipeline_spec(tmp_path_factory) -> dict:
    """The compiled default pipeline (its first YAML document: the PipelineSpec)."""
    path = tmp_path_factory.mktemp("compiled") / "fashion-mnist.yaml"
    compiler.Compiler().compile(fashion_mnist, str(path))
    return next(yaml.safe_load_all(path.read_text()))


def executor_input(spec: dict, task: str, run: str, arguments: dict) -> dict:
    """The ExecutorInput the driver hands ``task``'s launcher, as the JSON the step reads."""
    component = pipeline_spec_pb2.ComponentSpec()
    json_format.ParseDict(spec["components"][f"comp-{task}"], component)
    message = executor_input_utils.construct_executor_input(
        component, arguments, f"{PIPELINE_ROOT}/{run}/{task}", block_input_artifact=False
    )
    message.outputs.output_file = OUTPUT_METADATA
    for name, parameter in message.outputs.parameters.items():
        parameter.output_file = f"/tmp/kfp/outputs/{name}"
    return executor_input_utils.executor_input_to_dict(message, component)


def workspace_artifact(kind, uri: str, metadata: dict | None = None):
    """An upstream output already in the workspace (``_kfp_workspace``: not downloaded)."""
    return kind(
        name=uri.rsplit("/", 1)[-1], uri=uri, metadata={**(metadata or {}), "_kfp_workspace": True}
    )


def local_folder(workspace, uri: str) -> Path:
    """The volume's folder behind ``minio://`` ``uri`` (what the step sees at /minio/...)."""
    return workspace.path / ARTIFACTS / uri.removeprefix("minio://")


def step_pod(
    spec: dict,
    task: str,
    run: str,
    inputs: dict,
    claim: str,
    pod_security: dict | None = None,
    container_security: dict | None = None,
) -> dict:
    """The pod of ``task``: the compiled container with its executor input, on the workspace.

    Unless told otherwise (``{}``: none), the pod has our security contexts
    (components/specs/pods.py), which pass Pod Security "restricted".
    """
    container = spec["deploymentSpec"]["executors"][f"exec-{task}"]["container"]
    payload = json.dumps(inputs)
    volume = pods.WORKSPACE_VOLUME
    return {
        "metadata": {"name": f"{task}-{run}", "labels": {"fmnist.test/step": task}},
        "spec": {
            "restartPolicy": "Never",
            "serviceAccountName": "pipeline-runner",
            "securityContext": (
                pods.pod_security_context() if pod_security is None else pod_security
            ),
            "volumes": [pods.pvc_volume(volume, claim)],
            "containers": [
                {
                    "name": "main",  # the name KFP's Argo workflows give the step container
                    "image": container["image"],
                    "command": container["command"],
                    "args": [arg.replace("{{$}}", payload) for arg in container["args"]],
                    "resources": pods.resources("1", "2Gi"),
                    "securityContext": (
                        pods.container_security_context()
                        if container_security is None
                        else container_security
                    ),
                    "volumeMounts": [
                        pods.volume_mount(volume, pods.WORKSPACE_MOUNT_PATH),
                        {"name": volume, "mountPath": "/minio", "subPath": ARTIFACTS},
                        {
                            "name": volume,
                            "mountPath": str(Path(OUTPUT_METADATA).parent),
                            "subPath": f"kfp_outputs/{task}",
                        },
                    ],
                }
            ],
        },
    }


def run_pod(core, namespace: str, body: dict, phase: str = "Succeeded") -> str:
    """Create the pod, wait until it ends; returns its log; fails unless it ended in ``phase``."""
    name = body["metadata"]["name"]
    core.create_namespaced_pod(namespace, body)
    deadline = time.monotonic() + POD_SECONDS
    while time.monotonic() < deadline:
        pod = core.read_namespaced_pod(name, namespace)
        if pod.status.phase in ("Succeeded", "Failed"):
            break
        time.sleep(2)
    log = pod_log(core, namespace, name)
    assert pod.status.phase == phase, f"{describe_pods(core, namespace)}\n{log}"
    assert pod.spec.node_name in harness_node().NAMES
    return log


def output_metadata(workspace, task: str) -> dict:
    """The executor's output file, as the launcher would read it."""
    return json.loads((workspace.path / "kfp_outputs" / task / "output_metadata.json").read_text())


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("namespace", ["restricted"], indirect=True)
def test_pack_and_evaluate_run_as_the_launcher_starts_them(
    namespace, core, pipeline_spec, tmp_path
):
    """pack-dataset then evaluate, each the compiled step in its own real pod.

    Pack: the manifest on the volume counts 2,000 + 500 images from the image's Debian files,
    its checksums are those of the files next to it and of the same slice packed here, and the
    executor output carries the Dataset's metadata. Evaluate: the accuracy the pod returns is
    the one the project's evaluation computes here for the same model and data, and the Katib
    metric line is in the pod's log.
    """
    assert (
        pipeline_spec["deploymentSpec"]["executors"]["exec-pack-dataset"]["container"]["image"]
        == Images.resolve().components
    )
    for task, function in (("pack-dataset", "pack_dataset"), ("evaluate", "evaluate")):
        container = pipeline_spec["deploymentSpec"]["executors"][f"exec-{task}"]["container"]
        assert "python3 -m kfp.dsl.executor_main" in container["command"][2]
        assert container["args"] == ["--executor_input", "{{$}}", "--function_to_execute", function]
    workspace = bind_workspace(core, namespace)
    run = uuid.uuid4().hex[:8]

    limits = {"train_limit": TRAIN_LIMIT, "test_limit": TEST_LIMIT}
    pack_input = executor_input(pipeline_spec, "pack-dataset", run, limits)
    dataset_uri = pack_input["outputs"]["artifacts"]["dataset"]["artifacts"][0]["uri"]
    assert dataset_uri == f"{PIPELINE_ROOT}/{run}/pack-dataset/dataset"
    log = run_pod(
        core, namespace, step_pod(pipeline_spec, "pack-dataset", run, pack_input, workspace.pvc)
    )
    assert f"packed {TRAIN_LIMIT} training and {TEST_LIMIT} test images from {DEBIAN_DIR}" in log
    packed = local_folder(workspace, dataset_uri)
    manifest = json.loads((packed / "manifest.json").read_text())
    assert manifest["counts"] == {"train": TRAIN_LIMIT, "test": TEST_LIMIT}
    assert manifest["source"] == str(DEBIAN_DIR) and manifest["complete"] is False
    here = pack(tmp_path / "packed", train_limit=TRAIN_LIMIT, test_limit=TEST_LIMIT)
    assert manifest["files"] == here["files"]  # Debian's files are the upstream ones
    for name, digest in manifest["files"].items():
        assert sha256(packed / name) == digest, name
    assert packed.stat().st_uid == pods.IMAGE_USER
    (dataset_out,) = output_metadata(workspace, "pack-dataset")["artifacts"]["dataset"]["artifacts"]
    assert dataset_out["uri"] == dataset_uri
    assert dataset_out["metadata"] == {
        "counts": {"train": TRAIN_LIMIT, "test": TEST_LIMIT},
        "complete": False,
        "source": str(DEBIAN_DIR),
    }

    model_uri = f"{PIPELINE_ROOT}/{run}/train/model"
    model_dir = local_folder(workspace, model_uri)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "trainer",
            f"--data-dir={tmp_path / 'packed'}",
            f"--model-dir={model_dir}",
            "--epochs=1",
            "--num-threads=1",
            "--device=cpu",
        ],
        check=True,
        capture_output=True,
    )
    expected, _ = evaluate_model_dir(str(model_dir), str(packed))
    arguments = {
        "model": workspace_artifact(Model, model_uri),
        "dataset": workspace_artifact(Dataset, dataset_uri, dataset_out["metadata"]),
        "serving": Serving(min_accuracy=0.5).to_dict(),
        "target": "cluster",  # no InferenceService in the namespace: nothing serves
    }
    evaluate_input = executor_input(pipeline_spec, "evaluate", run, arguments)
    log = run_pod(
        core, namespace, step_pod(pipeline_spec, "evaluate", run, evaluate_input, workspace.pvc)
    )
    out = output_metadata(workspace, "evaluate")
    accuracy = out["parameterValues"]["accuracy"]
    assert accuracy == expected.accuracy
    assert out["parameterValues"]["Output"] is True  # one epoch passes 0.5, and nothing serves
    assert f"nothing serves yet (no InferenceService {namespace}/fashion-mnist)" in log
    assert f"{{metricName: accuracy, metricValue: {expected.accuracy:.4f}}}" in log
    assert f"on {TEST_LIMIT} images" in log
    (metrics,) = out["artifacts"]["metrics"]["artifacts"]
    assert metrics["metadata"]["accuracy"] == expected.accuracy
    assert metrics["metadata"]["loss"] == pytest.approx(expected.loss, rel=1e-5)
    report_uri = evaluate_input["outputs"]["artifacts"]["report"]["artifacts"][0]["uri"]
    assert report_uri == f"{PIPELINE_ROOT}/{run}/evaluate/report"
    report = local_folder(workspace, report_uri).read_text()
    assert f"Test accuracy **{expected.accuracy:.2%}**" in report
    assert (local_folder(workspace, report_uri).parent / "report_html").stat().st_size > 0


def kit_config(key: str) -> dict:
    """One value of Argo's config map as k8s/pipelines sets it."""
    patch = yaml.safe_load((REPO / "k8s" / "pipelines" / "workflow-defaults.yaml").read_text())
    return yaml.safe_load(patch["data"][key])


def kit_pod_security() -> dict:
    """The pod securityContext Argo gives every pipeline pod with k8s/pipelines applied.

    Its ``workflowDefaults`` Workflow's ``spec.securityContext`` (argo-workflows v3.7.3
    workflow/controller/workflowpod.go: a template without its own takes the Workflow's);
    tests/k8s/test_pipelines_admin.py renders the component over Argo's config map.
    """
    return kit_config("workflowDefaults")["spec"]["securityContext"]


def kit_main_security() -> dict:
    """The step container's securityContext: k8s/pipelines' ``mainContainer``, which Argo
    strategic-merges into every template's main container (argo-workflows v3.7.3
    workflow/controller/workflowpod.go ``createWorkflowPod``; KFP 2.15's driver patch sets none).
    """
    return kit_config("mainContainer")["securityContext"]


def train_step_pod(
    spec: dict, workspace, run: str, packed: Path, pod_security: dict, main_security: dict
):
    """The train step's pod as KFP 2.15 makes it, with the contexts Argo's config gives it.

    KFP 2.15 sets a pod securityContext only from PIPELINE_RUN_AS_USER and none on the
    container (kubeflow/pipelines 2.15.0 backend/src/v2/compiler/argocompiler/argo.go,
    container.go): ``{}`` and ``{}`` are KFP's own. The driver hands the step its workspace
    volume and mount as ``task_config`` (backend/src/v2/driver/container.go). The packed
    dataset is a workspace artifact of pack-dataset's, copied to where pack-dataset's pod
    would have written it.
    """
    dataset_uri = f"{PIPELINE_ROOT}/{run}/pack-dataset/dataset"
    shutil.copytree(packed, local_folder(workspace, dataset_uri))
    job = TrainingJob(epochs=1, cpu="900m", memory="3Gi", timeout_seconds=POD_SECONDS)
    arguments = {
        "dataset": workspace_artifact(Dataset, dataset_uri, {"counts": {"train": TRAIN_LIMIT}}),
        "job": job.to_dict(),
        "target": "cluster",
        "workspace_path": pods.WORKSPACE_MOUNT_PATH,
        "run_id": run,
        "task_config": {},
    }
    inputs = executor_input(spec, "train", run, arguments)
    volume = pods.WORKSPACE_VOLUME
    inputs["inputs"]["parameterValues"]["task_config"] = {
        "volumes": [pods.pvc_volume(volume, workspace.pvc)],
        "volumeMounts": [pods.volume_mount(volume, pods.WORKSPACE_MOUNT_PATH)],
    }
    body = step_pod(spec, "train", run, inputs, workspace.pvc, pod_security, main_security)
    container = body["spec"]["containers"][0]
    container["resources"] = pods.resources("200m", "1Gi")
    # The workspace only: /minio and the executor's output file stay in the container, where
    # the launcher uploads them from (the image makes /minio the user's).
    container["volumeMounts"] = [pods.volume_mount(volume, pods.WORKSPACE_MOUNT_PATH)]
    return body


@pytest.fixture(scope="module")
def packed_here(tmp_path_factory) -> Path:
    """The 2,000 / 500 slice, packed on this machine."""
    out = tmp_path_factory.mktemp("packed") / "dataset"
    pack(out, train_limit=TRAIN_LIMIT, test_limit=TEST_LIMIT)
    return out


def test_without_an_fs_group_the_train_step_says_the_workspace_is_not_writable(
    namespace, core, custom, pipeline_spec, packed_here
):
    """Defect 3 in KFP's own step pod: uid 10001 cannot write a fresh ``root:root 0755`` volume.

    The step reaches the API from its pod (the kubernetes Service, harness/api_service.py),
    finds the PyTorchJob API, then fails staging with one line that names the folder, its owner
    and mode, and the fix; no job is created.
    """
    workspace = bind_workspace(core, namespace)
    run = uuid.uuid4().hex[:8]
    body = train_step_pod(pipeline_spec, workspace, run, packed_here, {}, {})  # KFP's own
    log = run_pod(core, namespace, body, phase="Failed")
    lines = [line for line in log.splitlines() if "VolumeNotWritable" in line]
    assert len(lines) == 1, log
    (line,) = lines
    assert (
        f"the workspace folder {pods.WORKSPACE_MOUNT_PATH} (owner 0:0, mode 0755) is not "
        f"writable by this step's user {pods.IMAGE_USER}"
    ) in line
    assert "k8s/pipelines" in line
    jobs = custom.list_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs")[
        "items"
    ]
    assert jobs == []


@pytest.mark.usefixtures("restricted_init_container")
@pytest.mark.parametrize("namespace", ["restricted"], indirect=True)
def test_with_k8s_pipelines_the_train_step_runs_restricted_and_trains_from_a_real_pod(
    namespace, core, pipeline_spec, packed_here
):
    """The compiled train step in its own pod, with the contexts k8s/pipelines gives it.

    In a namespace enforcing Pod Security "restricted" (the real kube-apiserver's PodSecurity
    admission, k8s.io/pod-security-admission v0.36.3): the step's pod as KFP 2.15 makes it
    alone is refused; with k8s/pipelines' pod context (uid 10001, runAsNonRoot, seccomp,
    fsGroup) and main-container context (no privilege escalation, no capabilities) it is
    admitted and, as the pipeline's ServiceAccount, stages the data on the workspace (the
    kubelet made the volume group 10001), creates the PyTorchJob (Master + Worker, real pods,
    restricted too with k8s/training-operator's init container), streams rank 0's log into
    its own, and ends Succeeded once it copied the job's model into its Model artifact.
    """
    workspace = bind_workspace(core, namespace)
    run = uuid.uuid4().hex[:8]
    bare = train_step_pod(pipeline_spec, workspace, f"{run}-bare", packed_here, {}, {})
    with pytest.raises(kubernetes.client.ApiException) as refused:
        core.create_namespaced_pod(namespace, bare)
    message = json.loads(refused.value.body)["message"]
    assert refused.value.status == 403 and 'violates PodSecurity "restricted' in message, message
    body = train_step_pod(
        pipeline_spec, workspace, run, packed_here, kit_pod_security(), kit_main_security()
    )
    assert body["spec"]["containers"][0]["resources"]["limits"]  # the step has its limits
    log = run_pod(core, namespace, body)
    assert f"created PyTorchJob {namespace}/" in log
    model = json.loads((workspace.path / "train" / "model" / "model.json").read_text())
    accuracy = model["metrics"]["accuracy"]
    assert accuracy > 0.5 and model["training"]["world_size"] == 2
    assert f"{{metricName: accuracy, metricValue: {accuracy:.4f}}}" in log
    staged = workspace.path / "train" / "data" / "manifest.json"
    assert staged.stat().st_uid == pods.IMAGE_USER and staged.stat().st_gid == pods.IMAGE_USER
    assert workspace.path.stat().st_gid == pods.IMAGE_USER  # the kubelet's fsGroup change
