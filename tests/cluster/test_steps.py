"""The project's own steps against the real controllers, acting as the pipeline's account.

Each test calls a step's ``python_func`` as the KFP launcher would, with the
``pipeline-runner`` ServiceAccount's token (``as_pipeline``): the apiserver enforces
exactly k8s/rbac. Nothing is faked; kwok plays the pods (tools/controlplane/config/
pod-stages.yaml): a container env ``FMNIST_TEST_FAIL=true`` makes a job's pods fail and
``FMNIST_TEST_RUN_DURATION`` sets how long they run — the train step passes its task's env
on to the job, as KFP's task-config passthrough does. The run workspace is an emptyDir
here: KFP creates the real PVC, and its mount reaching the job is tested on the compiled IR.
"""

from __future__ import annotations

import os
import signal
import threading
import uuid
from pathlib import Path

import kubernetes
import pytest
from cluster_helpers import condition, wait_for
from kfp import dsl
from step_helpers import job_name, pytorchjob, run_train, workload_of

from components.runtime import volumes
from components.runtime.job_poll import JobFailed
from components.runtime.signals import Terminated
from components.runtime.watchers import kueue
from components.runtime.watchers.kueue import JobStuck
from components.specs.params import Serving, TrainingJob
from components.specs.pods import GPU_TOLERATION, WorkPaths
from components.steps.deploy import deploy
from components.steps.tune import tune

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("quick_polls")]
# Pod level: seccomp and the fresh-volume group; runAsNonRoot is on our containers only, so
# that root containers the controllers inject are not refused (components/specs/pods.py).
RESTRICTED_POD = {
    "fsGroup": 10001,
    "fsGroupChangePolicy": "OnRootMismatch",
    "seccompProfile": {"type": "RuntimeDefault"},
}


def test_train_on_gpus_goes_through_kueue_and_the_operator(
    as_pipeline, namespace, custom, core, workspace, capsys
):
    """job_api=auto on a cluster serving both APIs picks PyTorchJob; Kueue admits it on the GPU
    flavour (kueue v0.19.2 pkg/scheduler/flavorassigner) and puts the flavour's node labels into
    the pods; the Training Operator (v1.9.4 pkg/controller.v1/pytorch/envvar.go) sets PET_*."""
    run_id = f"gpu-{uuid.uuid4().hex[:8]}"
    model = run_train(workspace, run_id, workers=2, gpus_per_worker=1, nproc_per_node=1)
    assert (model / "model.pt").read_bytes() == b"weights"
    job = pytorchjob(custom, namespace, job_name(run_id))
    assert condition(job, "Succeeded") == "True"
    workload = workload_of(custom, namespace, job["metadata"]["uid"])
    assert workload["status"]["admission"]["clusterQueue"] == "fmnist-gpu"
    for assignment in workload["status"]["admission"]["podSetAssignments"]:
        assert set(assignment["flavors"].values()) == {"fmnist-gpu"}
        assert assignment["resourceUsage"]["nvidia.com/gpu"] == "1"
    pods = core.list_namespaced_pod(
        namespace, label_selector=f"training.kubeflow.org/job-name={job_name(run_id)}"
    ).items
    # cleanPodPolicy Running: a Worker still running when the Master succeeded is deleted
    assert "master" in {pod.metadata.labels["training.kubeflow.org/replica-type"] for pod in pods}
    for pod in pods:
        spec = kubernetes.client.ApiClient().sanitize_for_serialization(pod.spec)
        container = spec["containers"][0]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
        assert spec["nodeSelector"]["nvidia.com/gpu.present"] == "true"
        assert GPU_TOLERATION in spec["tolerations"]
        assert {"PET_NNODES", "PET_NODE_RANK", "PET_MASTER_ADDR"} <= {
            e["name"] for e in container["env"]
        }
        assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]
        assert spec["securityContext"] == RESTRICTED_POD
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        assert container["securityContext"]["runAsNonRoot"] is True
        assert pod.status.phase == "Succeeded"
    out = capsys.readouterr().out
    assert f"created PyTorchJob {namespace}/{job_name(run_id)} (queue fmnist-gpu" in out
    assert "{metricName: accuracy" in out  # rank 0's log (tools/controlplane/config/trainer.log)


def test_a_cpu_job_waits_for_cpu_quota_instead_of_taking_the_gpu_flavour(
    as_pipeline, namespace, custom, workspace, capsys
):
    """With the CPU ClusterQueue's 8 CPUs in use, a CPU job stays suspended (Kueue says why),
    is never admitted on the GPU flavour, and is deleted at the step's timeout."""
    busy = f"busy-{uuid.uuid4().hex[:6]}"
    thread = threading.Thread(
        target=run_train,
        args=(workspace, busy, {"FMNIST_TEST_RUN_DURATION": "60s"}),
        kwargs={"workers": 4, "cpu": "2", "timeout_seconds": 120},
        daemon=True,
    )
    thread.start()
    wait_for(
        lambda: condition(pytorchjob(custom, namespace, job_name(busy)) or {}, "Running") == "True",
        60,
        "the busy job to run",
    )
    waiting_run = f"wait-{uuid.uuid4().hex[:6]}"
    with pytest.raises(TimeoutError, match="did not finish within 25 s"):
        run_train(workspace, waiting_run, workers=1, cpu="2", timeout_seconds=25)
    assert "is suspended by Kueue, waiting for admission" in capsys.readouterr().out
    assert pytorchjob(custom, namespace, job_name(waiting_run)) is None  # deleted at the timeout
    thread.join(150)


def test_trainjob_follows_the_trainer_generation(
    as_pipeline, namespace, custom, workspace, cluster_state, monkeypatch
):
    """Trainer v2.3.0 runs the TrainJob (runtimePatches) and the step deletes it once done;
    Trainer v2.1.0 under Kueue v0.19.2 never starts it (Kueue writes spec.runtimePatches:
    kueue v0.19.2 pkg/controller/jobs/trainjob/trainjob_controller.go), and the step fails
    with that reason instead of waiting out its timeout, freeing the quota."""
    monkeypatch.setattr(kueue, "STUCK_SECONDS", 10)
    run_id = f"tj-{uuid.uuid4().hex[:8]}"
    if cluster_state.get("trainer") == "v2.1.0":
        with pytest.raises(JobStuck, match="admitted by Kueue .* but is still suspended"):
            run_train(workspace, run_id, workers=2, job_api="trainjob")
    else:
        model = run_train(workspace, run_id, workers=2, job_api="trainjob")
        assert (model / "model.pt").is_file()

    def gone():
        listing = custom.list_namespaced_custom_object(
            "trainer.kubeflow.org", "v1alpha1", namespace, "trainjobs"
        )
        return not listing["items"]

    wait_for(gone, 30, "the TrainJob to be deleted")


def test_a_failing_job_fails_the_step_with_its_conditions(
    as_pipeline, namespace, custom, workspace
):
    """Failing containers restart in place (restartPolicy OnFailure) until the Training
    Operator's backoffLimit (v1.9.4 pkg/core/job.go PastBackoffLimit) fails the job; the
    step then raises with the conditions and keeps the job for inspection."""
    run_id = f"fail-{uuid.uuid4().hex[:8]}"
    with pytest.raises(JobFailed) as error:
        run_train(workspace, run_id, {"FMNIST_TEST_FAIL": "true"}, workers=1)
    assert "Failed=True" in str(error.value)
    assert condition(pytorchjob(custom, namespace, job_name(run_id)), "Failed") == "True"  # kept


def test_sigterm_and_the_timeout_delete_the_job(as_pipeline, namespace, custom, workspace):
    """SIGTERM to the step (KFP's Terminate, an eviction) and the step's own timeout both
    delete the job, so it frees its quota and GPUs."""
    slow = {"FMNIST_TEST_RUN_DURATION": "120s"}
    terminated = f"term-{uuid.uuid4().hex[:6]}"
    timer = threading.Timer(15, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    with pytest.raises(Terminated):
        run_train(workspace, terminated, slow, workers=1)
    timer.join()
    timed_out = f"time-{uuid.uuid4().hex[:6]}"
    with pytest.raises(TimeoutError):
        run_train(workspace, timed_out, slow, workers=1, timeout_seconds=15)
    for run_id in (terminated, timed_out):
        wait_for(
            lambda run_id=run_id: pytorchjob(custom, namespace, job_name(run_id)) is None,
            30,
            f"{run_id}'s job to go",
        )


def test_tune_creates_an_experiment_whose_trials_carry_the_values(
    as_pipeline, namespace, custom, workspace
):
    """Katib v0.19.0's webhook accepts the Experiment and its controller creates trials whose
    PyTorchJobs carry the substituted lr and epochs (pkg/controller.v1beta1/trial/
    trial_controller_util.go). Without real pods no metrics are collected, so the sweep never
    ends: the step's timeout then deletes the Experiment, as it should.

    The suggested values are not checked against our range: the harness runs one goptuna
    suggestion process for every Experiment (Katib runs one per Experiment), and goptuna keeps
    the search space of the first Experiment it serves (katib v0.19.0
    pkg/suggestion/v1beta1/goptuna/service.go, initStudyAndSearchSpaceAtFirstRun). The
    Experiment's own search space is checked instead."""
    from components.specs.sweep import Sweep

    # random: the harness runs Katib's goptuna suggestion service (grid is another image)
    sweep = Sweep(
        algorithm="random",
        lr_min=0.001,
        lr_max=0.003,
        epochs_min=1,
        epochs_max=1,
        max_trials=2,
        seed=7,
        sweep_timeout_seconds=60,
    )
    config = dsl.TaskConfig(
        volumes=[{"name": "kfp-workspace", "emptyDir": {}}],
        volume_mounts=[{"name": "kfp-workspace", "mountPath": str(workspace)}],
    )
    errors = []
    arguments = dict(
        dataset=dsl.Dataset(uri=str(workspace.parent / "dataset")),
        job=TrainingJob(workers=1).to_dict(),
        sweep=sweep.to_dict(),
        workspace_path=str(workspace),
        run_id="tune-run-1",
        task_config=config,
    )
    thread = threading.Thread(target=_capture, args=(errors, tune.python_func), kwargs=arguments)
    thread.start()
    try:
        check_trials(custom, namespace)
    finally:
        thread.join(150)
    # No metrics without real pods: Katib fails the trials, or the sweep times out (and the
    # step deletes its Experiment).
    (error,) = errors
    assert type(error).__name__ in ("ExperimentFailed", "TimeoutError"), error
    if isinstance(error, TimeoutError):
        wait_for(
            lambda: (
                not custom.list_namespaced_custom_object(
                    "kubeflow.org", "v1beta1", namespace, "experiments"
                )["items"]
            ),
            30,
            "the Experiment to be deleted",
        )


def check_trials(custom, namespace: str) -> None:
    """The Experiment has our search space; each trial's PyTorchJob carries its values."""
    (experiment,) = wait_for(
        lambda: custom.list_namespaced_custom_object(
            "kubeflow.org", "v1beta1", namespace, "experiments"
        )["items"],
        60,
        "the Experiment",
    )
    spaces = {
        p["name"]: (p["feasibleSpace"]["min"], p["feasibleSpace"]["max"])
        for p in experiment["spec"]["parameters"]
    }  # the webhook adds a default distribution; the range is ours
    assert spaces == {"lr": ("0.001", "0.003"), "epochs": ("1", "1")}

    def trial_jobs():
        items = custom.list_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs")
        return items["items"] if len(items["items"]) >= 2 else None

    jobs = wait_for(trial_jobs, 150, "two trial PyTorchJobs")
    assert all(job["metadata"]["name"].startswith("fmnist-tune-tunerun1-") for job in jobs)
    trials = custom.list_namespaced_custom_object("kubeflow.org", "v1beta1", namespace, "trials")
    assigned = {
        trial["metadata"]["name"]: {
            item["name"]: item["value"] for item in trial["spec"]["parameterAssignments"]
        }
        for trial in trials["items"]
    }
    for job in jobs:
        values = assigned[job["metadata"]["name"]]  # a trial's job has the trial's name
        args = master_args(job)
        assert f"--lr={values['lr']}" in args and f"--epochs={values['epochs']}" in args


def master_args(job: dict) -> list[str]:
    return job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["args"]


def _capture(errors, function, **kwargs):
    try:
        function(**kwargs)
    except BaseException as error:  # noqa: BLE001 - the test reads it
        errors.append(error)


@pytest.fixture
def model_store(namespace, core, tmp_path, monkeypatch):
    """The model PVC, bound to a pre-made volume (kube-controller-manager's PV binder)."""
    volume = f"fmnist-models-{namespace}"
    core.create_persistent_volume(
        {
            "metadata": {"name": volume},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "",
                "hostPath": {"path": "/tmp"},
                "claimRef": {"namespace": namespace, "name": "fmnist-models"},
            },
        }
    )
    core.create_namespaced_persistent_volume_claim(
        namespace,
        {
            "metadata": {"name": "fmnist-models"},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "",
                "volumeName": volume,
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    )
    monkeypatch.setattr(volumes, "MODEL_STORE", str(tmp_path / "store"))
    yield
    core.delete_persistent_volume(volume)


def run_deploy(workspace: Path, run_id: str) -> str:
    return deploy.python_func(
        model=dsl.Model(uri=str(WorkPaths.under(workspace).model_dir)),
        dataset=dsl.Dataset(uri=str(workspace.parent / "dataset")),
        serving=Serving(serving_timeout_seconds=180).to_dict(),
        target="cluster",
        run_id=run_id,
    )


def test_deploy_and_redeploy_with_the_mode_name_this_kserve_knows(
    as_pipeline, namespace, custom, api_client, workspace, model_store, cluster_state
):
    """KServe v0.15.2 (Kubeflow 1.11) takes RawDeployment, >= 0.16 Standard (found from the served
    schema); the predictor Deployment carries STORAGE_URI and runs restricted; the pod mutator
    mounts the PVC at /mnt/models (kserve v0.15.2 pkg/webhook/admission/pod/
    storage_initializer_injector.go); a redeploy waits for the Deployment with the new model and
    is not rejected by the mode check (inference_service_validation.go)."""
    url = run_deploy(workspace, "run-1")
    assert url
    isvc = custom.get_namespaced_custom_object(
        "serving.kserve.io", "v1beta1", namespace, "inferenceservices", "fashion-mnist"
    )
    legacy = cluster_state.get("kserve") == "v0.15.2"
    assert isvc["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] == (
        "RawDeployment" if legacy else "Standard"
    )
    run_deploy(workspace, "run-2")
    apps = kubernetes.client.AppsV1Api(api_client)
    deployment = apps.read_namespaced_deployment("fashion-mnist-predictor", namespace)
    container = next(
        c for c in deployment.spec.template.spec.containers if c.name == "kserve-container"
    )
    uri = "pvc://fmnist-models/fashion-mnist/run-2"
    assert {e.name: e.value for e in container.env}["STORAGE_URI"] == uri
    core = kubernetes.client.CoreV1Api(api_client)
    pods = core.list_namespaced_pod(
        namespace, label_selector="serving.kserve.io/inferenceservice=fashion-mnist"
    ).items
    source = "internal.serving.kserve.io/storage-initializer-sourceuri"
    new = [p for p in pods if (p.metadata.annotations or {}).get(source) == uri]
    assert new
    predictor = next(c for c in new[0].spec.containers if c.name == "kserve-container")
    # runAsNonRoot on our container only: a pod-wide one binds the root containers controllers
    # inject (components/specs/pods.py)
    assert predictor.security_context.run_as_non_root
    assert not new[0].spec.security_context.run_as_non_root
    assert {m.mount_path for m in predictor.volume_mounts} >= {"/mnt/models"}
    # the pod mutator points STORAGE_URI at the mount: pods are known by the annotation
    assert {e.name: e.value for e in predictor.env}["STORAGE_URI"] == "/mnt/models"


def test_the_step_carries_on_across_an_apiserver_restart_and_a_retry_adopts(
    as_pipeline, namespace, custom, workspace, apiserver, capsys
):
    """The kube-apiserver goes away for a while during the step's polls: connection refused,
    then 403s while its RBAC authorizer fills its caches. The step waits both out and
    returns the model; the same step run again for the same run adopts the finished job.
    Last in the file: the controllers take up to ~30 s to reconnect (client-go backoff)."""
    run_id = f"rst-{uuid.uuid4().hex[:8]}"
    outcome = {}

    def step():
        try:
            outcome["model"] = run_train(
                workspace, run_id, {"FMNIST_TEST_RUN_DURATION": "25s"}, workers=1
            )
        except BaseException as error:  # noqa: BLE001 - reported below
            outcome["error"] = error

    thread = threading.Thread(target=step)
    thread.start()
    wait_for(
        lambda: (
            condition(pytorchjob(custom, namespace, job_name(run_id)) or {}, "Running") == "True"
        ),
        60,
        "the job to run",
    )
    apiserver.restart(down_seconds=5)
    thread.join(240)
    error = outcome.get("error")
    assert error is None, getattr(error, "body", error)
    assert "transient API error" in capsys.readouterr().out
    run_train(workspace, run_id, {"FMNIST_TEST_RUN_DURATION": "25s"}, workers=1)  # retried step
    assert f"adopted PyTorchJob {namespace}/{job_name(run_id)}" in capsys.readouterr().out
