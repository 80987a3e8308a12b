"""The control plane of the cluster tier works: nodes, CRDs, webhooks and every controller.

Hand-written objects only (the project's own steps are driven by other tests); each test
names the upstream file and tag whose behaviour it relies on. Versions: Kubernetes v1.36.3,
kwok v0.8.0, JobSet v0.12.0, Training Operator v1.9.4, Trainer v2.3.0 (or v2.1.0,
`make cluster-up TRAINER=v2.1.0`), Kueue v0.19.2, Katib v0.19.0, KServe v0.15.2 (or v0.20.0,
`KSERVE=v0.20.0`).
"""

from __future__ import annotations

import json
import re
import time

import kubernetes
import pytest
from cluster_helpers import REPO, condition, queue_for, wait_for
from kubernetes.client.exceptions import ApiException

pytestmark = pytest.mark.cluster

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
GPU_RESOURCES = {"cpu": "1", "memory": "2Gi", "nvidia.com/gpu": "1"}


def pytorchjob(
    name: str, queue: str | None, workers: int = 1, annotations: dict | None = None
) -> dict:
    """A PyTorchJob like the pipeline's: Master + Workers, one GPU each, container pytorch."""

    def replica(count: int) -> dict:
        return {
            "replicas": count,
            "restartPolicy": "Never",
            "template": {
                "metadata": {"annotations": dict(annotations or {})},
                "spec": {
                    "tolerations": [GPU_TOLERATION],
                    "containers": [
                        {
                            "name": "pytorch",
                            "image": "ghcr.io/example/fmnist-trainer:test",
                            "command": ["torchrun", "-m", "trainer", "--epochs=2"],
                            "resources": {"requests": GPU_RESOURCES, "limits": GPU_RESOURCES},
                        }
                    ],
                },
            },
        }

    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "labels": {}},
        "spec": {
            "nprocPerNode": "1",
            "runPolicy": {"cleanPodPolicy": "None"},
            "pytorchReplicaSpecs": {"Master": replica(1)},
        },
    }
    if workers:
        job["spec"]["pytorchReplicaSpecs"]["Worker"] = replica(workers)
    if queue:
        job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = queue
    return job


def create(custom, namespace: str, obj: dict) -> dict:
    group, version = obj["apiVersion"].split("/")
    plural = {
        "PyTorchJob": "pytorchjobs",
        "TrainJob": "trainjobs",
        "InferenceService": "inferenceservices",
        "Experiment": "experiments",
    }[obj["kind"]]
    return custom.create_namespaced_custom_object(group, version, namespace, plural, obj)


def get(custom, namespace: str, group: str, version: str, plural: str, name: str) -> dict:
    return custom.get_namespaced_custom_object(group, version, namespace, plural, name)


def owned_workload(custom, namespace: str, kind: str, name: str) -> dict | None:
    """The Kueue Workload whose owner is the job ``kind``/``name``."""
    items = custom.list_namespaced_custom_object(
        "kueue.x-k8s.io", "v1beta2", namespace, "workloads"
    )
    for item in items["items"]:
        owners = item["metadata"].get("ownerReferences") or []
        if any(o["kind"] == kind and o["name"] == name for o in owners):
            return item
    return None


def env_of(pod, container: str) -> dict[str, str]:
    (found,) = [c for c in pod.spec.containers if c.name == container]
    return {e.name: e.value for e in found.env or [] if e.value is not None}


def test_four_fake_nodes_with_their_gpus(core, cluster_state):
    """kwok keeps the nodes of tools/controlplane/config/nodes.yaml Ready with their capacity.

    kwok v0.8.0 kustomize/stage/node/fast/node-initialize.yaml: keeps status.allocatable and
    capacity as given and sets the Ready condition. The real nodes are there once they
    joined (CI runs this test before, on ``cluster.py up --without-nodes``).
    """
    every = core.list_node().items
    nodes = {
        n.metadata.name: n
        for n in every
        if (n.metadata.annotations or {}).get("kwok.x-k8s.io/node") == "fake"
    }
    assert set(nodes) == {"gpu-node-1", "gpu-node-2", "mig-node-1", "cpu-node-1"}
    # ... and the real kubelets' nodes (harness/node.py), which kwok leaves alone.
    real = {"real-node-1", "real-node-2"} if cluster_state.get("real_nodes", True) else set()
    assert {n.metadata.name for n in every} - set(nodes) == real
    for node in nodes.values():
        ready = [c.status for c in node.status.conditions if c.type == "Ready"]
        assert ready == ["True"], node.metadata.name
    for name in ("gpu-node-1", "gpu-node-2"):
        assert nodes[name].status.allocatable["nvidia.com/gpu"] == "8"
        assert nodes[name].metadata.labels["nvidia.com/gpu.present"] == "true"
        taints = [(t.key, t.value, t.effect) for t in nodes[name].spec.taints]
        assert taints == [("nvidia.com/gpu", "present", "NoSchedule")]
    assert nodes["mig-node-1"].status.allocatable["nvidia.com/mig-1g.10gb"] == "7"
    assert nodes["mig-node-1"].metadata.labels["nvidia.com/mig.strategy"] == "mixed"
    assert "nvidia.com/gpu" not in nodes["cpu-node-1"].status.allocatable
    assert not nodes["cpu-node-1"].spec.taints
    assert nodes["cpu-node-1"].status.allocatable["cpu"] == "32"


def test_every_kubeflow_api_is_served(api_client, custom, cluster_state):
    """Discovery serves the CRDs of each controller, and Trainer's torch-distributed runtime exists.

    CRDs from: training-operator v1.9.4 manifests/base/crds, trainer v2.x manifests/base/crds,
    kueue v0.19.2 config/components/crd, katib v0.19.0 manifests/v1beta1/components/crd,
    kserve v0.15.2 config/crd, jobset v0.12.0 config/components/crd; the runtime from trainer
    manifests/base/runtimes/torch_distributed.yaml.
    """
    expected = {
        "kubeflow.org/v1": {"pytorchjobs"},
        "kubeflow.org/v1beta1": {"experiments", "trials", "suggestions"},
        "trainer.kubeflow.org/v1alpha1": {
            "trainjobs",
            "clustertrainingruntimes",
            "trainingruntimes",
        },
        "kueue.x-k8s.io/v1beta2": {
            "clusterqueues",
            "localqueues",
            "workloads",
            "resourceflavors",
            "workloadpriorityclasses",
        },
        "kueue.x-k8s.io/v1beta1": {"clusterqueues", "localqueues", "workloads"},
        "serving.kserve.io/v1beta1": {"inferenceservices"},
        "serving.kserve.io/v1alpha1": {"servingruntimes", "clusterservingruntimes"},
        "jobset.x-k8s.io/v1alpha2": {"jobsets"},
        "kwok.x-k8s.io/v1alpha1": {"logs", "clusterlogs"},
    }
    for group_version, resources in expected.items():
        group, version = group_version.split("/")
        found = kubernetes.client.CustomObjectsApi(api_client).api_client.call_api(
            f"/apis/{group}/{version}", "GET", response_type="object", _return_http_data_only=True
        )
        served = {r["name"] for r in found["resources"] if "/" not in r["name"]}
        assert resources <= served, (group_version, resources - served)
    runtime = custom.get_cluster_custom_object(
        "trainer.kubeflow.org", "v1alpha1", "clustertrainingruntimes", "torch-distributed"
    )
    (replicated,) = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    assert replicated["name"] == "node"
    torch = runtime["spec"]["mlPolicy"]["torch"]
    # v2.1.0 writes numProcPerNode: auto; v2.3.0 dropped the field (the TrainJob sets it).
    assert torch == ({"numProcPerNode": "auto"} if cluster_state["trainer"] == "v2.1.0" else {})


def test_project_manifests_apply_and_kueue_activates_the_queues(kubectl, custom, kueue_setup):
    """`kubectl apply -k` of k8s/kueue, k8s/kueue/mig, k8s/storage and k8s/rbac succeeds, and
    Kueue marks every ClusterQueue Active (all its ResourceFlavors exist).

    Kueue v0.19.2 pkg/cache/clusterqueue.go: a ClusterQueue is Active once its flavors exist.
    """
    for folder in ("kueue", "kueue/mig", "storage", "rbac"):
        out = kubectl("apply", "-k", str(REPO / "k8s" / folder))
        assert re.search(r"(created|configured|unchanged|serverside-applied)", out), out
    queues = [o["metadata"]["name"] for o in kueue_setup if o["kind"] == "ClusterQueue"]
    assert queues
    for name in queues:
        queue = wait_for(
            lambda n=name: (
                q
                if condition(
                    q := custom.get_cluster_custom_object(
                        "kueue.x-k8s.io", "v1beta2", "clusterqueues", n
                    ),
                    "Active",
                )
                == "True"
                else None
            ),
            30,
            f"ClusterQueue {name} Active",
        )
        assert queue["metadata"]["name"] == name
    pvcs = json.loads(kubectl("get", "pvc", "-n", "kubeflow", "-o", "json"))["items"]
    assert {"fmnist-models", "fmnist-workspace"} <= {p["metadata"]["name"] for p in pvcs}


def test_pytorchjob_is_queued_admitted_run_and_succeeds(namespace, custom, core, kueue_setup):
    """A PyTorchJob with a queue label goes through Kueue, the Training Operator and kwok.

    - Kueue v0.19.2 pkg/controller/jobs/kubeflow/jobs/pytorchjob (the kubeflow.org/pytorchjob
      integration enabled by k8s/kueue/config): the webhook suspends the job, a Workload owned
      by it is admitted on the first flavor with quota for every resource
      (pkg/scheduler/flavorassigner), whose nodeLabels and tolerations go into the pods.
    - Training Operator v1.9.4 pkg/controller.v1/pytorch/envvar.go: PET_NNODES, PET_NODE_RANK,
      PET_NPROC_PER_NODE, PET_MASTER_ADDR/PORT, WORLD_SIZE, RANK in container "pytorch";
      pkg/controller.v1/pytorch/pytorchjob_controller.go: Succeeded when the Master succeeds.
    - kwok stages: pods Running, then Succeeded after fmnist.test/run-duration.
    """
    local_queue, cluster_queue, flavor = queue_for(kueue_setup, GPU_RESOURCES)
    job = pytorchjob("mnist", local_queue, annotations={"fmnist.test/run-duration": "15s"})
    create(custom, namespace, job)

    workload = wait_for(
        lambda: owned_workload(custom, namespace, "PyTorchJob", "mnist"), 90, "a Workload"
    )
    admitted = wait_for(
        lambda: (
            w
            if condition(w := owned_workload(custom, namespace, "PyTorchJob", "mnist"), "Admitted")
            == "True"
            else None
        ),
        60,
        "the Workload to be admitted",
    )
    assert admitted["metadata"]["name"] == workload["metadata"]["name"]
    admission = admitted["status"]["admission"]
    assert admission["clusterQueue"] == cluster_queue
    assignments = {a["name"]: a for a in admission["podSetAssignments"]}
    assert set(assignments) == {"master", "worker"}
    for assignment in assignments.values():
        assert set(assignment["flavors"].values()) == {flavor}
        assert assignment["resourceUsage"]["nvidia.com/gpu"] == "1"
    flavor_spec = next(
        o["spec"]
        for o in kueue_setup
        if o["kind"] == "ResourceFlavor" and o["metadata"]["name"] == flavor
    )

    def pods_running():
        pods = core.list_namespaced_pod(
            namespace, label_selector="training.kubeflow.org/job-name=mnist"
        ).items
        return pods if len(pods) == 2 and all(p.status.phase == "Running" for p in pods) else None

    pods = {
        p.metadata.labels["training.kubeflow.org/replica-type"]: p
        for p in wait_for(pods_running, 60, "2 pods")
    }
    assert set(pods) == {"master", "worker"}
    for rank, kind in enumerate(("master", "worker")):
        env = env_of(pods[kind], "pytorch")
        assert env["PET_NNODES"] == "2"
        assert env["PET_NODE_RANK"] == str(rank) and env["RANK"] == str(rank)
        assert env["PET_NPROC_PER_NODE"] == "1" and env["WORLD_SIZE"] == "2"
        assert env["PET_MASTER_ADDR"] == "mnist-master-0" and env["PET_MASTER_PORT"] == "23456"
        for label, value in (flavor_spec.get("nodeLabels") or {}).items():
            assert pods[kind].spec.node_selector[label] == value
        node = core.read_node(pods[kind].spec.node_name)
        assert int(node.status.allocatable.get("nvidia.com/gpu", "0")) >= 1

    def gpus_reserved():  # the ClusterQueue's status is updated in batches, shortly after
        queue = custom.get_cluster_custom_object(
            "kueue.x-k8s.io", "v1beta2", "clusterqueues", cluster_queue
        )
        for usage in (queue.get("status") or {}).get("flavorsReservation") or []:
            for resource in usage["resources"] if usage["name"] == flavor else []:
                if resource["name"] == "nvidia.com/gpu" and int(resource["total"]) >= 2:
                    return int(resource["total"])
        return None

    assert wait_for(gpus_reserved, 10, f"2 GPUs charged to {cluster_queue}/{flavor}") >= 2

    done = wait_for(
        lambda: (
            j
            if condition(
                j := get(custom, namespace, "kubeflow.org", "v1", "pytorchjobs", "mnist"),
                "Succeeded",
            )
            == "True"
            else None
        ),
        90,
        "the PyTorchJob to succeed",
    )
    assert condition(done, "Failed") != "True"
    assert done["status"]["replicaStatuses"]["Master"].get("succeeded") == 1


def test_a_failing_pod_fails_the_pytorchjob(namespace, custom, core):
    """A pod annotated fmnist.test/fail fails (exit code from fmnist.test/exit-code) and the
    Training Operator marks the PyTorchJob Failed.

    Training Operator v1.9.4 pkg/controller.v1/pytorch/pytorchjob_controller.go
    (UpdateJobStatus: a failed replica with restartPolicy Never fails the job).
    """
    annotations = {"fmnist.test/fail": "true", "fmnist.test/exit-code": "3"}
    create(custom, namespace, pytorchjob("broken", None, workers=0, annotations=annotations))
    failed = wait_for(
        lambda: (
            j
            if condition(
                j := get(custom, namespace, "kubeflow.org", "v1", "pytorchjobs", "broken"), "Failed"
            )
            == "True"
            else None
        ),
        90,
        "the PyTorchJob to fail",
    )
    assert condition(failed, "Succeeded") != "True"
    (pod,) = core.list_namespaced_pod(
        namespace, label_selector="training.kubeflow.org/job-name=broken"
    ).items
    assert pod.status.phase == "Failed"
    (status,) = pod.status.container_statuses
    assert status.state.terminated.exit_code == 3


def test_training_operator_webhook_rejects_a_job_without_a_pytorch_container(namespace, custom):
    """Training Operator v1.9.4 pkg/webhooks/pytorch/pytorchjob_webhook.go: a replica needs a
    container named "pytorch"; the apiserver calls the webhook and refuses the object."""
    job = pytorchjob("nameless", None, workers=0)
    job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["name"] = (
        "main"
    )
    with pytest.raises(ApiException) as error:
        create(custom, namespace, job)
    assert error.value.status == 403  # controller-runtime's admission denial
    message = json.loads(error.value.body)["message"]
    assert message.startswith(
        'admission webhook "validator.pytorchjob.training-operator.kubeflow.org" denied'
    )
    assert "must have at least one container with name pytorch" in message


def test_master_pod_log_is_served_through_the_apiserver(namespace, custom, core, pod_log):
    """`kubectl logs` reaches kwok's kubelet API: the default ClusterLogs gives every
    "pytorch" container tools/controlplane/config/trainer.log; ``pod_log`` overrides one pod.

    kwok v0.8.0 pkg/kwok/server (logs), kustomize/crd/bases/kwok.x-k8s.io_{cluster,}logs.yaml.
    """
    create(
        custom,
        namespace,
        pytorchjob("logs", None, workers=0, annotations={"fmnist.test/run-duration": "30s"}),
    )
    pod = wait_for(
        lambda: next(
            (
                p
                for p in core.list_namespaced_pod(
                    namespace, label_selector="training.kubeflow.org/job-name=logs"
                ).items
                if p.status.phase == "Running"
            ),
            None,
        ),
        60,
        "the master pod to run",
    )
    text = core.read_namespaced_pod_log(pod.metadata.name, namespace, container="pytorch")
    metric_lines = [line for line in text.splitlines() if "{metricName: accuracy" in line]
    assert metric_lines[-1] == (
        "2026-01-01T00:00:20.000000Z {metricName: accuracy, metricValue: 0.8812};"
        "{metricName: loss, metricValue: 0.3301}"
    )
    pod_log(namespace, pod.metadata.name, "only this\n")
    assert wait_for(
        lambda: (
            core.read_namespaced_pod_log(pod.metadata.name, namespace, container="pytorch")
            == "only this\n"
        ),
        30,
        "the pod's own log",
    )


def trainjob(name: str, queue: str | None) -> dict:
    """A TrainJob on the torch-distributed runtime: 2 nodes, one GPU each."""
    job = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "labels": {}},
        "spec": {
            "runtimeRef": {"name": "torch-distributed"},
            "trainer": {
                "image": "ghcr.io/example/fmnist-trainer:test",
                "command": ["torchrun", "-m", "trainer", "--epochs=2"],
                "numNodes": 2,
                "resourcesPerNode": {"requests": GPU_RESOURCES, "limits": GPU_RESOURCES},
            },
        },
    }
    if queue:
        job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = queue
    else:  # without Kueue nothing adds the GPU toleration: Trainer v2.1 / v2.3 differ here
        job["spec"]["trainer"]["resourcesPerNode"] = {
            "requests": {"cpu": "1", "memory": "2Gi"},
            "limits": {"cpu": "1", "memory": "2Gi"},
        }
    return job


def trainjob_pods(core, namespace: str, name: str, count: int) -> dict[str, object]:
    """The TrainJob's pods by Job completion index, once all ``count`` exist."""

    def pods():
        found = core.list_namespaced_pod(
            namespace, label_selector=f"jobset.sigs.k8s.io/jobset-name={name}"
        ).items
        return found if len(found) == count else None

    return {
        p.metadata.annotations["batch.kubernetes.io/job-completion-index"]: p
        for p in wait_for(pods, 60, f"{count} pods of TrainJob {name}")
    }


def trainjob_complete(custom, namespace: str, name: str) -> dict:
    return wait_for(
        lambda: (
            j
            if condition(
                j := get(custom, namespace, "trainer.kubeflow.org", "v1alpha1", "trainjobs", name),
                "Complete",
            )
            == "True"
            else None
        ),
        90,
        f"TrainJob {name} to complete",
    )


def test_trainjob_runs_as_a_jobset_and_completes(namespace, custom, core):
    """A TrainJob (no queue) goes through Trainer, JobSet and kwok to Complete.

    - Trainer v2.1.0 (and v2.3.0) pkg/runtime/framework/plugins/torch/torch.go: PET_NNODES,
      PET_NPROC_PER_NODE (from the CPUs when no GPU is requested), PET_NODE_RANK (the Job
      completion index), PET_MASTER_ADDR "<name>-node-0-0.<name>", PET_MASTER_PORT 29500 in
      container "node"; pkg/controller/trainjob_controller.go: Complete when the JobSet is.
    - JobSet v0.12.0: one Job per replicated job, numNodes pods, a headless Service.
    """
    create(custom, namespace, trainjob("mnist", None))
    by_index = trainjob_pods(core, namespace, "mnist", 2)
    assert set(by_index) == {"0", "1"}
    for pod in by_index.values():
        env = {e.name: e for e in next(c for c in pod.spec.containers if c.name == "node").env}
        assert env["PET_NNODES"].value == "2"
        assert env["PET_NPROC_PER_NODE"].value == "1"  # 1 CPU per node, no GPU
        assert env["PET_MASTER_ADDR"].value == "mnist-node-0-0.mnist"
        assert env["PET_MASTER_PORT"].value == "29500"
        assert env["PET_NODE_RANK"].value_from.field_ref.field_path == (
            "metadata.annotations['batch.kubernetes.io/job-completion-index']"
        )
    done = trainjob_complete(custom, namespace, "mnist")
    assert condition(done, "Failed") != "True"


def test_trainjob_with_a_queue_label_under_kueue(
    namespace, custom, core, kueue_setup, cluster_state
):
    """Kueue v0.19.2 admits a queued TrainJob; whether it can start it depends on Trainer.

    Kueue v0.19.2 pkg/controller/jobs/trainjob/trainjob_controller.go (RunWithPodSetsInfo)
    starts an admitted TrainJob by writing the flavor's node selector and tolerations into
    ``spec.runtimePatches``, a field Trainer added in v2.2. Against Trainer v2.1.0's CRD the
    field is pruned, Kueue logs "kueue runtime patch not found" and the TrainJob stays
    suspended: Kueue >= 0.19 cannot run TrainJobs of Trainer v2.1 (Kubeflow 1.11's). With
    Trainer v2.3.0 (the tier's default) the job runs on the GPU flavor.
    """
    local_queue, cluster_queue, flavor = queue_for(kueue_setup, GPU_RESOURCES)
    create(custom, namespace, trainjob("queued", local_queue))
    admitted = wait_for(
        lambda: (
            w
            if (w := owned_workload(custom, namespace, "TrainJob", "queued"))
            and condition(w, "Admitted") == "True"
            else None
        ),
        60,
        "the TrainJob's Workload to be admitted",
    )
    assert admitted["status"]["admission"]["clusterQueue"] == cluster_queue
    (assignment,) = admitted["status"]["admission"]["podSetAssignments"]
    assert set(assignment["flavors"].values()) == {flavor}
    assert assignment["count"] == 2
    if cluster_state["trainer"] == "v2.1.0":
        time.sleep(15)  # Kueue retries with backoff; the job must still be suspended after it
        job = get(custom, namespace, "trainer.kubeflow.org", "v1alpha1", "trainjobs", "queued")
        assert job["spec"].get("suspend") is True
        assert "runtimePatches" not in job["spec"]
        assert not core.list_namespaced_pod(namespace).items
        return
    by_index = trainjob_pods(core, namespace, "queued", 2)
    flavor_spec = next(
        o["spec"]
        for o in kueue_setup
        if o["kind"] == "ResourceFlavor" and o["metadata"]["name"] == flavor
    )
    for pod in by_index.values():
        env = {
            e.name: e.value for e in next(c for c in pod.spec.containers if c.name == "node").env
        }
        assert env["PET_NPROC_PER_NODE"] == "auto"  # GPUs requested: torchrun decides
        for label, value in (flavor_spec.get("nodeLabels") or {}).items():
            assert pod.spec.node_selector[label] == value
    assert condition(trainjob_complete(custom, namespace, "queued"), "Failed") != "True"


def test_inferenceservice_raw_deployment_becomes_ready(
    namespace, custom, api_client, cluster_state
):
    """KServe without Knative: a custom predictor becomes Deployment "<name>-predictor" with
    container "kserve-container"; kwok makes its pod Ready; the InferenceService turns Ready.

    KServe v0.15.2 pkg/controller/v1beta1/inferenceservice/components/predictor.go (container
    renamed to kserve-container), reconcilers/raw/raw_kube_reconciler.go (Deployment, Service),
    config/configmap/inferenceservice.yaml (deploy.defaultDeploymentMode is Serverless, hence
    the annotation). KServe >= 0.16 calls the mode "Standard" (v0.20.0 pkg/constants/
    constants.go: "RawDeployment" is the deprecated alias). The namespace name counts: the
    host "<isvc>-predictor-<namespace>" must fit 63 characters or nothing is created.
    """
    mode = "RawDeployment" if cluster_state["kserve"] == "v0.15.2" else "Standard"
    isvc = {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {
            "name": "fmnist",
            "annotations": {"serving.kserve.io/deploymentMode": mode},
        },
        "spec": {
            "predictor": {
                "minReplicas": 1,
                "maxReplicas": 1,
                "containers": [
                    {
                        "name": "predictor",
                        "image": "ghcr.io/example/fmnist-serving:test",
                        "args": ["--model_name=fmnist"],
                        "resources": {
                            "requests": {"cpu": "1", "memory": "1Gi"},
                            "limits": {"cpu": "1", "memory": "1Gi"},
                        },
                    }
                ],
            }
        },
    }
    create(custom, namespace, isvc)
    apps = kubernetes.client.AppsV1Api(api_client)
    deployment = wait_for(
        lambda: apps.read_namespaced_deployment("fmnist-predictor", namespace), 60, "the Deployment"
    )
    containers = [c.name for c in deployment.spec.template.spec.containers]
    assert "kserve-container" in containers
    ready = wait_for(
        lambda: (
            s
            if condition(
                s := get(
                    custom, namespace, "serving.kserve.io", "v1beta1", "inferenceservices", "fmnist"
                ),
                "Ready",
            )
            == "True"
            else None
        ),
        90,
        "the InferenceService to be Ready",
    )
    assert ready["status"]["url"]
    assert condition(ready, "PredictorReady") == "True"
    available = apps.read_namespaced_deployment("fmnist-predictor", namespace)
    assert available.status.ready_replicas == 1


def experiment(name: str, max_trials: int = 2, parallel: int = 2) -> dict:
    """A Katib Experiment like the sweep's: lr and epochs, StdOut collector, PyTorchJob trials."""
    trial_job = pytorchjob("unused", None, workers=0)
    del trial_job["metadata"]["name"]
    container = trial_job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"][
        "containers"
    ][0]
    container["command"] = [
        "torchrun",
        "-m",
        "trainer",
        "--lr=${trialParameters.lr}",
        "--epochs=${trialParameters.epochs}",
    ]
    return {
        "apiVersion": "kubeflow.org/v1beta1",
        "kind": "Experiment",
        "metadata": {"name": name},
        "spec": {
            "objective": {
                "type": "maximize",
                "objectiveMetricName": "accuracy",
                "additionalMetricNames": ["loss"],
            },
            "algorithm": {"algorithmName": "random"},
            "maxTrialCount": max_trials,
            "parallelTrialCount": parallel,
            "maxFailedTrialCount": max_trials,
            "parameters": [
                {
                    "name": "lr",
                    "parameterType": "double",
                    "feasibleSpace": {"min": "0.001", "max": "0.1"},
                },
                {
                    "name": "epochs",
                    "parameterType": "int",
                    "feasibleSpace": {"min": "1", "max": "3"},
                },
            ],
            "metricsCollectorSpec": {
                "collector": {"kind": "StdOut"},
                "source": {
                    "filter": {
                        "metricsFormat": [
                            r"{metricName: ([\w|-]+), metricValue: ((-?\d+)(\.\d+)?)}"
                        ]
                    }
                },
            },
            "trialTemplate": {
                "primaryContainerName": "pytorch",
                "successCondition": 'status.conditions.#(type=="Succeeded")#|#(status=="True")#',
                "failureCondition": 'status.conditions.#(type=="Failed")#|#(status=="True")#',
                "trialParameters": [
                    {"name": "lr", "reference": "lr"},
                    {"name": "epochs", "reference": "epochs"},
                ],
                "trialSpec": trial_job,
            },
        },
    }


def test_katib_webhook_rejects_an_invalid_experiment(namespace, custom):
    """Katib v0.19.0 pkg/webhook/v1beta1/experiment/validator/validator.go: parallelTrialCount
    may not exceed maxTrialCount."""
    with pytest.raises(ApiException) as error:
        create(custom, namespace, experiment("too-parallel", max_trials=1, parallel=3))
    assert error.value.status == 400  # the validator answers admission.Errored(400, ...)
    message = json.loads(error.value.body)["message"]
    assert message.startswith('admission webhook "validator.experiment.katib.kubeflow.org" denied')
    assert "parallelTrialCount" in message


def test_katib_experiment_creates_trials_and_their_pytorchjobs(namespace, custom):
    """The Katib webhook accepts the Experiment; Katib asks its suggestion service (goptuna,
    run by the harness, reached through connect_proxy.py) for assignments, creates Trials and
    from each a PyTorchJob with ${trialParameters.*} substituted.

    Katib v0.19.0 pkg/controller.v1beta1/experiment (Trials), suggestion (Deployment +
    gRPC GetSuggestions), trial/trial_controller.go + manifest/generator.go (the job).
    Metrics cannot be collected here: Katib's collector sidecar reads the trainer's real
    stdout and reports to katib-db-manager, and neither runs under kwok, so the trials never
    get observations; this test stops at the jobs.
    """
    create(custom, namespace, experiment("sweep"))

    def trials():
        items = custom.list_namespaced_custom_object(
            "kubeflow.org", "v1beta1", namespace, "trials"
        )["items"]
        return items if len(items) == 2 else None

    found = wait_for(trials, 120, "two Trials")
    for trial in found:
        assigned = {a["name"]: a["value"] for a in trial["spec"]["parameterAssignments"]}
        assert 0.001 <= float(assigned["lr"]) <= 0.1
        assert int(assigned["epochs"]) in (1, 2, 3)
        name = trial["metadata"]["name"]
        job = wait_for(
            lambda n=name: get(custom, namespace, "kubeflow.org", "v1", "pytorchjobs", n),
            60,
            f"PyTorchJob {name}",
        )
        command = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0][
            "command"
        ]
        assert f"--lr={assigned['lr']}" in command
        assert f"--epochs={assigned['epochs']}" in command


def test_pipeline_account_acts_under_the_project_role(pipeline_account, namespace):
    """The apiserver enforces k8s/rbac/role.yaml for the pipeline's ServiceAccount token:
    allowed in its namespace, refused outside it and for what the Role does not grant."""
    custom = kubernetes.client.CustomObjectsApi(pipeline_account.api_client)
    core = kubernetes.client.CoreV1Api(pipeline_account.api_client)
    created = create(custom, namespace, pytorchjob("as-runner", None, workers=0))
    assert created["metadata"]["namespace"] == namespace
    assert core.list_namespaced_pod(namespace).items is not None
    for call in (
        lambda: core.list_node(),
        lambda: custom.list_namespaced_custom_object(
            "kubeflow.org", "v1", namespace, "pytorchjobs"
        ),
        lambda: create(custom, "kubeflow", pytorchjob("elsewhere", None, workers=0)),
        lambda: core.list_namespaced_secret(namespace),
        lambda: kubernetes.client.AppsV1Api(
            pipeline_account.api_client
        ).delete_namespaced_deployment("anything", namespace),
    ):
        with pytest.raises(ApiException) as error:
            call()
        assert error.value.status == 403


def test_as_pipeline_routes_project_code_to_the_service_account(as_pipeline, namespace):
    """Code that calls ``kubernetes.config.load_incluster_config()`` (as the steps do) gets the
    pipeline account's identity."""
    kubernetes.config.load_incluster_config()
    review = kubernetes.client.AuthenticationV1Api().create_self_subject_review(
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    )
    assert review.status.user_info.username == f"system:serviceaccount:{namespace}:pipeline-runner"


def test_apiserver_restart_keeps_state_and_controllers_recover(
    namespace, custom, restart_apiserver
):
    """After the kube-apiserver restarts (same etcd) objects are still there and the
    controllers, reconnecting, still act: a PyTorchJob created afterwards runs to success."""
    create(custom, namespace, pytorchjob("before", None, workers=0))
    restart_apiserver(down_seconds=2)
    assert (
        get(custom, namespace, "kubeflow.org", "v1", "pytorchjobs", "before")["metadata"]["name"]
        == "before"
    )
    create(custom, namespace, pytorchjob("after", None, workers=0))
    wait_for(
        lambda: (
            condition(
                get(custom, namespace, "kubeflow.org", "v1", "pytorchjobs", "after"), "Succeeded"
            )
            == "True"
        ),
        90,
        "the PyTorchJob created after the restart to succeed",
    )
