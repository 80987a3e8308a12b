"""Our pods as a real node receives them: with what upstream controllers add, as the kubelet
and the Pod Security admission of a "baseline" namespace judge them (tests/upstream_pods.py
transcribes the upstream code; tests/pss.py the profiles), and bounded by their CPU limit.
"""

import copy

import pytest
from pss import baseline_violations, violations
from upstream_pods import (
    KATIB_COLLECTOR,
    effective_context,
    image_users,
    katib_primary_pod,
    kubelet_refusals,
    worker_pod,
)

from components.images import default_image
from components.specs import katib_experiment
from components.specs.inferenceservice import inference_service
from components.specs.kinds import JOB_KINDS
from components.specs.params import DataSlice, ParamError, Serving, TrainingJob
from components.specs.pods import (
    GPU_TOLERATION,
    TrainerFlags,
    WorkPaths,
    cpu_threads,
    workspace_placement,
)
from components.specs.staging_pod import staging_pod
from components.specs.sweep import Sweep
from components.specs.training_job import training_job

JOB = TrainingJob(trainer_cpu_image="trainer:1")  # the defaults: two nodes of 2 CPUs
PATHS = WorkPaths.under("/kfp-workspace")
PLACEMENT = workspace_placement("run-1-kfp-workspace")
# Every field today's containers get, and the pod-wide ones (the fix must not weaken them).
OUR_CONTAINERS_GET = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
    "runAsUser": 10001,
    "seccompProfile": {"type": "RuntimeDefault"},
}
FRESH_PVCS = {"fsGroup": 10001, "fsGroupChangePolicy": "OnRootMismatch"}


def build(api: str, job: TrainingJob = JOB, generation: str = "v2.2") -> dict:
    flags = TrainerFlags.for_job(job, PATHS)
    return training_job(
        api,
        name="fmnist-abc",
        namespace="team-a",
        job=job,
        flags=flags,
        placement=PLACEMENT,
        generation=generation,
    )


def replica_pod(job: dict, replica: str) -> dict:
    return job["spec"]["pytorchReplicaSpecs"][replica]["template"]["spec"]


def trainjob_pod(job: dict) -> dict:
    """A TrainJob's node pod: the runtime's container with our runtimePatch merged in."""
    patch = job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]
    pod = copy.deepcopy(patch["replicatedJobs"][0]["template"]["spec"]["template"]["spec"])
    runtime_container = {"name": "node", "image": job["spec"]["trainer"]["image"]}
    pod["containers"] = [{**runtime_container, **pod["containers"][0]}]
    return pod


def test_a_worker_with_the_operators_init_pytorch_starts_in_a_baseline_namespace():
    """Defect 1 (issue 18): training-operator v1.9.4 adds init-pytorch (alpine:3.10, root, no
    securityContext; pkg/controller.v1/pytorch/initcontainer.go, pkg/config/config.go) to every
    Worker; a pod-level runAsNonRoot made the kubelet refuse it (k8s.io/kubernetes v1.36.3
    pkg/kubelet/kuberuntime/security_context_others.go, verifyRunAsNonRoot)."""
    built = build("pytorchjob")
    worker = worker_pod(replica_pod(built, "Worker"), "fmnist-abc")
    assert [c["name"] for c in worker["initContainers"]] == ["init-pytorch"]
    assert kubelet_refusals(worker, image_users("trainer:1")) == []
    assert baseline_violations(worker) == []
    master = replica_pod(built, "Master")
    assert kubelet_refusals(master, image_users("trainer:1")) == []


@pytest.mark.parametrize("api", ["pytorchjob", "trainjob"])
def test_a_katib_trials_primary_pod_starts_in_a_baseline_namespace(api):
    """Defect 2 (issue 18): Katib v0.19.0's webhook adds the StdOut collector (image FROM
    alpine:3.15, no USER: root) with no securityContext by default
    (pkg/webhook/v1beta1/pod/inject_webhook.go, getMetricsCollectorContainer); a pod-level
    runAsNonRoot made the kubelet refuse it and every trial ran to its deadline."""
    job = build(api)
    template = katib_experiment.trial_template(Sweep(), JOB_KINDS[api], strip_identity(job))
    trial = template["trialSpec"]
    pod = replica_pod(trial, "Master") if api == "pytorchjob" else trainjob_pod(trial)
    primary = katib_primary_pod(pod, template["primaryContainerName"])
    assert primary["containers"][-1]["name"] == KATIB_COLLECTOR
    assert "securityContext" not in primary["containers"][-1]
    assert kubelet_refusals(primary, image_users("trainer:1")) == []
    assert baseline_violations(primary) == []


def strip_identity(job: dict) -> dict:
    """A job as a trial template holds it: Katib names it."""
    trial = copy.deepcopy(job)
    trial["metadata"] = {"labels": trial["metadata"]["labels"]}
    return trial


def test_with_katibs_inject_security_context_the_trial_pod_is_restricted():
    """What k8s/katib sets (init.controller.injectSecurityContext, katib v0.19.0
    pkg/apis/config/v1beta1/types.go): the collector gets our container's context."""
    template = katib_experiment.trial_template(
        Sweep(), JOB_KINDS["pytorchjob"], strip_identity(build("pytorchjob"))
    )
    pod = replica_pod(template["trialSpec"], "Master")
    primary = katib_primary_pod(pod, "pytorch", inject_security_context=True)
    assert violations(primary) == []
    assert kubelet_refusals(primary, image_users("trainer:1")) == []
    without = katib_primary_pod(pod, "pytorch")
    assert f"privilege escalation: {KATIB_COLLECTOR} must set allowPrivilegeEscalation false" in (
        violations(without)
    )


def every_pod_we_create() -> dict[str, tuple[dict, dict]]:
    """(pod spec, our main container) of each pod the project creates, by name."""
    pytorchjob = build("pytorchjob")
    isvc = inference_service(
        serving=Serving(), namespace="team-a", storage_uri="pvc://m/x", mode_annotation="Standard"
    )
    staging = staging_pod("s", "team-a", "ws", "trainer:1", DataSlice())["spec"]
    pods = {
        "pytorchjob master": replica_pod(pytorchjob, "Master"),
        "pytorchjob worker": replica_pod(pytorchjob, "Worker"),
        "trainjob node": trainjob_pod(build("trainjob")),
        "predictor": isvc["spec"]["predictor"],
        "staging": staging,
    }
    return {name: (pod, pod["containers"][0]) for name, pod in pods.items()}


@pytest.mark.parametrize("name", list(every_pod_we_create()))
def test_our_containers_keep_every_restricted_setting_and_pvcs_get_our_group(name):
    """The user settings moved from the pod to our containers: the effective context of our
    own container is what it was, plus the numeric user; fresh PVCs get the images' group
    (defect 3: fsGroup, changed only when the volume's root lacks it)."""
    pod, container = every_pod_we_create()[name]
    effective = effective_context(pod, container)
    assert {key: effective.get(key) for key in OUR_CONTAINERS_GET} == OUR_CONTAINERS_GET
    assert (
        "runAsNonRoot" not in pod["securityContext"] and "runAsUser" not in pod["securityContext"]
    )
    assert {key: pod["securityContext"].get(key) for key in FRESH_PVCS} == FRESH_PVCS
    assert violations(pod) == []


@pytest.mark.parametrize(
    ("changes", "threads"),
    [
        ({}, 2),  # the default: 2 CPUs, one process per node
        ({"cpu": "4", "nproc_per_node": 2}, 2),
        ({"cpu": "3", "nproc_per_node": 2}, 1),  # 1.5 each, rounded down
        ({"cpu": "1500m"}, 1),
        ({"cpu": "500m"}, 1),  # at least one
        ({"cpu": "16", "workers": 1}, 16),
    ],
)
def test_cpu_training_pods_bound_torchs_threads_by_their_cpu_limit(changes, threads):
    """Defect 4 (issue 18): torch starts one intra-op thread per core of the node; the
    trainer's --num-threads (trainer/__main__.py: torch.set_num_threads) and OMP_NUM_THREADS
    now follow the container's CPU limit, per process, in PyTorchJob, TrainJob and trials."""
    job = TrainingJob(**changes)
    assert cpu_threads(job) == threads
    pytorchjob, trainjob = build("pytorchjob", job), build("trainjob", job)
    trial = katib_experiment.trial_template(
        Sweep(), JOB_KINDS["pytorchjob"], strip_identity(pytorchjob)
    )
    containers = [
        replica_pod(pytorchjob, "Master")["containers"][0],
        trainjob["spec"]["trainer"],
        replica_pod(trial["trialSpec"], "Master")["containers"][0],
    ]
    for container in containers:
        assert container["args"][-1] == f"--num-threads={threads}"
        assert {"name": "OMP_NUM_THREADS", "value": str(threads)} in container["env"]


def test_gpu_training_pods_keep_torchs_default_threads():
    job = TrainingJob(gpus_per_worker=2, nproc_per_node=2)
    assert cpu_threads(job) is None
    container = replica_pod(build("pytorchjob", job), "Master")["containers"][0]
    assert not any(arg.startswith("--num-threads") for arg in container["args"])
    assert "env" not in container


def test_an_omp_setting_passed_to_the_step_wins():
    placement = copy.deepcopy(PLACEMENT)
    placement.env.append({"name": "OMP_NUM_THREADS", "value": "7"})
    built = training_job(
        "pytorchjob",
        name="j",
        namespace="n",
        job=JOB,
        flags=TrainerFlags.for_job(JOB, PATHS),
        placement=placement,
    )
    env = replica_pod(built, "Master")["containers"][0]["env"]
    assert [item for item in env if item["name"] == "OMP_NUM_THREADS"] == [
        {"name": "OMP_NUM_THREADS", "value": "7"}
    ]


def test_serving_gpus_with_the_cpu_only_default_image_is_refused():
    """Defect 5 (issue 18): images/serving.Dockerfile installs CPU torch; a GPU it never uses
    is refused, naming the parameter."""
    with pytest.raises(ParamError) as refused:
        Serving(serving_gpus=1)
    assert refused.value.name == "serving_gpus"
    assert str(refused.value).startswith(
        f"serving_gpus must be 0 with the default serving image {default_image('serving')}"
    )
    assert "\n" not in str(refused.value)


def test_a_gpu_predictor_runs_on_cuda_and_tolerates_the_gpu_taint():
    """With a CUDA image the predictor asks for the GPU, uses it (serving --device=cuda:
    a CPU-only image stops at start, serving/__main__.py) and tolerates the GPU nodes'
    taint like the training pods."""
    serving = Serving(serving_gpus=1, serving_image="serving-cuda:1")
    predictor = inference_service(
        serving=serving, namespace="n", storage_uri="pvc://m/x", mode_annotation="Standard"
    )["spec"]["predictor"]
    assert predictor["tolerations"] == [GPU_TOLERATION]
    assert predictor["containers"][0]["args"][-1] == "--device=cuda"
    cpu = inference_service(
        serving=Serving(), namespace="n", storage_uri="pvc://m/x", mode_annotation="Standard"
    )["spec"]["predictor"]
    assert "tolerations" not in cpu
    assert not any(arg.startswith("--device") for arg in cpu["containers"][0]["args"])


def test_pods_that_never_call_the_api_mount_no_service_account_token():
    """Training, staging and predictor pods call no API; the TrainJob's pods get the setting
    from our ClusterTrainingRuntime, since runtimePatches cannot carry it (kubeflow/trainer
    v2.3.0 manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml)."""
    import yaml

    from components.specs.pytorchjob import pytorchjob

    job = pytorchjob(name="j", namespace="n", job=TrainingJob(), args=[], placement=PLACEMENT)
    runtime = yaml.safe_load(open("k8s/trainer/torch-distributed.yaml"))
    node = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]
    pods = {
        "Master": job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"],
        "Worker": job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"],
        "staging": staging_pod("s", "n", "pvc", "img", DataSlice())["spec"],
        "predictor": inference_service(
            serving=Serving(), namespace="n", storage_uri="pvc://m/x", mode_annotation="Standard"
        )["spec"]["predictor"],
        "trainjob runtime": node["template"]["spec"],
    }
    assert {name: pod.get("automountServiceAccountToken") for name, pod in pods.items()} == (
        dict.fromkeys(pods, False)
    )
