"""The train step through ``.python_func``, with the Kubernetes API faked at the client boundary.

``fake_k8s`` (tests/conftest.py) stands in for ``CustomObjectsApi`` and
``CoreV1Api``: these tests check the exact PyTorchJob sent, the master's log streamed
into the step's log, a Failed job failing the step with that log, the timeout deleting
the job, and the model copied out of the shared workspace.
"""

import sys
from dataclasses import asdict
from pathlib import Path

import pytest
from kfp import dsl

import components.launch_pytorchjob as launcher
from components.launch_pytorchjob import JobFailed, WorkPaths, job_name
from components.local_train import torchrun_command
from components.manifests import GPU_TOLERATION
from components.params import DEFAULTS, PipelineParams
from components.train import train
from trainer.metrics import format_metric_line

TRAIN_PARAMS = {
    name: value for name, value in asdict(DEFAULTS).items() if name in train.component_spec.inputs
}
METRIC_LINE = format_metric_line(0.9012, 0.2756)


def conditions(*pairs):
    return {
        "conditions": [
            {"type": kind, "status": "True", "reason": reason, "message": message}
            for kind, reason, message in pairs
        ]
    }


RUNNING = conditions(("Created", "PyTorchJobCreated", ""), ("Running", "PyTorchJobRunning", ""))
SUCCEEDED = conditions(("Created", "", ""), ("Succeeded", "PyTorchJobSucceeded", "done"))
FAILED = conditions(
    ("Created", "", ""),
    (
        "Failed",
        "PyTorchJobFailed",
        "PyTorchJob fmnist is failed because 1 Master replica(s) failed.",
    ),
)


@pytest.fixture
def workspace(tmp_path):
    """A workspace as KFP mounts it, with the model the job will have written."""
    root = tmp_path / "kfp-workspace"
    model = WorkPaths.under(root).model
    model.mkdir(parents=True)
    (model / "model.pt").write_bytes(b"weights")
    (model / "model.json").write_text("{}")
    return root


@pytest.fixture
def step(tmp_path, workspace, packed_small, monkeypatch):
    """Call the train step as the KFP launcher would on a cluster; return its model dir."""
    monkeypatch.setattr(launcher, "POLL_SECONDS", 0.01)
    model = dsl.Model(uri=str(tmp_path / "outputs" / "model"))
    task_config = dsl.TaskConfig(
        tolerations=[GPU_TOLERATION],
        volumes=[
            {"name": "kfp-workspace", "persistentVolumeClaim": {"claimName": "run-7-kfp-workspace"}}
        ],
        volume_mounts=[{"name": "kfp-workspace", "mountPath": str(workspace)}],
        env=[{"name": "HTTPS_PROXY", "value": "http://proxy:3128"}],
    )

    def call(**changes):
        arguments = {**TRAIN_PARAMS, "namespace": "team-a", "workers": 3, **changes}
        train.python_func(
            dataset=dsl.Dataset(uri=str(packed_small)),
            model=model,
            workspace_path=str(workspace),
            run_id="8c1e2f3a-aaaa-bbbb",
            task_config=task_config,
            **arguments,
        )
        return model.path

    return call


def test_creates_the_pytorchjob_on_the_shared_workspace(step, fake_k8s, workspace, validate_crd):
    fake_k8s.custom.statuses["pytorchjobs"] = [SUCCEEDED]
    model_dir = step(gpus_per_worker=1, priority_class="high")

    (job,) = fake_k8s.custom.created("pytorchjobs")
    validate_crd(job)
    name = job["metadata"]["name"]
    assert name.startswith("fmnist-8c1e2f3a-") and name == name.lower()
    assert job["metadata"]["namespace"] == "team-a"
    assert job["metadata"]["labels"] == {
        "kueue.x-k8s.io/queue-name": "fmnist",
        "kueue.x-k8s.io/priority-class": "high",
    }
    replicas = job["spec"]["pytorchReplicaSpecs"]
    assert (replicas["Master"]["replicas"], replicas["Worker"]["replicas"]) == (1, 2)
    pod = replicas["Worker"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["args"] == [
        f"--data-dir={workspace}/train/data",
        f"--model-dir={workspace}/train/model",
        f"--checkpoint-dir={workspace}/train/checkpoints",
        "--epochs=10",
        "--batch-size=128",
        "--lr=0.002",
        "--momentum=0.9",
        "--optimizer=adamw",
    ]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert container["volumeMounts"] == [{"name": "kfp-workspace", "mountPath": str(workspace)}]
    assert container["env"] == [{"name": "HTTPS_PROXY", "value": "http://proxy:3128"}]
    assert pod["volumes"][0]["persistentVolumeClaim"] == {"claimName": "run-7-kfp-workspace"}
    assert pod["tolerations"] == [GPU_TOLERATION]
    assert job["spec"]["runPolicy"]["activeDeadlineSeconds"] == DEFAULTS.timeout_seconds
    # The data was staged where the job reads it, and the model copied out of the workspace.
    assert (workspace / "train" / "data" / "manifest.json").is_file()
    assert (workspace / "train" / "checkpoints").is_dir()
    assert sorted(path.name for path in Path(model_dir).iterdir()) == ["model.json", "model.pt"]
    assert (Path(model_dir) / "model.pt").read_bytes() == b"weights"
    assert ("delete", "pytorchjobs") not in fake_k8s.custom.verbs()  # left to the TTL


def test_streams_the_master_log_once_per_line_across_restarts(
    step, fake_k8s, capsys, master_pod_factory
):
    fake_k8s.custom.statuses["pytorchjobs"] = [RUNNING] * 4 + [SUCCEEDED]
    first, restarted = (
        master_pod_factory("job-master-0"),
        master_pod_factory("job-master-0", restarts=1),
    )
    fake_k8s.core.pods = [[], [first], [first], [restarted], [restarted]]
    fake_k8s.core.logs["job-master-0"] = [
        "epoch 1 [128/60000]\n",
        f"epoch 1 [128/60000]\n{METRIC_LINE}\n",
        "resumed from checkpoint after epoch 1\n",
        "resumed from checkpoint after epoch 1\nsaved model\n",
    ]
    step()
    out = capsys.readouterr().out
    assert out.count("epoch 1 [128/60000]") == 1
    assert out.count(METRIC_LINE) == 1
    assert out.count("resumed from checkpoint after epoch 1") == 1
    assert "saved model" in out
    assert "(restart 1)" in out
    assert fake_k8s.core.selectors[0] == (
        "training.kubeflow.org/job-name="
        + fake_k8s.custom.created("pytorchjobs")[0]["metadata"]["name"]
        + ",training.kubeflow.org/replica-type=master"
    )


def test_a_failed_job_fails_the_step_with_its_conditions_and_log(
    step, fake_k8s, master_pod_factory
):
    fake_k8s.custom.statuses["pytorchjobs"] = [RUNNING, FAILED]
    fake_k8s.core.pods = [[master_pod_factory("job-master-0")]]
    fake_k8s.core.logs["job-master-0"] = [
        "training on 3 process(es)\nTraceback (most recent call last):\n"
        "RuntimeError: NCCL timeout\n"
    ]
    with pytest.raises(JobFailed) as error:
        step()
    message = str(error.value)
    assert "failed" in message and "team-a/fmnist-8c1e2f3a-" in message
    assert "Failed=True (PyTorchJobFailed: PyTorchJob fmnist is failed because 1 Master" in message
    assert "RuntimeError: NCCL timeout" in message
    assert ("delete", "pytorchjobs") not in fake_k8s.custom.verbs()  # kept for inspection


def test_a_timeout_fails_the_step_and_deletes_the_job(step, fake_k8s):
    fake_k8s.custom.statuses["pytorchjobs"] = [RUNNING]
    with pytest.raises(TimeoutError, match="did not finish within 1 s") as error:
        step(timeout_seconds=1)
    assert "Running=True (PyTorchJobRunning)" in str(error.value)
    assert fake_k8s.custom.verbs()[0] == ("create", "pytorchjobs")
    assert fake_k8s.custom.verbs()[-1] == ("delete", "pytorchjobs")
    assert fake_k8s.custom.objects == {}


def test_a_deleted_job_fails_the_step(step, fake_k8s):
    fake_k8s.custom.statuses["pytorchjobs"] = [RUNNING]
    original = fake_k8s.custom.get_namespaced_custom_object

    def vanish(*args):
        fake_k8s.custom.objects.clear()
        return original(*args)

    fake_k8s.custom.get_namespaced_custom_object = vanish
    with pytest.raises(JobFailed, match="disappeared"):
        step()


def test_refuses_to_launch_without_the_workspace_volume(tmp_path, fake_k8s, packed_small):
    with pytest.raises(RuntimeError, match="not among the volumes passed to this step"):
        train.python_func(
            dataset=dsl.Dataset(uri=str(packed_small)),
            model=dsl.Model(uri=str(tmp_path / "m")),
            workspace_path="/kfp-workspace",
            run_id="r",
            task_config=dsl.TaskConfig(),
            **TRAIN_PARAMS,
        )
    assert fake_k8s.custom.calls == []


def test_bad_parameters_fail_before_any_api_call(step, fake_k8s):
    with pytest.raises(ValueError, match="gpus_per_worker must be an integer >= 0, got -1"):
        step(gpus_per_worker=-1)
    assert fake_k8s.custom.calls == []


def test_job_names_are_dns_labels_derived_from_the_run():
    names = {job_name("8C1E2F3A-1234-5678") for _ in range(20)}
    assert all(name.startswith("fmnist-8c1e2f3a-") and len(name) == 20 for name in names)
    assert len(names) > 1  # each attempt gets its own job
    assert job_name("--").startswith("fmnist-run-")


def test_local_backend_runs_torchrun_with_the_same_trainer_args(tmp_path):
    params = PipelineParams(backend="local", workers=2, nproc_per_node=1, epochs=1)
    paths = WorkPaths(tmp_path / "data", tmp_path / "model", tmp_path / "ckpt")
    command = torchrun_command(params, paths)
    assert command[:6] == [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=2",
        "-m",
    ]
    assert command[6:] == [
        "trainer",
        f"--data-dir={tmp_path}/data",
        f"--model-dir={tmp_path}/model",
        f"--checkpoint-dir={tmp_path}/ckpt",
        "--epochs=1",
        "--batch-size=128",
        "--lr=0.002",
        "--momentum=0.9",
        "--optimizer=adamw",
        "--no-cuda",
    ]


@pytest.mark.parametrize(
    ("changes", "message", "log"),
    [
        ({}, "torchrun exited with code 1", "not-a-dataset: FashionMNIST raw files missing"),
        ({"timeout_seconds": 1}, "torchrun ran past 1 s and was stopped", None),
    ],
)
def test_local_training_failures_fail_the_step_with_the_output_tail(
    tmp_path, monkeypatch, changes, message, log
):
    """No cluster here: a trainer that cannot find its data, and one cut off by the timeout."""
    monkeypatch.delenv("FASHION_MNIST_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # nothing cached there
    empty = tmp_path / "not-a-dataset"
    empty.mkdir()
    arguments = {**TRAIN_PARAMS, "backend": "local", "workers": 1, **changes}
    with pytest.raises(RuntimeError, match=message) as error:
        train.python_func(
            dataset=dsl.Dataset(uri=str(empty)),
            model=dsl.Model(uri=str(tmp_path / "model")),
            workspace_path=str(tmp_path / "ws"),
            run_id="r",
            task_config=dsl.TaskConfig(),
            **arguments,
        )
    if log:
        assert log in str(error.value)
