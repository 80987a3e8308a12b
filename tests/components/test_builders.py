"""The pure builders: exact objects, table-driven variants, strict upstream CRD checks, and
the Pod Security Standard "restricted" on every pod they describe (tests/pss.py)."""

import copy
import re

import pytest
from pss import violations

from components.specs.compat import deployment_mode_name
from components.specs.inferenceservice import inference_service
from components.specs.karmada import propagation_policy
from components.specs.params import Serving, TrainingJob
from components.specs.pods import GPU_TOLERATION, Placement, TrainerFlags, pvc_volume, volume_mount
from components.specs.pytorchjob import pytorchjob
from components.specs.training_job import training_job
from components.specs.trainjob import trainjob
from serving.defaults import DRAIN_SECONDS
from trainer.model_dir import pvc_uri

FLAGS = TrainerFlags(
    data_dir="/ws/train/data",
    model_dir="/ws/train/model",
    checkpoint_dir="/ws/train/checkpoints",
    recipe=dict(epochs=3, batch_size=64, lr=0.01, momentum=0.5, optimizer="adamw"),
)
ARGS = FLAGS.args()  # test_pods.py checks these flags' literal argv
WORKSPACE = Placement(
    volumes=[pvc_volume("kfp-workspace", "run-1-kfp-workspace")],
    volume_mounts=[volume_mount("kfp-workspace", "/ws")],
)
# The user is set on our containers only, so that containers controllers inject do not
# inherit runAsNonRoot (tests/components/test_pod_security.py).
RESTRICTED_POD = {
    "fsGroup": 10001,
    "fsGroupChangePolicy": "OnRootMismatch",
    "seccompProfile": {"type": "RuntimeDefault"},
}
RESTRICTED_CONTAINER = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
    "runAsUser": 10001,
}
SHM = {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}}
SHM_MOUNT = {"name": "dshm", "mountPath": "/dev/shm"}
VARIANTS = {
    "cpu": {},
    "gpus": {"gpus_per_worker": 2, "nproc_per_node": 2, "workers": 3},
    "mig": {"gpus_per_worker": 1, "gpu_resource": "nvidia.com/mig-1g.10gb"},
    "multi-process": {"nproc_per_node": 4, "workers": 1, "shm_size": "2Gi"},
    "priority": {"priority_class": "fmnist-production", "queue_name": "team-a"},
}
CPU_NODE = {"cpu": "2", "memory": "4Gi"}
# Each variant's per-node limits, written out: GPUs under the resource name the user gave.
LIMITS = {
    "cpu": CPU_NODE,
    "gpus": {**CPU_NODE, "nvidia.com/gpu": "2"},
    "mig": {**CPU_NODE, "nvidia.com/mig-1g.10gb": "1"},
    "multi-process": CPU_NODE,
    "priority": CPU_NODE,
}

DRAIN_COMMAND = [
    "python",
    "-c",
    "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/drain', timeout=15)",
]


def test_pytorchjob_single_node_exact_object(validate_crd):
    job = TrainingJob(workers=1, epochs=3, trainer_cpu_image="trainer:1")
    built = pytorchjob(
        name="fmnist-abc", namespace="team-a", job=job, args=ARGS, placement=WORKSPACE
    )
    container = {
        "name": "pytorch",
        "image": "trainer:1",
        "command": ["torchrun", "-m", "trainer"],
        "args": [*ARGS, "--num-threads=2"],  # the CPU limit
        "resources": {
            "requests": {"cpu": "2", "memory": "4Gi"},
            "limits": {"cpu": "2", "memory": "4Gi"},
        },
        "securityContext": RESTRICTED_CONTAINER,
        "ports": [{"name": "pytorchjob-port", "containerPort": 23456}],
        "env": [{"name": "OMP_NUM_THREADS", "value": "2"}],
        "volumeMounts": [{"name": "kfp-workspace", "mountPath": "/ws"}],
    }
    template = {
        "metadata": {"labels": {"sidecar.istio.io/inject": "false", "fmnist.dev/role": "training"}},
        "spec": {
            "securityContext": RESTRICTED_POD,
            "automountServiceAccountToken": False,
            "containers": [container],
            "volumes": [
                {
                    "name": "kfp-workspace",
                    "persistentVolumeClaim": {"claimName": "run-1-kfp-workspace"},
                }
            ],
        },
    }
    assert built == {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {
            "name": "fmnist-abc",
            "namespace": "team-a",
            "labels": {"kueue.x-k8s.io/queue-name": "fmnist-cpu"},
        },
        "spec": {
            "nprocPerNode": "1",
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": template}
            },
            "runPolicy": {
                "activeDeadlineSeconds": 7200,
                "backoffLimit": 3,
                "cleanPodPolicy": "Running",
                "ttlSecondsAfterFinished": 3600,
            },
        },
    }
    validate_crd(built)


@pytest.mark.parametrize("workers", [1, 2, 4, 8])
def test_the_backoff_limit_lets_every_rank_restart_three_times(workers):
    """One failure restarts every rank: the dead one, and its peers whose collectives fail. The
    Training Operator sums the container restarts of all Running pods against backoffLimit
    (training-operator v1.9.4 pkg/core/job.go PastBackoffLimit), so a limit of 3 failed a
    4-replica job at its first failure (4 restarts) and a 2-replica one at its second."""
    job = TrainingJob(workers=workers)
    built = pytorchjob(name="j", namespace="n", job=job, args=ARGS, placement=WORKSPACE)
    assert built["spec"]["runPolicy"]["backoffLimit"] == 3 * workers


def pod_specs(job: dict) -> list[dict]:
    """Every pod spec a training job object describes (TrainJob: its patch of the runtime)."""
    if job["kind"] == "PyTorchJob":
        return [spec["template"]["spec"] for spec in job["spec"]["pytorchReplicaSpecs"].values()]
    patch = job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]
    return [patch["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]]


@pytest.mark.parametrize("variant", VARIANTS, ids=str)
def test_pytorchjob_variants_are_valid_restricted_and_sized(variant, validate_crd):
    job = TrainingJob(**VARIANTS[variant])
    built = training_job(
        "pytorchjob", name="j", namespace="n", job=job, flags=FLAGS, placement=WORKSPACE
    )
    validate_crd(built)
    replicas = built["spec"]["pytorchReplicaSpecs"]
    assert replicas["Master"]["replicas"] == 1
    assert replicas.get("Worker", {}).get("replicas", 0) == job.workers - 1
    assert built["spec"]["nprocPerNode"] == str(job.nproc_per_node)
    assert built["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == job.queue
    assert ("kueue.x-k8s.io/priority-class" in built["metadata"]["labels"]) == bool(
        job.priority_class
    )
    for pod in pod_specs(built):
        assert violations(pod) == []
        resources = pod["containers"][0]["resources"]
        assert resources == {"requests": CPU_NODE, "limits": LIMITS[variant]}
        has_shm = {
            "name": "dshm",
            "emptyDir": {"medium": "Memory", "sizeLimit": job.shm_size},
        } in pod["volumes"]
        assert has_shm == job.needs_shm
        assert (SHM_MOUNT in pod["containers"][0]["volumeMounts"]) == job.needs_shm


@pytest.mark.parametrize("api", ["pytorchjob", "trainjob"])
@pytest.mark.parametrize("variant", VARIANTS, ids=str)
def test_pods_run_the_cuda_trainer_only_when_they_request_gpus(variant, api):
    """The CUDA image (GBs of CUDA libraries) for GPU pods; the CPU variant for the rest."""
    images = dict(trainer_image="trainer:1", trainer_cpu_image="trainer:1-cpu")
    job = TrainingJob(**VARIANTS[variant], **images)
    built = training_job(api, name="j", namespace="n", job=job, flags=FLAGS, placement=WORKSPACE)
    if api == "pytorchjob":
        used = {pod["containers"][0]["image"] for pod in pod_specs(built)}
    else:
        used = {built["spec"]["trainer"]["image"]}
    assert used == {"trainer:1" if job.gpus_per_worker else "trainer:1-cpu"}


def test_the_runtime_patch_manager_is_a_domain_prefixed_path():
    """Trainer v2.3.0's webhook refuses any other manager (pkg/runtime/framework/plugins/
    jobset/jobset.go: validation.IsDomainPrefixedPath, i.e. ``<DNS subdomain>/<path>``); the
    real-pod TrainJob test found "fmnist-pipeline" refused."""
    built = trainjob(
        name="j",
        namespace="n",
        job=TrainingJob(),
        args=ARGS,
        placement=WORKSPACE,
        generation="v2.2",
    )
    (patch,) = built["spec"]["runtimePatches"]
    domain, _, path = patch["manager"].partition("/")
    assert path and "." in domain
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*", domain)


@pytest.mark.parametrize("variant", VARIANTS, ids=str)
def test_trainjob_v2_3_variants_are_valid_restricted_and_sized(variant, validate_crd):
    """Trainer v2.3.0 (kubeflow/trainer pkg/apis/trainer/v1alpha1/trainjob_types.go):
    pod-level settings go through spec.runtimePatches, the deadline is activeDeadlineSeconds."""
    job = TrainingJob(**VARIANTS[variant])
    built = trainjob(
        name="j", namespace="n", job=job, args=ARGS, placement=WORKSPACE, generation="v2.2"
    )
    validate_crd(built)
    trainer = built["spec"]["trainer"]
    assert (trainer["numNodes"], trainer["numProcPerNode"]) == (job.workers, job.nproc_per_node)
    threads = [] if job.gpus_per_worker else [f"--num-threads={max(1, 2 // job.nproc_per_node)}"]
    assert trainer["command"] == ["torchrun", "-m", "trainer"]
    assert trainer["args"] == [*ARGS, *threads]  # CPU nodes: bounded by their 2 CPUs
    assert trainer["resourcesPerNode"] == {"requests": CPU_NODE, "limits": LIMITS[variant]}
    assert built["spec"]["activeDeadlineSeconds"] == job.timeout_seconds
    assert built["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == job.queue
    (pod,) = pod_specs(built)
    runtime_container = {"name": "node", "image": "pytorch/pytorch"}  # the runtime's own
    merged = copy.deepcopy(pod)
    merged["containers"] = [{**runtime_container, **pod["containers"][0]}]
    assert violations(merged) == []
    assert (
        SHM in pod["volumes"]
        or {**SHM, "emptyDir": {"medium": "Memory", "sizeLimit": "2Gi"}} in pod["volumes"]
    ) == job.needs_shm


@pytest.mark.parametrize("variant", VARIANTS, ids=str)
def test_trainjob_v2_1_variants_are_valid_for_kubeflow_1_11(variant, validate_crd_at):
    """Trainer v2.1.0 (Kubeflow 1.11.0): spec.podTemplateOverrides; it has no securityContext
    or deadline field (v2.1.0 pkg/apis/trainer/v1alpha1/trainjob_types.go). The override's
    metadata labels reach the pods (v2.1.0 pkg/runtime/core/trainingruntime.go,
    mergePodTemplateOverrides); spec.labels would label only the JobSet."""
    job = TrainingJob(**VARIANTS[variant])
    built = trainjob(
        name="j", namespace="n", job=job, args=ARGS, placement=WORKSPACE, generation="v2.1"
    )
    validate_crd_at("trainer", "v2.1.0")(built)
    resources = built["spec"]["trainer"]["resourcesPerNode"]
    assert resources == {"requests": CPU_NODE, "limits": LIMITS[variant]}
    (override,) = built["spec"]["podTemplateOverrides"]
    assert override["targetJobs"] == [{"name": "node"}]
    assert override["spec"]["volumes"][0] == WORKSPACE.volumes[0]
    assert (len(override["spec"]["volumes"]) == 2) == job.needs_shm
    assert override["metadata"] == {
        "labels": {"sidecar.istio.io/inject": "false", "fmnist.dev/role": "training"}
    }
    assert "labels" not in built["spec"]
    assert "runtimePatches" not in built["spec"] and "activeDeadlineSeconds" not in built["spec"]


def test_the_v2_1_trainjob_does_not_pass_the_v2_3_schema(validate_crd):
    """The two generations really differ: v2.3.0 removed podTemplateOverrides."""
    built = trainjob(
        name="j",
        namespace="n",
        job=TrainingJob(),
        args=ARGS,
        placement=WORKSPACE,
        generation="v2.1",
    )
    with pytest.raises(Exception, match="podTemplateOverrides|labels"):
        validate_crd(built)


@pytest.mark.parametrize(
    ("mode", "legacy", "written"),
    [
        ("Standard", True, "RawDeployment"),
        ("RawDeployment", True, "RawDeployment"),
        ("Knative", True, "Serverless"),
        ("Standard", False, "Standard"),
        ("RawDeployment", False, "Standard"),
        ("Serverless", False, "Knative"),
    ],
)
def test_mode_names_follow_the_kserve_release(mode, legacy, written):
    """KServe <= 0.15 knows RawDeployment/Serverless, >= 0.16 Standard/Knative
    (kserve pkg/constants/constants.go at v0.15.2 and v0.16.0)."""
    assert deployment_mode_name(mode, legacy) == written


def test_inference_service_exact_object(validate_crd, validate_crd_at):
    serving = Serving(serving_image="serving:1", serving_gpus=1)
    uri = pvc_uri("fmnist-models", "fashion-mnist/run-1")
    built = inference_service(
        serving=serving, namespace="team-a", storage_uri=uri, mode_annotation="Standard"
    )
    assert built == {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {
            "name": "fashion-mnist",
            "labels": {"app.kubernetes.io/managed-by": "fmnist-pipeline"},
            "namespace": "team-a",
            "annotations": {"serving.kserve.io/deploymentMode": "Standard"},
        },
        "spec": {
            "predictor": {
                "labels": {"fmnist.dev/role": "predictor"},
                "minReplicas": 1,
                "maxReplicas": 1,
                "securityContext": RESTRICTED_POD,
                "tolerations": [GPU_TOLERATION],
                "terminationGracePeriodSeconds": 40,
                "serviceAccountName": "fmnist-predictor",
                "automountServiceAccountToken": False,
                "containers": [
                    {
                        "name": "kserve-container",
                        "image": "serving:1",
                        "command": ["python", "-m", "serving"],
                        "args": [
                            "--model_name=fashion-mnist",
                            "--model_dir=/mnt/models",
                            "--http_port=8080",
                            "--device=cuda",
                        ],
                        "env": [
                            {
                                "name": "STORAGE_URI",
                                "value": "pvc://fmnist-models/fashion-mnist/run-1",
                            }
                        ],
                        "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                        "resources": {
                            "requests": {"cpu": "1", "memory": "2Gi"},
                            "limits": {"cpu": "1", "memory": "2Gi", "nvidia.com/gpu": "1"},
                        },
                        "securityContext": RESTRICTED_CONTAINER,
                        "lifecycle": {"preStop": {"exec": {"command": DRAIN_COMMAND}}},
                        "readinessProbe": {
                            "tcpSocket": {"port": 8080},
                            "periodSeconds": 1,
                            "timeoutSeconds": 1,
                            "failureThreshold": 3,
                        },
                    }
                ],
            }
        },
    }
    validate_crd(built)
    validate_crd_at("kserve", "v0.15.2")(built)
    assert violations(built["spec"]["predictor"]) == []


@pytest.mark.parametrize(
    ("changes", "limits"),
    [
        ({}, {"cpu": "1", "memory": "2Gi"}),
        ({"serving_gpus": 2}, {"cpu": "1", "memory": "2Gi", "nvidia.com/gpu": "2"}),
        (
            {"serving_gpus": 1, "serving_gpu_resource": "nvidia.com/mig-1g.10gb"},
            {"cpu": "1", "memory": "2Gi", "nvidia.com/mig-1g.10gb": "1"},
        ),
        (
            {"serving_gpus": 1, "serving_gpu_resource": "amd.com/gpu"},
            {"cpu": "1", "memory": "2Gi", "amd.com/gpu": "1"},
        ),
    ],
    ids=["cpu", "gpus", "mig", "amd"],
)
def test_the_predictor_asks_for_the_serving_gpu_resource(changes, limits, validate_crd):
    serving = Serving(**changes, serving_image="serving-cuda:1")  # the default one is CPU-only
    built = inference_service(
        serving=serving, namespace="team-a", storage_uri="pvc://m/x", mode_annotation="Standard"
    )
    validate_crd(built)
    (container,) = built["spec"]["predictor"]["containers"]
    assert container["resources"] == {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": limits}


def test_the_predictor_asks_for_the_serving_cpu_and_memory(validate_crd):
    serving = Serving(serving_cpu="500m", serving_memory="1Gi")
    built = inference_service(
        serving=serving, namespace="team-a", storage_uri="pvc://m/x", mode_annotation="Standard"
    )
    validate_crd(built)
    (container,) = built["spec"]["predictor"]["containers"]
    quantities = {"cpu": "500m", "memory": "1Gi"}
    assert container["resources"] == {"requests": quantities, "limits": quantities}


@pytest.mark.parametrize(("mode", "drains"), [("Standard", True), ("Knative", False)])
def test_a_standard_predictor_drains_before_it_stops(mode, drains, validate_crd):
    """The preStop hook runs before SIGTERM (k8s.io/kubernetes v1.36.3 pkg/kubelet/kuberuntime/
    kuberuntime_container.go killContainer); in the grace period, after the drain, uvicorn
    still has 30 s to stop. Knative's queue-proxy drains its pods itself."""
    serving = Serving(deployment_mode=mode)
    built = inference_service(
        serving=serving, namespace="team-a", storage_uri="pvc://m/x", mode_annotation=mode
    )
    validate_crd(built)
    predictor = built["spec"]["predictor"]
    (container,) = predictor["containers"]
    if drains:
        hook = {"exec": {"command": DRAIN_COMMAND}}  # from inside: the drain takes loopback only
        assert container["lifecycle"] == {"preStop": hook}
        assert predictor["terminationGracePeriodSeconds"] == DRAIN_SECONDS + 30
    else:
        assert "lifecycle" not in container and "terminationGracePeriodSeconds" not in predictor


@pytest.mark.parametrize(("mode", "probed"), [("Standard", True), ("Knative", False)])
def test_a_standard_predictor_is_probed_every_second(mode, probed, validate_crd):
    """KServe gives a container without a readiness probe a TCP check every 10 s (kserve
    v0.15.2 reconcilers/deployment/deployment_reconciler.go setDefaultPodSpec): a started
    predictor waited up to 10 s to join its Service. Knative probes on its own."""
    built = inference_service(
        serving=Serving(deployment_mode=mode),
        namespace="a",
        storage_uri="pvc://m/x",
        mode_annotation=mode,
    )
    validate_crd(built)
    (container,) = built["spec"]["predictor"]["containers"]
    if probed:
        assert container["readinessProbe"] == {
            "tcpSocket": {"port": 8080},
            "periodSeconds": 1,
            "timeoutSeconds": 1,
            "failureThreshold": 3,
        }
    else:
        assert "readinessProbe" not in container


def test_karmada_policy_selects_both_job_kinds_of_the_queue(validate_crd):
    policy = propagation_policy(
        name="p", namespace="kubeflow", queue_name="fmnist-gpu", clusters=["a", "b"]
    )
    validate_crd(policy)
    kinds = {(s["apiVersion"], s["kind"]) for s in policy["spec"]["resourceSelectors"]}
    assert kinds == {
        ("kubeflow.org/v1", "PyTorchJob"),
        ("trainer.kubeflow.org/v1alpha1", "TrainJob"),
    }
    for selector in policy["spec"]["resourceSelectors"]:
        assert selector["labelSelector"] == {
            "matchLabels": {"kueue.x-k8s.io/queue-name": "fmnist-gpu"}
        }


def test_pss_check_catches_what_restricted_forbids():
    """The checker itself can fail: a root, privileged pod with a hostPath breaks five controls."""
    pod = {
        "hostNetwork": True,
        "volumes": [{"name": "h", "hostPath": {"path": "/"}}],
        "containers": [{"name": "c", "securityContext": {"privileged": True, "runAsUser": 0}}],
    }
    found = violations(pod)
    for control in (
        "host namespaces",
        "volume types",
        "privileged",
        "privilege escalation",
        "seccomp",
        "capabilities",
        "running as non-root",
    ):
        assert any(line.startswith(control) for line in found), control
