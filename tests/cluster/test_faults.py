"""What a shared cluster does to a training run, on real pods: survived, or failed by name.

The train step's own code runs here as the pipeline's account with its defaults (a
PyTorchJob of Master + Worker, one CPU a rank, per-epoch checkpoints on the workspace) on a
slice of FashionMNIST; the two ranks run on the two real nodes. Each test breaks the run in
the middle of an epoch the way a cluster does, and checks what the user sees: the step
succeeds, its log says "resumed from epoch k", no finished epoch is trained again, and the
final metric line is the uninterrupted run's (``reference``: same seed, same data) to the
last digit; or, for a lost node, the step fails in bounded time naming the node.

Upstream behaviour relied on:
- training-operator v1.9.4 pkg/core/pod.go: an OnFailure replica's pod has
  ``restartPolicy: OnFailure``, so the kubelet restarts a killed container in place
  (k8s.io/kubernetes v1.36.3 pkg/kubelet/kubelet.go); pkg/core/job.go PastBackoffLimit sums
  the container restarts of the job's Running pods against ``runPolicy.backoffLimit``.
- training-operator v1.9.4 pkg/core/status.go: a deleted (or evicted) pod counts as failed;
  pkg/controller.v1/common/pod.go creates its same-named replacement once it is gone, and
  pkg/controller.v1/pytorch/initcontainer.go runs ``init-pytorch`` in the new pod only.
- A rank's death fails its peer's gloo collective, so the peer's container restarts too
  (restartPolicy OnFailure), and both resume from the last checkpoint.
- kubectl v0.36.3 pkg/drain/filters.go: a pod with a controller owner (the PyTorchJob) is
  evicted without --force; an emptyDir (/dev/shm) needs --delete-emptydir-data.
- kube-controller-manager's node monitor (50 s grace, harness/control_plane.py) marks a node
  whose kubelet stopped ``Ready=Unknown`` (pkg/controller/nodelifecycle); its pods stay until
  the node returns (pkg/controller/podgc gcTerminating needs an out-of-service taint).
"""

from __future__ import annotations

import json
import re
import time

import kubernetes
import pytest
import yaml
from cluster_helpers import account_kubeconfig
from conftest import make_namespace
from fault_helpers import (
    Training,
    acting_as,
    fault_job,
    job_pods,
    kill_container,
    log_segments,
    metric_lines,
    replacement,
    wait_for_log,
)
from probes import isolated, network_policies  # noqa: F401  (isolated: a fixture)
from real_pods import (  # noqa: F401  (real_namespace: this module's ``namespace``)
    describe_pods,
    harness_module,
    harness_node,
    real_namespace,
)

from components.runtime import waiting
from components.runtime.watchers import lost_nodes
from components.runtime.watchers.lost_nodes import NodeLost

# Each run's namespace has k8s/network-policies applied (probes.py): the faults are survived
# under enforcement, as in an isolated profile namespace.
pytestmark = [
    pytest.mark.cluster,
    pytest.mark.real_pods,
    pytest.mark.usefixtures("quick_polls", "isolated"),
]
MID_EPOCH_2 = r"epoch 2 \["  # rank 0's progress line half way through epoch 2
RESUMED = re.compile(r"resumed from epoch (\d+) \(its checkpoint\)")
LOST_AFTER = 30  # the lost-node test's bound, for NODE_LOST_SECONDS (120 s)


@pytest.fixture(scope="module")
def reference(
    request, core, kubectl, kueue_setup, api_client, kubeconfig, packed, tmp_path_factory
):
    """An uninterrupted run of the same job: its seconds and its rank 0 log's metric lines."""
    annotations = dict(harness_node().REAL_NAMESPACE_ANNOTATIONS)
    labels = {"pod-security.kubernetes.io/enforce": "baseline"}
    namespace, cleanup = make_namespace(request, core, kubectl, kueue_setup, labels, annotations)
    folder = tmp_path_factory.mktemp("reference")
    try:
        network_policies(kubectl, namespace)
        _, config = account_kubeconfig(api_client, kubeconfig, "pipeline-runner", namespace)
        (folder / "kubeconfig").write_text(yaml.safe_dump(config))
        with acting_as(folder / "kubeconfig"), pytest.MonkeyPatch.context() as patch:
            patch.setattr(waiting, "POLL_SECONDS", 1.0)
            run = Training(core, namespace, packed, folder / "model", fault_job()).start()
            seconds = run.wait()
    finally:
        cleanup()
    lines = metric_lines(run.output)
    assert len(lines) == 3, run.output  # one an epoch
    return {"seconds": seconds, "lines": lines}


def check_resumed(run: Training, reference: dict) -> int:
    """The step's log: resumed from epoch k, no finished epoch again, the reference's end."""
    out = run.output
    resumed = log_segments(out)[-1]
    found = RESUMED.search(resumed)
    assert found, out
    epoch = int(found.group(1))
    assert epoch >= 1
    for finished in range(1, epoch + 1):
        assert f"epoch {finished} [" not in resumed, f"epoch {finished} trained again:\n{out}"
    assert metric_lines(out)[-1] == reference["lines"][-1], out
    model = json.loads((run.model_dir / "model.json").read_text())
    assert len(model["training"]["history"]) == 3
    return epoch


def test_a_killed_rank_0_resumes_from_its_checkpoint(
    as_pipeline, namespace, core, packed, reference, tmp_path, record_property
):
    """SIGKILL of the Master's container mid-epoch 2 (an OOM kill does the same)."""
    run = Training(core, namespace, packed, tmp_path / "model", fault_job()).start()
    master = wait_for_log(core, namespace, "master", MID_EPOCH_2)
    kill_container(master)
    seconds = run.wait()
    epoch = check_resumed(run, reference)
    restarts = {
        pod.metadata.labels["training.kubeflow.org/replica-type"]: pod.status.container_statuses[
            0
        ].restart_count
        for pod in job_pods(core, namespace)
    }
    assert restarts["master"] == 1, describe_pods(core, namespace)
    record_property("delay_seconds", round(seconds - reference["seconds"], 1))
    record_property("resumed_from_epoch", epoch)
    record_property("restarts", restarts)


def test_a_deleted_worker_pod_is_replaced_and_resumes(
    as_pipeline, namespace, core, packed, reference, tmp_path, record_property
):
    """``kubectl delete pod`` of the Worker mid-epoch 2: the operator makes a new one."""
    run = Training(core, namespace, packed, tmp_path / "model", fault_job()).start()
    wait_for_log(core, namespace, "master", MID_EPOCH_2)
    (worker,) = job_pods(core, namespace, "worker")
    core.delete_namespaced_pod(worker.metadata.name, namespace)
    replaced = replacement(core, namespace, "worker", worker)
    seconds = run.wait()
    epoch = check_resumed(run, reference)
    assert replaced.metadata.name == worker.metadata.name  # the operator's fixed name
    record_property("delay_seconds", round(seconds - reference["seconds"], 1))
    record_property("resumed_from_epoch", epoch)


@pytest.fixture
def drained(kubectl):
    """``drained(node)``: drain a node as an upgrade or a spot reclaim does; uncordon after."""
    nodes = []

    def drain(node: str) -> None:
        nodes.append(node)
        kubectl("drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=180s")

    yield drain
    for node in nodes:
        kubectl("uncordon", node)


def test_a_drained_node_moves_its_rank_and_resumes(
    as_pipeline, namespace, core, packed, reference, tmp_path, drained, record_property
):
    """The Worker's node drained mid-epoch 2; the ranks ask 700m so both fit on one node."""
    run = Training(core, namespace, packed, tmp_path / "model", fault_job(cpu="700m")).start()
    wait_for_log(core, namespace, "master", MID_EPOCH_2)
    (worker,) = job_pods(core, namespace, "worker")
    drained(worker.spec.node_name)
    moved = replacement(core, namespace, "worker", worker)
    seconds = run.wait()
    epoch = check_resumed(run, reference)
    assert moved.spec.node_name != worker.spec.node_name
    record_property("delay_seconds", round(seconds - reference["seconds"], 1))
    record_property("resumed_from_epoch", epoch)


@pytest.fixture
def powered_off(api_client):
    """``powered_off(node)``: kill a node's kubelet, kube-proxy and containers; restore after."""
    faults, lost = harness_module("node_faults"), []

    def power_off(name: str) -> None:
        (real,) = [n for n in harness_module("node").NODES if n.name == name]
        lost.append(real)
        faults.power_off(real)

    yield power_off
    api = harness_module("api").Api(harness_module("paths").KUBECONFIG)
    for real in lost:
        faults.power_on(real, api)


def test_a_lost_node_fails_the_step_in_bounded_time_naming_it(
    as_pipeline, namespace, core, packed, tmp_path, powered_off, monkeypatch, record_property
):
    """The Worker's node loses power mid-epoch 2. Its pods cannot be replaced while the node
    is away, so the step gives up NODE_LOST_SECONDS after the node left Ready (50 s after its
    last heartbeat), names the node, and deletes the job, whose pods leave with the node's
    return. Here the bound is LOST_AFTER: the same behaviour, 90 s less of the tier's time."""
    monkeypatch.setattr(lost_nodes, "NODE_LOST_SECONDS", LOST_AFTER)
    run = Training(core, namespace, packed, tmp_path / "model", fault_job(cpu="700m")).start()
    wait_for_log(core, namespace, "master", MID_EPOCH_2)
    (worker,) = job_pods(core, namespace, "worker")
    node = worker.spec.node_name
    powered_off(node)
    lost_at = time.monotonic()
    with pytest.raises(NodeLost) as lost:
        run.wait()
    seconds = time.monotonic() - lost_at
    message = str(lost.value)
    assert "\n" not in message
    assert re.search(rf"pod \S+ is on node {node}, which has not been Ready for \d+ s", message)
    assert f"kubectl taint node {node} node.kubernetes.io/out-of-service" in message
    # 50 s of grace and 5 s of monitor period, the bound, the stall check, polls.
    assert LOST_AFTER < seconds <= 50 + 5 + LOST_AFTER + 30 + 15, seconds
    assert f"deleting PyTorchJob {namespace}/" in run.output
    record_property("seconds_to_fail", round(seconds, 1))


@pytest.fixture
def small_queue(namespace, custom):
    """A ClusterQueue of 2 CPUs for this namespace only (room for one run), its LocalQueue."""
    group, version = "kueue.x-k8s.io", "v1beta2"
    cluster_queue = {
        "apiVersion": f"{group}/{version}",
        "kind": "ClusterQueue",
        "metadata": {"name": f"small-{namespace}"},
        "spec": {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            # as k8s/kueue/cluster-queue.yaml: a higher priority class may evict a lower one
            "preemption": {"withinClusterQueue": "LowerPriority"},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory"],
                    "flavors": [
                        {
                            "name": "fmnist-cpu",
                            "resources": [
                                {"name": "cpu", "nominalQuota": "2"},
                                {"name": "memory", "nominalQuota": "8Gi"},
                            ],
                        }
                    ],
                }
            ],
        },
    }
    local_queue = {
        "apiVersion": f"{group}/{version}",
        "kind": "LocalQueue",
        "metadata": {"name": "small", "namespace": namespace},
        "spec": {"clusterQueue": cluster_queue["metadata"]["name"]},
    }
    custom.create_cluster_custom_object(group, version, "clusterqueues", cluster_queue)
    custom.create_namespaced_custom_object(group, version, namespace, "localqueues", local_queue)
    yield "small"
    custom.delete_cluster_custom_object(
        group, version, "clusterqueues", cluster_queue["metadata"]["name"]
    )


def preemptor_job(namespace: str, seconds: int) -> dict:
    """A batch Job of the production priority class in the same queue, 1 CPU for ``seconds``."""
    from components.images import Images
    from components.specs.pods import container_security_context, pod_security_context

    container = {
        "name": "work",
        "image": Images.resolve().trainer_cpu,
        "command": ["python", "-c", f"import time; time.sleep({seconds})"],
        "resources": {
            "requests": {"cpu": "1", "memory": "1Gi"},
            "limits": {"cpu": "1", "memory": "1Gi"},
        },
        "securityContext": container_security_context(),
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "nightly",
            "namespace": namespace,
            "labels": {
                "kueue.x-k8s.io/queue-name": "small",
                "kueue.x-k8s.io/priority-class": "fmnist-production",  # k8s/kueue
            },
        },
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "securityContext": pod_security_context(),
                    "containers": [container],
                }
            },
        },
    }


def test_kueue_preemption_suspends_the_run_and_it_resumes_after(
    as_pipeline,
    namespace,
    core,
    api_client,
    custom,
    packed,
    reference,
    tmp_path,
    small_queue,
    record_property,
):
    """A production Job takes the queue's quota mid-epoch 2: Kueue suspends our job (its pods
    go), the step waits saying who took it, and when the Job ends our job is admitted again
    and resumes from its checkpoint. Kueue v0.19.2: pkg/scheduler/preemption/preemption.go
    (Evicted=True, reason Preempted), pkg/controller/jobframework/reconciler.go stopJob and
    startJob (suspend, unsuspend); training-operator v1.9.4 pkg/controller.v1/common/job.go
    (a suspended job's pods deleted, re-created on resume)."""
    job = fault_job(queue_name=small_queue, priority_class="fmnist-experiment")
    run = Training(core, namespace, packed, tmp_path / "model", job).start()
    wait_for_log(core, namespace, "master", MID_EPOCH_2)
    batch = kubernetes.client.BatchV1Api(api_client)
    batch.create_namespaced_job(namespace, preemptor_job(namespace, 30))
    seconds = run.wait()
    epoch = check_resumed(run, reference)
    said = re.findall(r"preempted by workload (\S+); waiting for quota", run.output)
    assert len(said) == 1 and said[0].startswith(f"{namespace}/job-nightly-"), run.output
    assert "deleting PyTorchJob" not in run.output
    (workload,) = [
        w
        for w in custom.list_namespaced_custom_object(
            "kueue.x-k8s.io", "v1beta2", namespace, "workloads"
        )["items"]
        if w["metadata"]["name"].startswith("pytorchjob-")
    ]
    evictions = workload["status"].get("schedulingStats", {}).get("evictions", [])
    assert [(e["reason"], e["count"]) for e in evictions] == [("Preempted", 1)], workload["status"]
    record_property("delay_seconds", round(seconds - reference["seconds"], 1))
    record_property("resumed_from_epoch", epoch)
