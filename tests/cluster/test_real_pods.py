"""The project's steps with real pods: our images in real containers on the tier's kubelets.

Each test runs in a namespace whose pods the apiserver pins to the real nodes (real_pods.py),
enforcing Pod Security "baseline" or "restricted", on a slice of the real FashionMNIST data.
The steps run here as the pipeline's account, as in test_steps.py, but nothing of the job is
played: the Training Operator's pods run our images (pulled by each node's containerd from
the tier's registry), land on the two real nodes, rendezvous over the pod network between
them by cluster DNS names, train with gloo and write the model to a local PersistentVolume
both nodes mount.

Upstream behaviour relied on:
- Training Operator v1.9.4 pkg/controller.v1/pytorch/initcontainer.go: every Worker gets an
  ``init-pytorch`` init container (image alpine:3.10, pkg/config/config.go; root, no
  securityContext) that waits until ``nslookup <job>-master-0`` answers;
  ``--pytorch-init-container-template-file`` replaces its template.
- k8s.io/kubernetes v1.36.3 pkg/kubelet/kuberuntime/security_context_others.go
  verifyRunAsNonRoot: a container whose effective runAsNonRoot is true and whose image user
  is root is refused ("container has runAsNonRoot and image will run as root").
- pkg/volume/local/local.go SetUpAt: a local volume gets the pod's fsGroup.
"""

from __future__ import annotations

import json
import math
import re
import uuid

import pytest
from probes import isolated  # noqa: F401  (a fixture: k8s/network-policies in ``namespace``)
from real_pods import (  # noqa: F401  (real_namespace: this module's ``namespace``)
    PodRecorder,
    bind_workspace,
    describe_pods,
    harness_module,
    harness_node,
    pod_log,
    pods_of,
    real_namespace,
    restricted_init_container,
    token_mounts,
)

from components.runtime.katib import tune_job
from components.runtime.launcher import run_training_job
from components.specs.params import TrainingJob
from components.specs.pods import ROLE_LABEL, TRAINING_ROLE, workspace_placement
from components.specs.sweep import Sweep
from trainer.data import pack

pytestmark = [pytest.mark.cluster, pytest.mark.real_pods, pytest.mark.usefixtures("quick_polls")]
JOB_PODS = {  # label selectors of a job's pods
    "pytorchjob": "training.kubeflow.org/job-name",
    "trainjob": "jobset.sigs.k8s.io/jobset-name",
}
NODE_CPU = "1"  # the machine has 2 cores: Master and Worker take one each


@pytest.fixture(scope="module")
def packed_slice(tmp_path_factory):
    """The first 2,000 training and 500 test images of the real dataset, packed."""
    out = tmp_path_factory.mktemp("packed")
    pack(str(out), train_limit=2000, test_limit=500)
    return out


def train_for_real(
    core, namespace: str, packed_slice, tmp_path, job_api: str = "pytorchjob"
) -> tuple[dict, PodRecorder]:
    """The train step's default job on the real nodes; returns model.json and the job's pods."""
    workspace = bind_workspace(core, namespace)
    job = TrainingJob(epochs=1, cpu=NODE_CPU, memory="3Gi", timeout_seconds=600, job_api=job_api)
    model_dir = tmp_path / "model"
    with PodRecorder(core, namespace, JOB_PODS[job_api]) as recorded:
        try:
            run_training_job(
                job,
                str(packed_slice),
                str(model_dir),
                str(workspace.path),
                uuid.uuid4().hex[:8],
                workspace_placement(workspace.pvc, str(workspace.path)),
            )
        except BaseException:
            print(describe_pods(core, namespace))
            raise
    assert (workspace.path / "train" / "model" / "model.pt").stat().st_gid == 10001
    return json.loads((model_dir / "model.json").read_text()), recorded


def check_learned(saved: dict, recorded: PodRecorder, out: str) -> None:
    """DDP over two real pods on the two real nodes: the accuracy, rank 0's log in the step's.

    Each node has 1.5 CPU allocatable (harness/node_configs.py SYSTEM_RESERVED), so ranks of
    1 CPU each land on different kubelets and talk over the pod network between nodes, in
    the tests marked ``isolated`` under the enforced k8s/network-policies.
    """
    accuracy = saved["metrics"]["accuracy"]
    assert accuracy > 0.5  # a uniform guess scores 0.1
    assert saved["training"]["world_size"] == 2
    assert "training on 2 process(es), device cpu, 2000 examples, 1 CPU thread(s) each" in out
    assert f"{{metricName: accuracy, metricValue: {accuracy:.4f}}}" in out
    assert len(recorded.pods) == 2
    assert {pod.spec.node_name for pod in recorded.pods.values()} == set(harness_node().NAMES)
    for pod in recorded.pods.values():
        (status,) = pod.status.container_statuses
        assert status.state.terminated.exit_code == 0, status
        assert pod.metadata.labels[ROLE_LABEL] == TRAINING_ROLE  # k8s/network-policies selects


def check_trained(saved: dict, recorded: PodRecorder, out: str):
    """``check_learned`` for a PyTorchJob: Master and Worker, the Worker's init-pytorch."""
    check_learned(saved, recorded, out)
    # Training never calls the API: no token. (A TrainJob's pods take their runtime's
    # setting; upstream's torch-distributed, which the tier runs, mounts one.)
    assert [token_mounts(pod) for pod in recorded.pods.values()] == [[], []]
    roles = {
        p.metadata.labels["training.kubeflow.org/replica-type"]: p for p in recorded.pods.values()
    }
    assert set(roles) == {"master", "worker"}
    worker = roles["worker"]
    (init,) = worker.status.init_container_statuses
    assert init.name == "init-pytorch" and init.state.terminated.exit_code == 0
    assert "Name:" in recorded.logs[worker.metadata.name, "init-pytorch"]
    return worker


@pytest.mark.usefixtures("isolated")
def test_the_default_pytorchjob_trains_for_real(
    as_pipeline, namespace, core, packed_slice, tmp_path, capsys
):
    """Master + Worker (the default two nodes) train with DDP over the pod network.

    Today's defects this shows: a pod-level runAsNonRoot made the kubelet refuse the
    Worker's root ``init-pytorch`` (defect 1); a fresh ``root:root 0755`` volume is writable
    by uid 10001 only through the pod's fsGroup (defect 3); torch's threads follow the CPU
    limit (defect 4: one thread per process at ``cpu: 1``).
    """
    saved, recorded = train_for_real(core, namespace, packed_slice, tmp_path)
    worker = check_trained(saved, recorded, capsys.readouterr().out)
    (init,) = worker.spec.init_containers
    assert init.security_context is None  # the operator's default: root, as on most clusters


@pytest.mark.usefixtures("isolated")
@pytest.mark.usefixtures("restricted_init_container")
@pytest.mark.parametrize("namespace", ["restricted"], indirect=True)
def test_a_restricted_namespace_trains_with_the_admin_init_container(
    as_pipeline, namespace, core, packed_slice, tmp_path, capsys
):
    """With k8s/training-operator's template the Worker passes Pod Security "restricted"."""
    saved, recorded = train_for_real(core, namespace, packed_slice, tmp_path)
    worker = check_trained(saved, recorded, capsys.readouterr().out)
    (init,) = worker.spec.init_containers
    assert init.security_context.run_as_user == 65534


@pytest.mark.usefixtures("isolated")
def test_the_trainjob_trains_for_real(
    as_pipeline, cluster_state, namespace, core, packed_slice, tmp_path, capsys
):
    """A TrainJob of two nodes (Trainer v2.3, torch-distributed) trains over the pod network.

    Trainer v2.3.0 pkg/runtime/framework/plugins/torch/torch.go sets PET_MASTER_ADDR to
    ``<job>-node-0-0.<job>``: the JobSet's headless Service and the pods' subdomain
    (sigs.k8s.io/jobset v0.12.0 pkg/controllers/pod_controller.go), resolved by CoreDNS.
    Trainer v2.1.0 under Kueue never starts it (test_steps.py shows that); the tier runs v2.3.
    """
    assert cluster_state["trainer"] != "v2.1.0", "make test-cluster runs Trainer v2.3.0"
    saved, recorded = train_for_real(core, namespace, packed_slice, tmp_path, "trainjob")
    check_learned(saved, recorded, capsys.readouterr().out)
    assert sorted(
        p.metadata.labels["batch.kubernetes.io/job-completion-index"]
        for p in recorded.pods.values()
    ) == ["0", "1"]


def test_a_katib_experiment_of_two_trials_ends_with_observations(
    as_pipeline, namespace, core, packed_slice, capsys
):
    """Two trials (PyTorchJobs) with Katib's StdOut metrics collector report to the DB manager.

    katib v0.19.0 pkg/webhook/v1beta1/pod/inject_webhook.go adds the collector sidecar
    (its image runs as root; defect 2: a pod-level runAsNonRoot made the kubelet refuse it)
    and wraps our command so that the collector reads its stdout; the collector parses our
    metric line and reports it to katib-db-manager (harness/controllers/katib_db.py), where
    the controller reads each trial's observation and picks the best trial.
    """
    workspace = bind_workspace(core, namespace)
    sweep = Sweep(
        algorithm="random",
        lr_min=0.001,
        lr_max=0.003,
        epochs_min=1,
        epochs_max=1,
        max_trials=2,
        parallel_trials=2,
        seed=7,
        sweep_timeout_seconds=900,
    )
    job = TrainingJob(workers=1, cpu=NODE_CPU, memory="3Gi", timeout_seconds=900)
    with PodRecorder(core, namespace, JOB_PODS["pytorchjob"]) as recorded:
        try:
            best, accuracy = tune_job(
                job,
                sweep,
                str(packed_slice),
                str(workspace.path),
                uuid.uuid4().hex[:8],
                workspace_placement(workspace.pvc, str(workspace.path)),
            )
        except BaseException:
            print(describe_pods(core, namespace))
            raise
    assert accuracy > 0.5
    assert len(recorded.pods) == 2
    # Every trial drew from this Experiment's own space: its suggestion pod served it (a
    # shared goptuna keeps the first Experiment's study, katib v0.19.0
    # pkg/suggestion/v1beta1/goptuna/service.go; connect_proxy.py routes to the pod).
    tried = set()
    for pod in recorded.pods.values():
        words = " ".join(
            (pod.spec.containers[0].command or []) + (pod.spec.containers[0].args or [])
        )
        tried |= {float(value) for value in re.findall(r"--lr[= ]([0-9.e+-]+)", words)}
    assert len(tried) == 2 and any(math.isclose(best["lr"], lr) for lr in tried), (best, tried)
    assert all(0.001 <= lr <= 0.003 for lr in tried) and best["epochs"] == 1, (best, tried)
    for name, pod in recorded.pods.items():
        assert pod.spec.node_name in harness_node().NAMES
        containers = {status.name: status for status in pod.status.container_statuses}
        assert set(containers) == {"pytorch", "metrics-logger-and-collector"}, name
        for status in containers.values():
            assert status.state.terminated.exit_code == 0, (name, status)
