"""MultiKueue for real: the train step's jobs run on worker clusters and report back.

The tier's manager (the main cluster) and its two workers (tools/controlplane/harness/
workers.py) are separate control planes, each with Kueue, JobSet, the Training Operator and
Trainer; kwok plays the pods on each. The kit is applied as docs/multicluster.md says:
k8s/kueue and k8s/kueue/multikueue on the manager, k8s/kueue and k8s/kueue/multikueue/worker
on each worker, the workers' kubeconfigs in Secrets (made by the harness).

What is relied on (sigs.k8s.io/kueue v0.19.2):
- Kueue's webhook marks a job whose queue has the MultiKueue check ``managedBy:
  kueue.x-k8s.io/multikueue`` (pkg/controller/jobframework/defaults.go ApplyDefaultForManagedBy),
  so the manager's Training Operator / Trainer leave it alone (training-operator v1.9.4
  pkg/controller.v1/pytorch/pytorchjob_controller.go; trainer v2.3.0
  pkg/controller/trainjob_controller.go);
- the Workload goes to every worker, the first that admits it runs the job; its name is in
  the manager Workload's status.clusterName (pkg/controller/admissionchecks/multikueue/
  workload.go), the job there carries the prebuilt Workload's name and the origin label
  (pkg/controller/jobframework/utils.go SetMultiKueueMeta);
- the worker job's whole status is copied back (pytorchjob/pytorch_multikueue_adapter.go,
  trainjob/trainjob_multikueue_adapter.go SyncJob);
- deleting the manager's job deletes the worker's (workload.go RemoveRemoteObjects).
"""

from __future__ import annotations

import os
import signal
import threading
import uuid
from pathlib import Path

import kubernetes
import pytest
import yaml
from cluster_helpers import account_kubeconfig, condition, remote_job, wait_for
from step_helpers import job_name, pytorchjob, run_train, workload_of

from components.runtime.job_poll import JobFailed
from components.runtime.signals import Terminated
from components.runtime.watchers.multikueue import MULTIKUEUE, WORKER_KUBECONFIGS

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("quick_polls")]
REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "build" / "cluster"
WORKERS = ("worker-1", "worker-2")
QUEUE = "fmnist-multicluster"
KUEUE = ("kueue.x-k8s.io", "v1beta2")


def worker_kubeconfig(worker: str) -> Path:
    return BUILD / f"kubeconfig-{worker}"


@pytest.fixture(scope="session")
def worker_apis() -> dict[str, kubernetes.client.ApiClient]:
    """An admin client for each worker cluster."""
    missing = [w for w in WORKERS if not worker_kubeconfig(w).exists()]
    assert not missing, f"no worker clusters {missing}: `cluster.py up` starts them (--workers 2)"
    return {w: kubernetes.config.new_client_from_config(str(worker_kubeconfig(w))) for w in WORKERS}


@pytest.fixture(scope="session")
def multikueue(kubectl, kueue_setup, worker_apis, custom) -> None:
    """The kit applied on the manager and the workers; waits until Kueue says it is usable."""
    for worker in WORKERS:
        for folder in ("kueue", "kueue/multikueue/worker"):
            kubectl(
                f"--kubeconfig={worker_kubeconfig(worker)}",
                "apply",
                "--server-side",
                "-k",
                str(REPO / "k8s" / folder),
            )
    kubectl("apply", "--server-side", "-k", str(REPO / "k8s" / "kueue" / "multikueue"))

    def active(plural: str, name: str) -> bool:
        obj = custom.get_cluster_custom_object(*KUEUE, plural, name)
        return condition(obj, "Active") == "True"

    for worker in WORKERS:
        wait_for(lambda w=worker: active("multikueueclusters", w), 90, f"{worker} to be Active")
    wait_for(lambda: active("admissionchecks", "fmnist-multikueue"), 60, "the check Active")
    wait_for(lambda: active("clusterqueues", QUEUE), 60, f"ClusterQueue {QUEUE} Active")


@pytest.fixture
def spread(multikueue, namespace, kubectl, worker_apis, tmp_path, monkeypatch) -> str:
    """The test namespace on the manager and on each worker, with the queue of k8s/kueue/
    multikueue there; a log-reader kubeconfig per worker in $FMNIST_WORKER_KUBECONFIGS."""
    kit = yaml.safe_load_all(kubectl("kustomize", str(REPO / "k8s" / "kueue" / "multikueue")))
    (local,) = [o for o in kit if o and o["kind"] == "LocalQueue"]
    local["metadata"]["namespace"] = namespace
    kubectl("apply", "--server-side", "-f", "-", stdin=yaml.safe_dump(local))
    folder = tmp_path / "worker-kubeconfigs"
    folder.mkdir()
    for worker, api in worker_apis.items():
        _worker_namespace(worker, api, namespace, kubectl)
        (folder / worker).write_text(_log_reader_kubeconfig(worker, api, namespace))
    monkeypatch.setenv(WORKER_KUBECONFIGS, str(folder))
    yield namespace
    for api in worker_apis.values():
        kubernetes.client.CoreV1Api(api).delete_namespace(namespace)


def _worker_namespace(worker: str, api, namespace: str, kubectl) -> None:
    """The namespace on a worker, with k8s/kueue/multikueue/worker's queue and log reader
    (its ServiceAccount, Role and RoleBinding) moved into it, as `kustomize edit set
    namespace` would."""
    kubernetes.client.CoreV1Api(api).create_namespace({"metadata": {"name": namespace}})
    kit = yaml.safe_load_all(
        kubectl("kustomize", str(REPO / "k8s" / "kueue" / "multikueue" / "worker"))
    )
    objects = [o for o in kit if o]
    for obj in objects:
        obj["metadata"]["namespace"] = namespace
        for subject in obj.get("subjects", []):
            subject["namespace"] = namespace
    kubectl(
        f"--kubeconfig={worker_kubeconfig(worker)}",
        f"--namespace={namespace}",
        "apply",
        "--server-side",
        "-f",
        "-",
        stdin=yaml.safe_dump_all(objects),
    )


LOG_READER = "fmnist-log-reader"  # k8s/kueue/multikueue/worker/log-reader.yaml


def _log_reader_kubeconfig(worker: str, api, namespace: str) -> str:
    """A kubeconfig for the worker as its log-reader ServiceAccount (a TokenRequest token)."""
    _, config = account_kubeconfig(api, worker_kubeconfig(worker), LOG_READER, namespace)
    return yaml.safe_dump(config)


PYTORCHJOBS = ("kubeflow.org", "v1", "pytorchjobs")
TRAINJOBS = ("trainer.kubeflow.org", "v1alpha1", "trainjobs")


def test_a_job_runs_on_the_worker_that_admits_it_and_reports_back(
    as_pipeline, spread, custom, core, worker_apis, workspace, capsys
):
    """The step's PyTorchJob on the manager is MultiKueue's; the worker named in its Workload
    runs it (its pods there, none here), its status comes back, the step reads rank 0's log
    on the worker as the log-reader ServiceAccount, and once the job is done Kueue removes
    the worker's copy (workload.go: remote objects go when the local Workload finishes)."""
    run_id = f"mk-{uuid.uuid4().hex[:8]}"
    name = job_name(run_id)
    seen = {}

    def watch_workers():  # the worker's copy exists only while the job runs
        def running_there():
            for worker, api in worker_apis.items():
                job = remote_job(api, PYTORCHJOBS, spread, name)
                if job and condition(job, "Running") == "True":
                    pods = kubernetes.client.CoreV1Api(api).list_namespaced_pod(
                        spread, label_selector=f"training.kubeflow.org/job-name={name}"
                    )
                    return seen.update(worker=worker, job=job, pods=pods.items) or True
            return False

        wait_for(running_there, 60, "the job running on a worker")

    watcher = threading.Thread(target=watch_workers, daemon=True)
    watcher.start()
    slow = {"FMNIST_TEST_RUN_DURATION": "10s"}
    model = run_train(workspace, run_id, slow, workers=2, gpus_per_worker=1, queue_name=QUEUE)
    watcher.join()
    assert (model / "model.pt").read_bytes() == b"weights"
    job = pytorchjob(custom, spread, name)
    assert job["spec"]["runPolicy"]["managedBy"] == MULTIKUEUE
    assert condition(job, "Succeeded") == "True"  # the worker's status, copied back
    workload = workload_of(custom, spread, job["metadata"]["uid"])
    worker = workload["status"]["clusterName"]
    assert seen["worker"] == worker
    there = seen["job"]
    # The WorkloadIdentifierAnnotations gate, on by default since v0.18 (pkg/features/
    # kube_features.go), puts the prebuilt Workload's name in an annotation.
    prebuilt = there["metadata"]["annotations"]["kueue.x-k8s.io/prebuilt-workload-name"]
    assert prebuilt == workload["metadata"]["name"]
    assert there["metadata"]["labels"]["kueue.x-k8s.io/multikueue-origin"] == "multikueue"
    assert "managedBy" not in there["spec"]["runPolicy"]  # the worker's operator runs it
    assert {pod.metadata.labels["training.kubeflow.org/replica-type"] for pod in seen["pods"]} == {
        "master",
        "worker",
    }
    selector = f"training.kubeflow.org/job-name={name}"
    assert not core.list_namespaced_pod(spread, label_selector=selector).items  # none here
    (other,) = set(WORKERS) - {worker}
    assert remote_job(worker_apis[other], PYTORCHJOBS, spread, name) is None
    wait_for(
        lambda: remote_job(worker_apis[worker], PYTORCHJOBS, spread, name) is None,
        60,
        "Kueue to remove the finished job from the worker",
    )
    out = capsys.readouterr().out
    assert f"was admitted on cluster {worker} by MultiKueue" in out
    assert "{metricName: accuracy" in out  # rank 0's log, read on the worker


def test_a_held_worker_is_passed_over(as_pipeline, spread, custom, worker_apis, workspace):
    """With worker-1's GPU queue on hold (stopPolicy Hold), only worker-2 admits: the job runs
    there (the all-at-once dispatcher's copy on worker-1 is withdrawn)."""
    queues = kubernetes.client.CustomObjectsApi(worker_apis["worker-1"])
    queues.patch_cluster_custom_object(
        *KUEUE, "clusterqueues", "fmnist-gpu", {"spec": {"stopPolicy": "Hold"}}
    )
    try:
        run_id = f"held-{uuid.uuid4().hex[:6]}"
        run_train(workspace, run_id, workers=1, gpus_per_worker=1, queue_name=QUEUE)
        job = pytorchjob(custom, spread, job_name(run_id))
        assert workload_of(custom, spread, job["metadata"]["uid"])["status"]["clusterName"] == (
            "worker-2"
        )
    finally:
        queues.patch_cluster_custom_object(
            *KUEUE, "clusterqueues", "fmnist-gpu", {"spec": {"stopPolicy": "None"}}
        )


def test_a_job_failing_on_a_worker_fails_the_step_with_the_workers_reason_and_log(
    as_pipeline, spread, custom, workspace
):
    """The worker's Training Operator fails the job (backoffLimit); the manager's copy gets
    that status, and the step fails naming the worker, with the conditions and log tail."""
    run_id = f"mkfail-{uuid.uuid4().hex[:6]}"
    with pytest.raises(JobFailed) as error:
        run_train(
            workspace,
            run_id,
            {"FMNIST_TEST_FAIL": "true"},
            workers=1,
            gpus_per_worker=1,
            queue_name=QUEUE,
        )
    message = str(error.value)
    assert "failed on cluster worker-" in message
    assert "Failed=True" in message
    assert "{metricName: accuracy" in message  # the log tail, from the worker
    assert condition(pytorchjob(custom, spread, job_name(run_id)), "Failed") == "True"


def test_sigterm_deletes_the_job_on_the_worker_too(as_pipeline, spread, worker_apis, workspace):
    """SIGTERM to the step deletes the manager's job; Kueue then deletes the worker's."""
    run_id = f"mkterm-{uuid.uuid4().hex[:6]}"
    name = job_name(run_id)

    def running_somewhere():
        return any(remote_job(api, PYTORCHJOBS, spread, name) for api in worker_apis.values())

    def terminate_once_running():
        wait_for(running_somewhere, 60, "the job on a worker")
        os.kill(os.getpid(), signal.SIGTERM)

    thread = threading.Thread(target=terminate_once_running, daemon=True)
    thread.start()
    with pytest.raises(Terminated):
        run_train(
            workspace,
            run_id,
            {"FMNIST_TEST_RUN_DURATION": "120s"},
            workers=1,
            gpus_per_worker=1,
            queue_name=QUEUE,
        )
    thread.join()
    wait_for(lambda: not running_somewhere(), 60, "the worker's job to be deleted")


def test_a_trainjob_runs_on_a_worker_and_goes_when_done(
    as_pipeline, spread, custom, worker_apis, workspace, capsys
):
    """TrainJob (spec.managedBy) takes the same route: it runs on a worker with the same
    ClusterTrainingRuntime, Complete comes back, and the step's delete reaches the worker."""
    run_id = f"mktj-{uuid.uuid4().hex[:6]}"
    run_train(workspace, run_id, workers=2, gpus_per_worker=1, job_api="trainjob", queue_name=QUEUE)
    out = capsys.readouterr().out
    (worker,) = [w for w in WORKERS if f"admitted on cluster {w} by MultiKueue" in out]
    assert "{metricName: accuracy" in out
    name = job_name(run_id)
    wait_for(
        lambda: remote_job(worker_apis[worker], TRAINJOBS, spread, name) is None,
        60,
        "the worker's TrainJob to be deleted",
    )
