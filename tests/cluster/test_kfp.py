"""`fmnist submit` and `fmnist schedule` against a real Kubeflow Pipelines 2.15 backend.

The KFP API server (with MySQL and its S3 object store), its ScheduledWorkflow controller and
persistence agent, and Argo Workflows' controller, attached to the cluster of `make
cluster-up`; the server's address is in build/cluster/kfp-host (the ``kfp_host`` fixture).
tools/controlplane cannot build that backend (the Go module proxy does not serve
github.com/kubeflow/pipelines), so these tests carry the ``kfp`` marker: `make
test-cluster` leaves them out, `make test-kfp` runs them against a backend attached by
hand, and they fail without one (docs/development.md, "Running the cluster test tier").
Nothing is mocked: the API server compiles our pipeline spec into an Argo Workflow, Argo
creates its pods on the real nodes (the ``kubeflow`` namespace carries its annotations) and
the ScheduledWorkflow controller fires recurring runs. The runs of the default pipeline
end to end are in test_kfp_runs.py; the tests here look at what the backend makes of the
pipeline, then stop the run (``stop_run``), which would otherwise train on the whole data.

Versions: KFP backend 2.15.0 (Kubeflow 1.11), configured like its platform-agnostic
manifests (kubeflow/pipelines 2.15.0 manifests/kustomize/env/platform-agnostic: single
user, runs in the ``kubeflow`` namespace, cache server off); Argo Workflows v3.7.3 (the
version that KFP 2.15.0's go.mod pins). The last test wants an older API server (2.5.0,
Kubeflow 1.10) in build/cluster/kfp-legacy-host.

Each test names the upstream file of each behaviour it relies on. Paths below are in
kubeflow/pipelines at tag 2.15.0 unless they say otherwise.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import time
from datetime import datetime, timedelta, timezone

import pytest
from cluster_helpers import wait_for
from kfp_helpers import (
    KFP_NAMESPACE,
    LEGACY_NAMESPACE,
    RUN_ID_LABEL,
    SLICE,
    STORAGE_CLASS,
    WORKFLOW_LABEL,
    fmnist,
    param_args,
    run_pipeline,
    stop_run,
    submit,
    unique,
    workflow_of_run,
    workflows,
)

from components.runtime.ports import free_port
from trainer.model_dir import MODEL_STORE

pytestmark = [pytest.mark.cluster, pytest.mark.kfp]

RELEASE = "2.15.0"
DRIVER_IMAGE = f"ghcr.io/kubeflow/kfp-driver:{RELEASE}"  # V2_DRIVER_IMAGE of the manifests
LAUNCHER_IMAGE = f"ghcr.io/kubeflow/kfp-launcher:{RELEASE}"  # V2_LAUNCHER_IMAGE
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
SWF_LABEL = "scheduledworkflows.kubeflow.org/scheduledWorkflowName"  # consts.go


def workflow_arguments(workflow: dict) -> dict[str, str]:
    """``spec.arguments.parameters`` by name: the compiler keeps component specs there."""
    return {p["name"]: p.get("value") for p in workflow["spec"]["arguments"]["parameters"]}


def dag_tasks(workflow: dict) -> dict[str, dict]:
    """Every DAG task of every template, by task name."""
    found = {}
    for template in workflow["spec"]["templates"]:
        for task in (template.get("dag") or {}).get("tasks", []):
            found[task["name"]] = task
    return found


def task_parameter(task: dict, name: str) -> str | None:
    for parameter in task.get("arguments", {}).get("parameters", []):
        if parameter["name"] == name:
            return parameter.get("value")
    return None


@pytest.mark.parametrize(
    ("pipeline", "launch_steps"),
    [("fashion-mnist", ["train"]), ("fashion-mnist-tune", ["train", "tune"])],
)
def test_submit_creates_the_argo_workflow(
    kfp_host, kfp_client, custom, core, pipeline, launch_steps
):
    """`fmnist submit` uploads, a second submit adds a version, the run becomes a Workflow.

    - backend/src/apiserver/server/pipeline_upload_server.go: the upload of a new pipeline
      creates it with its first version; backend/src/apiserver/resource/resource_manager.go
      CreatePipelineVersion: a second upload under the same pipeline adds a version.
    - backend/src/apiserver/resource/resource_manager.go CreateRun: the run is compiled
      (backend/src/v2/compiler/argocompiler/argo.go Compile) and created as a Workflow
      labelled ``pipeline/runid`` (backend/src/common/util/consts.go).
    - argo.go GetWorkspacePVC: the run workspace is the volumeClaimTemplate ``kfp-workspace``
      with the pipeline's pvcSpecPatch (class, access mode) and its size; KFP 2.15 refuses one
      without storageClassName.
    - backend/src/v2/compiler/argocompiler/container.go: every container step is a
      ``system-container-driver`` task (image V2_DRIVER_IMAGE) then an executor template whose
      init container copies the launcher (V2_LAUNCHER_IMAGE); its kfp-kubernetes settings go
      to the driver as ``kubernetes-config`` = the workflow parameter ``kubernetes-comp-<c>``
      (argo.go saveKubernetesSpec), which the driver turns into the pod spec patch.
    - The task spec each driver gets (``task``) carries the step's cachingOptions; the
      manifests run the API server with CACHEENABLED=false, which adds ``--cache_disabled``
      to the driver (container.go addContainerDriverTemplate).
    - argo-workflows v3.7.3 workflow/controller/operator.go: the controller creates the
      workspace PVC ``<workflow>-kfp-workspace`` (createPVCs, owned by the Workflow), then
      the first pod, the root DAG driver, on a real node.
    """
    name = unique(pipeline)
    first_version, run_id = submit(kfp_host, pipeline, name, "--param", "batch_size=64")
    second_version, second_run = submit(kfp_host, pipeline, name)
    assert second_version != first_version and second_run != run_id
    pipeline_id = kfp_client.get_pipeline_id(name)
    versions = kfp_client.list_pipeline_versions(pipeline_id, page_size=10).pipeline_versions
    assert {v.pipeline_version_id for v in versions} == {first_version, second_version}
    run = kfp_client.get_run(run_id)
    assert run.pipeline_version_reference.pipeline_version_id == first_version

    workflow = workflow_of_run(custom, run_id)
    spec = workflow["spec"]
    assert spec["serviceAccountName"] == "pipeline-runner"  # DEFAULTPIPELINERUNNERSERVICEACCOUNT
    (claim,) = spec["volumeClaimTemplates"]
    assert claim["metadata"]["name"] == "kfp-workspace"
    assert claim["spec"]["storageClassName"] == STORAGE_CLASS
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "5Gi"

    templates = {t["name"]: t for t in spec["templates"]}
    driver = templates["system-container-driver"]["container"]
    assert driver["image"] == DRIVER_IMAGE
    assert "--cache_disabled" in driver["args"]  # CACHEENABLED=false
    assert templates["system-dag-driver"]["container"]["image"] == DRIVER_IMAGE
    (launcher,) = templates["system-container-impl"]["initContainers"]
    assert launcher["image"] == LAUNCHER_IMAGE

    tasks = dag_tasks(workflow)
    (root,) = [
        t
        for t in tasks.values()
        if t["template"] == "system-dag-driver" and t["name"] == "root-driver"
    ]
    runtime = json.loads(task_parameter(root, "runtime-config"))["parameterValues"]
    assert runtime["batch_size"] == 64  # --param batch_size=64, as an integer
    steps = ["validate-training", "validate-serving", "pack-dataset", *launch_steps]
    steps += ["evaluate", "deploy", "register-model", "deploy-2"]  # deploy-2: after registering
    steps += ["validate-sweep"] if "tune" in launch_steps else []
    cached = {"pack-dataset", "validate-sweep"}  # the rest: caching off (evaluate: the champion)
    for step in steps:
        driver_task, executor_task = tasks[f"{step}-driver"], tasks[step]
        assert driver_task["template"] == "system-container-driver", step
        assert task_parameter(driver_task, "task-name") == step
        caching = json.loads(task_parameter(driver_task, "task"))["cachingOptions"]
        assert caching.get("enableCache", False) is (step in cached), step
        assert executor_task["template"] == "system-container-executor", step
        assert task_parameter(executor_task, "pod-spec-patch") == (
            f"{{{{tasks.{step}-driver.outputs.parameters.pod-spec-patch}}}}"
        )
    arguments = workflow_arguments(workflow)
    for step in launch_steps:
        assert json.loads(arguments[f"kubernetes-comp-{step}"]) == {
            "tolerations": [GPU_TOLERATION]
        }, step
        assert task_parameter(tasks[f"{step}-driver"], "kubernetes-config") == (
            f"{{{{workflow.parameters.kubernetes-comp-{step}}}}}"
        )
    publishers = ["deploy", "register-model", "deploy-2"]  # the steps on the model PVC
    for step in [*publishers, "evaluate"]:  # evaluate reads the serving model there
        (mount,) = json.loads(arguments[f"kubernetes-comp-{step}"])["pvcMount"]
        assert mount["mountPath"] == MODEL_STORE
        channel = "model_pvc" if step == "evaluate" else "pipelinechannel--model_pvc"
        assert mount["pvcNameParameter"] == {"componentInputParameter": channel}
    assert {n for n in arguments if n.startswith("kubernetes-")} == {
        f"kubernetes-comp-{s}" for s in [*launch_steps, *publishers, "evaluate"]
    }

    pods = wait_for(
        lambda: (
            core.list_namespaced_pod(
                KFP_NAMESPACE, label_selector=f"{WORKFLOW_LABEL}={workflow['metadata']['name']}"
            ).items
        ),
        30,
        "the Workflow's first pod",
    )
    first = min(pods, key=lambda pod: pod.metadata.creation_timestamp)  # the root DAG driver
    assert first.metadata.name.startswith(f"{workflow['metadata']['name']}-system-dag-driver-")
    assert DRIVER_IMAGE in {c.image for c in first.spec.containers}
    assert first.spec.service_account_name == "pipeline-runner"
    pvc = core.read_namespaced_persistent_volume_claim(
        f"{workflow['metadata']['name']}-kfp-workspace", KFP_NAMESPACE
    )
    assert pvc.spec.storage_class_name == STORAGE_CLASS
    assert pvc.spec.access_modes == ["ReadWriteMany"]
    assert pvc.metadata.owner_references[0].name == workflow["metadata"]["name"]
    assert first.spec.node_name in ("real-node-1", "real-node-2")
    for run in (run_id, second_run):
        stop_run(kfp_client, custom, run)


def test_a_recurring_run_starts_real_runs_and_is_managed(
    kfp_host, kfp_client, custom, no_earlier_predictor
):
    """`fmnist schedule` makes a ScheduledWorkflow that starts two real runs, one after the
    other; --list shows it, --disable stops the firing, --delete removes it.

    - backend/src/apiserver/resource/resource_manager.go CreateJob and
      backend/src/apiserver/template/v2_template.go ScheduledWorkflow: the recurring run is a
      ScheduledWorkflow (its uid is the recurring run's id) carrying maxConcurrency,
      noCatchup, enabled and the cron trigger with its start and end times.
    - backend/src/crd/controller/scheduledworkflow/controller.go: the controller fires a
      Workflow at each cron time (robfig/cron, seconds first), labelled
      ``scheduledworkflows.kubeflow.org/scheduledWorkflowName``, and none while
      maxConcurrency Workflows are active: with 1, the second run starts after the first
      ended. A disabled one fires none.
    - resource_manager.go ChangeJobMode / DeleteJob: disable sets ``enabled: false``; delete
      removes the ScheduledWorkflow.
    The runs are kfp_helpers.SLICE; the second is stopped once it has started.
    """
    name = unique("fmnist-cron")
    now = datetime.now(timezone.utc).replace(microsecond=0)
    start, end = now - timedelta(minutes=1), now + timedelta(hours=1)
    code, out, err = fmnist(
        "schedule",
        "--host",
        kfp_host,
        "--cron",
        "*/15 * * * * *",
        "--max-concurrency",
        "1",
        "--no-catchup",
        "--start-time",
        start.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "--end-time",
        end.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "--pipeline-name",
        name,
        "--name",
        name,
        "--workspace-storage-class",
        STORAGE_CLASS,
        *param_args(SLICE),
    )
    assert code == 0, err
    found = re.search(r"^recurring run (\S+) \(cron '\*/15 \* \* \* \* \*'", out, re.M)
    assert found, out
    recurring_id = found[1]
    scheduled = wait_for(
        lambda: [
            s
            for s in custom.list_namespaced_custom_object(
                "kubeflow.org", "v1beta1", KFP_NAMESPACE, "scheduledworkflows"
            )["items"]
            if s["metadata"]["uid"] == recurring_id
        ],
        10,
        "the ScheduledWorkflow",
    )[0]
    spec = scheduled["spec"]
    assert spec["enabled"] is True
    assert spec["maxConcurrency"] == 1
    assert spec["noCatchup"] is True
    cron = spec["trigger"]["cronSchedule"]
    assert cron["cron"] == "*/15 * * * * *"
    assert _time(cron["startTime"]) == start and _time(cron["endTime"]) == end

    selector = f"{SWF_LABEL}={scheduled['metadata']['name']}"
    fired = wait_for(
        lambda: (found := workflows(custom, selector)) and len(found) >= 2 and found,
        900,
        "a second run, after the first one ended",
        interval=5,
    )
    first, second = sorted(fired, key=lambda w: w["metadata"]["creationTimestamp"])
    assert first["status"]["phase"] == "Succeeded", first["status"].get("message")
    assert _time(second["metadata"]["creationTimestamp"]) >= _time(first["status"]["finishedAt"])
    run_ids = [w["metadata"]["labels"][RUN_ID_LABEL] for w in (first, second)]
    assert kfp_client.get_run(run_ids[0]).state == "SUCCEEDED"

    code, out, err = fmnist("schedule", "--host", kfp_host, "--list")
    assert code == 0, err
    (line,) = [line for line in out.splitlines() if line.startswith(recurring_id)]
    assert "ENABLED" in line and "cron */15 * * * * *" in line and name in line

    code, out, err = fmnist("schedule", "--host", kfp_host, "--disable", recurring_id)
    assert code == 0 and out.strip() == f"disabled recurring run {recurring_id}", err
    swf_name = scheduled["metadata"]["name"]
    wait_for(
        lambda: (
            custom.get_namespaced_custom_object(
                "kubeflow.org", "v1beta1", KFP_NAMESPACE, "scheduledworkflows", swf_name
            )["spec"]["enabled"]
            is False
        ),
        10,
        "the ScheduledWorkflow disabled",
    )
    stop_run(kfp_client, custom, run_ids[1])  # ended: a live schedule would fire again now
    count = len(workflows(custom, selector))
    time.sleep(20)  # longer than one period
    assert len(workflows(custom, selector)) == count

    code, out, err = fmnist("schedule", "--host", kfp_host, "--delete", recurring_id)
    assert code == 0 and out.strip() == f"deleted recurring run {recurring_id}", err
    wait_for(
        lambda: (
            not [
                s
                for s in custom.list_namespaced_custom_object(
                    "kubeflow.org", "v1beta1", KFP_NAMESPACE, "scheduledworkflows"
                )["items"]
                if s["metadata"]["name"] == swf_name
            ]
        ),
        10,
        "the ScheduledWorkflow deleted",
    )


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def one_line_error(code: int, out: str, err: str) -> str:
    """The error of a failed command: exit 2, one line on stderr, no traceback."""
    assert code == 2, (code, out, err)
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def test_bad_input_gets_one_clear_line(kfp_host, kfp_client, custom, cluster_state):
    """Wrong input: exit code 2 and one line naming the problem, never a traceback.

    - A workspace without a storage class: backend/src/apiserver/server/run_server.go
      CreateRun -> backend/src/apiserver/template/v2_template.go RunWorkflow ->
      backend/src/v2/compiler/argocompiler/argo.go GetWorkspacePVC refuses it with
      "workspace PVC spec must specify storageClassName" (a 500 whose message goes on with
      a Go stack trace, backend/src/common/util/error.go); `fmnist submit` shows the first
      line.
    - A parameter of the wrong type and an unknown one: `fmnist` refuses them before upload
      (cli/package_inputs.py parse_params), and so would the server
      (v2_template.go validatePipelineJobInputs: "requires type double or integer",
      "parameter(s) provided are not required by pipeline"). The server takes 1.5 for an
      integer parameter (it checks only "number"); `fmnist` does not.
    - An unreachable host, and a server that is not KFP (a controller's health port):
      cli/server.py check_host.
    """
    base = ["submit", "--host", kfp_host, "--workspace-storage-class", STORAGE_CLASS]
    line = one_line_error(*fmnist(*base, "--param", "batch_size=many"))
    assert "--param batch_size: 'many' is not an integer" in line
    line = one_line_error(*fmnist(*base, "--param", "batch_size=1.5"))
    assert "--param batch_size: '1.5' is not an integer" in line
    line = one_line_error(*fmnist(*base, "--param", "no_such_parameter=1"))
    assert "unknown pipeline parameter 'no_such_parameter'" in line
    uploaded = unique("fmnist-refusals")
    _, run_id = submit(kfp_host, "fashion-mnist", uploaded)
    stop_run(kfp_client, custom, run_id)
    server = _server_refusal(kfp_client, uploaded, {"batch_size": "many"})
    assert "input parameter batch_size requires type double or integer" in server
    server = _server_refusal(kfp_client, uploaded, {"no_such_parameter": 1})
    assert "parameter(s) provided are not required by pipeline: no_such_parameter" in server

    # The server's own reason, through the command: say the server is 2.17 (which would
    # take the cluster's default class), so the workspace goes without a storage class.
    name = unique("fmnist-noclass")
    line = one_line_error(
        *fmnist("submit", "--host", kfp_host, "--kfp-version", "2.17.0", "--pipeline-name", name)
    )
    assert line == (
        f"fmnist submit: error: Kubeflow Pipelines at {kfp_host} refused: 500 Internal Server "
        "Error: Internal error: workspace PVC spec must specify storageClassName"
    )

    port = free_port()  # nothing listens there
    line = one_line_error(*fmnist("submit", "--host", f"http://127.0.0.1:{port}"))
    assert f"cannot reach Kubeflow Pipelines at http://127.0.0.1:{port}: " in line

    health = next(p["health"] for p in cluster_state["processes"] if p.get("health"))
    host = health.rsplit("/", 1)[0]  # http://127.0.0.1:PORT of a controller's health server
    line = one_line_error(*fmnist("submit", "--host", host))
    assert line == f"fmnist submit: error: Kubeflow Pipelines at {host} answered 404"


def _server_refusal(kfp_client, pipeline: str, params: dict) -> str:
    """The first line of the API server's refusal of a run of ``pipeline`` with ``params``."""
    from kfp_server_api.exceptions import ApiException

    pipeline_id = kfp_client.get_pipeline_id(pipeline)
    version = kfp_client.list_pipeline_versions(pipeline_id, page_size=1).pipeline_versions[0]
    experiment = kfp_client.create_experiment(unique("fmnist-refused")).experiment_id
    with pytest.raises(ApiException) as refused, contextlib.redirect_stdout(io.StringIO()):
        kfp_client.run_pipeline(
            experiment_id=experiment,
            job_name="refused",
            pipeline_id=pipeline_id,
            version_id=version.pipeline_version_id,
            params=params,
        )
    assert refused.value.status == 400
    return json.loads(refused.value.body)["message"].splitlines()[0]


def test_an_older_backend_runs_the_pvc_variant(kfp_legacy_host, custom, core, no_earlier_predictor):
    """`fmnist submit --wait` to KFP 2.5 (Kubeflow 1.10) sends the pvc variant, and 2.5 runs
    it to the end on real pods (Argo v3.5.14): the driver creates the run's PVC, the steps and
    the PyTorchJob use it, the model is deployed, and deletepvc deletes the PVC.

    Paths in kubeflow/pipelines at tag 2.5.0:

    - backend/src/apiserver/main.go: healthz reports TAG_NAME, from which cli/backends.py
      picks the ``pvc`` variant (no run workspace before 2.15).
    - backend/src/v2/compiler/argocompiler/argo.go (dummyImages) and container.go: the
      kfp-kubernetes CreatePVC/DeletePVC tasks (images ``argostub/createpvc``,
      ``argostub/deletepvc``) are driver tasks without an executor; the driver creates and
      deletes the PVC itself (backend/src/v2/driver/driver.go createPVC, deletePVC) with the
      task's inputs: our class, size, access mode. deletepvc waits for createpvc and the
      evaluate-and-deploy tail to succeed.
    - The train task mounts the PVC named by createpvc's output and tolerates the GPU taint
      (its ``kubernetes-comp-train`` config, applied by the driver).

    The run is kfp_helpers.SLICE.
    """
    started = datetime.now(timezone.utc).replace(microsecond=0)
    code, out, run_id = run_pipeline(kfp_legacy_host, "fashion-mnist", SLICE, timeout=1100)
    assert code == 0 and out.rstrip().endswith(f"run {run_id}: SUCCEEDED"), out
    found = wait_for(
        lambda: custom.list_cluster_custom_object(
            "argoproj.io", "v1alpha1", "workflows", label_selector=f"{RUN_ID_LABEL}={run_id}"
        )["items"],
        30,
        f"the Workflow of run {run_id}",
    )
    (workflow,) = found
    spec = workflow["spec"]
    assert not spec.get("volumeClaimTemplates")  # no run workspace: the pipeline's own PVC
    templates = {t["name"]: t for t in spec["templates"]}
    assert templates["system-container-driver"]["container"]["image"].endswith(":2.5.0")
    tasks, arguments = dag_tasks(workflow), workflow_arguments(workflow)

    def implementation(task: dict) -> dict:
        key = re.fullmatch(r"\{\{workflow\.parameters\.(.+)\}\}", task_parameter(task, "container"))
        return json.loads(arguments[key[1]])

    create, delete = tasks["createpvc"], tasks["deletepvc"]
    for task, image in ((create, "argostub/createpvc"), (delete, "argostub/deletepvc")):
        assert task["template"] == "system-container-driver"  # no executor: the driver acts
        assert implementation(task)["image"] == image
    inputs = json.loads(task_parameter(create, "task"))["inputs"]["parameters"]
    assert {k: v["runtimeValue"]["constant"] for k, v in inputs.items()} == {
        "access_modes": ["ReadWriteMany"],
        "pvc_name_suffix": "-fmnist-workspace",
        "size": "5Gi",
        "storage_class_name": STORAGE_CLASS,
    }
    assert delete["depends"] == "createpvc.Succeeded && evaluate-and-deploy.Succeeded"
    deleted = json.loads(task_parameter(delete, "task"))["inputs"]["parameters"]["pvc_name"]
    assert deleted["taskOutputParameter"] == {
        "outputParameterKey": "name",
        "producerTask": "createpvc",
    }

    train = json.loads(arguments["kubernetes-comp-train"])
    assert train["tolerations"] == [GPU_TOLERATION]
    (mount,) = train["pvcMount"]
    assert mount["mountPath"] == "/fmnist-workspace"  # pods.OWN_WORKSPACE_MOUNT_PATH
    assert mount["pvcNameParameter"]["taskOutputParameter"]["producerTask"] == "createpvc"
    assert "createpvc.Succeeded" in tasks["train-driver"]["depends"]
    status = {
        n["displayName"]: n["phase"]
        for n in workflow_now(custom, workflow)["status"]["nodes"].values()
    }
    assert status["createpvc"] == status["deletepvc"] == status["deploy"] == "Succeeded", status
    # deletepvc deleted the run's PVC; the volume is freed once the pods that mounted it are
    # gone (the PyTorchJob's, at its TTL): pvc-protection keeps it until then.
    claims = [
        c
        for c in core.list_namespaced_persistent_volume_claim(LEGACY_NAMESPACE).items
        if c.metadata.name.endswith("-fmnist-workspace")
        and c.metadata.creation_timestamp >= started
    ]
    assert len(claims) == 1 and claims[0].metadata.deletion_timestamp, claims


def workflow_now(custom, workflow: dict) -> dict:
    """The Workflow as the apiserver has it now."""
    meta = workflow["metadata"]
    return custom.get_namespaced_custom_object(
        "argoproj.io", "v1alpha1", meta["namespace"], "workflows", meta["name"]
    )
