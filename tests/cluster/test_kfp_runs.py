"""The compiled pipelines, run for real on a Kubeflow Pipelines 2.15 backend over real pods.

`fmnist submit --wait` uploads the pipeline and follows the run; the KFP API server compiles it
into an Argo Workflow, Argo v3.7.3 runs every driver and step in a real pod on the tier's real
node (the ``kubeflow`` namespace carries the real nodes' annotations), the train step creates
a real PyTorchJob or TrainJob whose pods train with gloo, the deploy step's InferenceService
becomes a real predictor pod. Nothing is played by kwok. The backend is attached by hand
(docs/development.md, "Running the cluster test tier"), hence the ``kfp`` marker.

Upstream behaviour relied on, in kubeflow/pipelines at tag 2.15.0 unless said otherwise:
- backend/src/v2/compiler/argocompiler/container.go: each step is a driver pod, then an
  executor pod whose ``kfp-launcher`` init container (requests 100m CPU) copies the launcher
  into the step's image; the launcher uploads outputs under the pipeline root
  (backend/src/v2/config/env.go: ``minio://mlpipeline/v2/artifacts`` by default) and
  records them in ML Metadata (backend/src/v2/metadata/client.go), where the run is a
  ``system.PipelineRun`` context named by the run id.
- backend/src/apiserver/server/run_server.go and the persistence agent
  (backend/src/agent/persistence/worker/workflow_saver.go): the run's state and every task's
  state and times come back through the API from the Workflow's status.
- argo-workflows v3.7.3 workflow/controller/operator.go: a failed pod fails its DAG task and the
  Workflow; ``terminate`` (resource_manager.go TerminateRun) makes Argo stop every pod.

The runs are kfp_helpers.SLICE: a slice of the data, sized for the real nodes' CPUs.
"""

from __future__ import annotations

import ast
import json
import math
import re
import time

import numpy as np
import pytest
from cluster_helpers import wait_for
from kfp_helpers import (
    KFP_NAMESPACE,
    MODEL_NAME,
    SLICE,
    WORKFLOW_LABEL,
    run_pipeline,
    workflow_of_run,
)
from real_pods import PodRecorder, harness_node, pods_of, running_predictor, v1_predictions

pytestmark = [pytest.mark.cluster, pytest.mark.kfp]

JOB_PODS = {  # label selectors of a training job's pods
    "pytorchjob": "training.kubeflow.org/job-name",
    "trainjob": "jobset.sigs.k8s.io/jobset-name",
}


def steps_of(kfp_client, run_id: str) -> dict[str, object]:
    """The run's step tasks by name, from its task details in the KFP API (the drivers and
    the ``executor`` wrappers inside each step left out)."""
    run = kfp_client.get_run(run_id)
    return {
        t.display_name: t
        for t in run.run_details.task_details
        if t.display_name
        and not t.display_name.endswith("-driver")
        and t.display_name != "executor"
    }


def task_states(kfp_client, run_id: str) -> dict[str, str]:
    """Each step's state, by name."""
    return {name: task.state for name, task in steps_of(kfp_client, run_id).items()}


def task_times(kfp_client, run_id: str) -> dict[str, float]:
    """Seconds each step took, start to end, by name."""
    return {
        name: round((task.end_time - task.start_time).total_seconds())
        for name, task in steps_of(kfp_client, run_id).items()
        if task.start_time and task.end_time
    }


def running_pods(core, workflow: str) -> list[str]:
    """Pods of the Workflow (and of the jobs its steps made) still running or pending."""
    pods = pods_of(core, KFP_NAMESPACE, f"{WORKFLOW_LABEL}={workflow}")
    pods += [p for s in JOB_PODS.values() for p in pods_of(core, KFP_NAMESPACE, s)]
    return [p.metadata.name for p in pods if p.status.phase in ("Pending", "Running")]


def step_pod_log(core, workflow: dict, step: str) -> str:
    """The ``main`` container's log of ``step``'s executor pod (Argo's node name says which)."""
    name = workflow["metadata"]["name"]
    for pod in pods_of(core, KFP_NAMESPACE, f"{WORKFLOW_LABEL}={name}"):
        node = pod.metadata.annotations.get("workflows.argoproj.io/node-name", "")
        if node.endswith(f".{step}.executor"):
            return core.read_namespaced_pod_log(pod.metadata.name, KFP_NAMESPACE, container="main")
    raise AssertionError(f"no executor pod of step {step} in {name}")


def artifacts_by_name(kfp_metadata, run_id: str) -> dict:
    return {a.display_name: a for a in kfp_metadata.run_artifacts(run_id)}


def object_of(kfp_object_store, uri: str) -> bytes:
    """The object at an artifact's ``minio://BUCKET/KEY`` URI."""
    bucket, _, key = uri.removeprefix("minio://").partition("/")
    answer = kfp_object_store.get_object(bucket, key)
    try:
        return answer.read()
    finally:
        answer.close()
        answer.release_conn()


def check_served(core, run_id: str, known_images) -> float:
    """The run's predictor pod answers v1 requests from the run's model; returns its accuracy."""
    images, labels = known_images
    pod = running_predictor(core, KFP_NAMESPACE, MODEL_NAME)
    assert pod.spec.node_name in harness_node().NAMES
    (mount,) = [m for m in pod.spec.containers[0].volume_mounts if m.mount_path == "/mnt/models"]
    assert mount.sub_path == f"{MODEL_NAME}/{run_id}"  # this run's model, not a previous one's
    predicted = np.array([p["label"] for p in v1_predictions(pod, MODEL_NAME, images)])
    return float((predicted == labels).mean())


@pytest.fixture(autouse=True)
def room_on_the_node(no_earlier_predictor):
    """Every run here trains: the node needs the CPU an earlier run's predictor holds."""


@pytest.fixture
def known_images(packed_small):
    """The first 50 real test images and their labels."""
    from trainer.data import load_packed

    test = load_packed(packed_small).test
    return np.array(test.images[:50]), np.array(test.labels[:50])


@pytest.mark.parametrize("job_api", ["pytorchjob", "trainjob"])
def test_the_default_pipeline_runs_to_a_served_model(
    kfp_host, kfp_client, kfp_metadata, kfp_object_store, custom, core, known_images, job_api
):
    """pack -> train (real Master and Worker, or TrainJob nodes) -> evaluate -> gate -> deploy.

    - The run Succeeded, and so did every step, through the KFP API.
    - The training job's two pods ran on the real nodes and exited 0.
    - ML Metadata has the run's Metrics (accuracy, loss), the ClassificationMetrics
      (a 10-class confusion matrix over the 500 test images) and the HTML report, whose
      bytes are in the object store at its URI.
    - The predictor pod serves this run's model and classifies real test images.
    """
    started = time.monotonic()
    with PodRecorder(core, KFP_NAMESPACE, JOB_PODS[job_api]) as recorded:
        code, out, run_id = run_pipeline(kfp_host, "fashion-mnist", SLICE | {"job_api": job_api})
    assert code == 0 and out.rstrip().endswith(f"run {run_id}: SUCCEEDED"), out
    states = task_states(kfp_client, run_id)
    steps = {"validate-training", "validate-serving", "pack-dataset", "train", "evaluate", "deploy"}
    assert steps <= set(states) and {states[s] for s in steps} == {"SUCCEEDED"}, states

    job_pods = [
        p for p in recorded.pods.values() if run_id.replace("-", "")[:20] in p.metadata.name
    ]
    assert len(job_pods) == 2, sorted(recorded.pods)
    for pod in job_pods:
        assert pod.spec.node_name in harness_node().NAMES
        main = next(s for s in pod.status.container_statuses if s.name in ("pytorch", "node"))
        assert main.state.terminated and main.state.terminated.exit_code == 0, pod.metadata.name

    found = artifacts_by_name(kfp_metadata, run_id)
    metrics = found["metrics"]
    assert metrics.type == "system.Metrics"
    assert 0.5 < metrics.properties["accuracy"] <= 1 and metrics.properties["loss"] > 0
    matrix = found["confusion_matrix"]
    assert matrix.type == "system.ClassificationMetrics"
    rows = matrix.properties["confusionMatrix"]["struct"]["rows"]
    assert len(rows) == 10 and sum(sum(r["row"]) for r in rows) == 500
    html = found["report_html"]
    assert html.type == "system.HTML"
    page = object_of(kfp_object_store, html.uri).decode()
    assert page.lstrip().lower().startswith("<!doctype html") and "accuracy" in page.lower()

    accuracy = check_served(core, run_id, known_images)
    assert accuracy >= 0.5, accuracy  # a uniform guess scores 0.1
    workflow = workflow_of_run(custom, run_id)
    assert not running_pods(core, workflow["metadata"]["name"])
    print(
        f"{job_api}: run {run_id} in {time.monotonic() - started:.0f} s; "
        f"steps {json.dumps(task_times(kfp_client, run_id))}; served accuracy {accuracy:.2f}"
    )


def test_a_failing_training_fails_the_run_with_its_log(kfp_host, kfp_client, custom, core):
    """A learning rate that makes the loss explode: the trainer exits 1 (trainer/train.py
    Diverged), the PyTorchJob fails, the train step fails with the training log's tail in its
    own log, the run ends Failed, evaluate and deploy never run, and no pod is left running.
    """
    diverging = SLICE | {"lr": "1000000", "optimizer": "sgd", "momentum": "0"}
    code, out, run_id = run_pipeline(kfp_host, "fashion-mnist", diverging)
    assert code == 1 and out.rstrip().endswith(f"run {run_id}: FAILED"), out
    states = task_states(kfp_client, run_id)
    assert states["train"] == "FAILED" and states["pack-dataset"] == "SUCCEEDED", states
    assert "evaluate" not in states or states["evaluate"] in ("SKIPPED", None), states
    workflow = workflow_of_run(custom, run_id)
    log = step_pod_log(core, workflow, "train")
    assert re.search(r"--- log of fmnist-\w+-master-0", log), log[-3000:]
    assert "diverged" in log.lower(), log[-3000:]
    wait_for(lambda: not running_pods(core, workflow["metadata"]["name"]), 60, "no pod running")
    print(f"failed run {run_id}: train log tail:\n{log[-1500:]}")


def test_the_tune_pipeline_trains_with_the_best_trial(kfp_host, kfp_client, custom, core):
    """A Katib Experiment of two trials (real PyTorchJobs with Katib's metrics collector),
    then the final training with the best trial's lr and epochs, evaluate and deploy.
    """
    params = SLICE | {
        "lr_min": "0.001",
        "lr_max": "0.003",
        "epochs_min": "1",
        "epochs_max": "1",
        "max_trials": "2",
        "parallel_trials": "1",
        "workers": "1",
        "seed": "7",
        "sweep_timeout_seconds": "900",
    }
    params.pop("epochs")
    with PodRecorder(core, KFP_NAMESPACE, JOB_PODS["pytorchjob"]) as recorded:
        code, out, run_id = run_pipeline(kfp_host, "fashion-mnist-tune", params)
    assert code == 0 and out.rstrip().endswith(f"run {run_id}: SUCCEEDED"), out
    states = task_states(kfp_client, run_id)
    assert {states[s] for s in ("tune", "train", "evaluate", "deploy")} == {"SUCCEEDED"}, states
    workflow = workflow_of_run(custom, run_id)
    tune_log = step_pod_log(core, workflow, "tune")
    best = re.search(r"^best trial \S+: (\{.*\}), accuracy", tune_log, re.M)
    assert best, tune_log[-3000:]
    values = ast.literal_eval(best[1])
    trial_label = "katib.kubeflow.org/trial"
    trials = {
        p.metadata.labels[trial_label]
        for p in recorded.pods.values()
        if trial_label in p.metadata.labels
    }
    assert len(trials) == 2, sorted(recorded.pods)
    final = f"fmnist-{run_id.replace('-', '')[:20]}-"  # the train step's job, after the sweep
    (master,) = [p for p in recorded.pods.values() if p.metadata.name.startswith(final + "master")]
    words = " ".join(
        (master.spec.containers[0].command or []) + (master.spec.containers[0].args or [])
    )
    assert math.isclose(float(re.search(r"--lr[= ]([0-9.e+-]+)", words)[1]), values["lr"]), words
    assert int(re.search(r"--epochs[= ](\d+)", words)[1]) == values["epochs"] == 1, words
    print(f"tune run {run_id}: steps {json.dumps(task_times(kfp_client, run_id))}")
