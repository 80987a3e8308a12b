"""Pieces of every pod the project creates; pure functions returning plain dicts, no I/O.

The trainer's command, resources, placement, restricted security, /dev/shm, CPU threads.

The training pods of both job kinds and the predictor are built from these, so they run
the same command with the same volumes and pass the same Pod Security Standard.

Who runs as whom: ``runAsNonRoot`` and ``runAsUser`` are set on our containers, never on
the pod. A pod-level value binds every container that does not set its own
(k8s.io/kubernetes v1.36.3 ``pkg/securitycontext/util.go``,
``DetermineEffectiveSecurityContext``), and the kubelet refuses a container whose effective
``runAsNonRoot`` is true and whose image runs as root (``pkg/kubelet/kuberuntime/
security_context_others.go``, ``verifyRunAsNonRoot``). Controllers add such containers to
our pods: the Training Operator's ``init-pytorch`` (kubeflow/training-operator v1.9.4
``pkg/controller.v1/pytorch/initcontainer.go``, image ``alpine:3.10`` from
``pkg/config/config.go``, no securityContext) and Katib's metrics collector (katib v0.19.0
``pkg/webhook/v1beta1/pod/inject_webhook.go``, image built ``FROM alpine:3.15`` with no
``USER``). k8s/training-operator and k8s/katib give those a restricted context where a
namespace enforces "restricted".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath

from components.specs.names import quantity_value
from components.specs.params import TrainingJob
from trainer.model_dir import in_workspace

# The two workspaces, each named once; a workspace volume is named after its mount point.
# KFP's run workspace: what the driver mounts for dsl.WORKSPACE_PATH_PLACEHOLDER (kfp >= 2.14,
# dsl/constants.py); fmnist sweep and render mount theirs the same way.
WORKSPACE_VOLUME = "kfp-workspace"
WORKSPACE_MOUNT_PATH = f"/{WORKSPACE_VOLUME}"
# Our own: the pvc variant's per-run PVC (<uuid>-fmnist-workspace at /fmnist-workspace) and
# k8s/storage's sweep PVC. Never under /kfp-workspace: kfp's compiler takes an input there
# for a use of the run workspace and then demands a PipelineConfig workspace (kfp 2.17
# dsl/graph_component.py, _detect_workspace_usage_in_tasks).
OWN_WORKSPACE = "fmnist-workspace"
OWN_WORKSPACE_MOUNT_PATH = f"/{OWN_WORKSPACE}"
# Tolerate the taint GPU nodes usually carry (GPU operator / cloud node pools).
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
# An Istio sidecar keeps a finished training pod alive: none in our pods.
ISTIO_INJECT_LABEL = "sidecar.istio.io/inject"
# What our pods are, for the NetworkPolicies of k8s/network-policies to select them by: one
# key for the training pods of both job kinds (the controllers' own labels differ: the
# Training Operator's training.kubeflow.org/job-name, JobSet's jobset.sigs.k8s.io/jobset-name)
# and for the predictor's.
ROLE_LABEL = "fmnist.dev/role"
TRAINING_ROLE = "training"
PREDICTOR_ROLE = "predictor"
# The images' numeric user (images/*.Dockerfile; their group is 0), and the fsGroup that owns
# fresh PVCs.
IMAGE_USER = 10001
SHM_VOLUME = "dshm"
THREADS_ENV = "OMP_NUM_THREADS"  # OpenMP's pool; the trainer's --num-threads sets torch's
TRAINER_COMMAND = ["torchrun", "-m", "trainer"]  # torchrun reads the PET_* env of both job kinds


def training_pod_labels() -> dict[str, str]:
    """The labels of every training pod: no Istio sidecar, and the policies' role."""
    return {ISTIO_INJECT_LABEL: "false", ROLE_LABEL: TRAINING_ROLE}


@dataclass(frozen=True)
class WorkPaths:
    """Where a training job reads the data and writes checkpoints and the model directory."""

    data_dir: Path
    model_dir: Path
    checkpoint_dir: Path

    @classmethod
    def under(cls, workspace: str | Path) -> WorkPaths:
        """The training job's folders in the run's workspace, beside its model directory."""
        model_dir = in_workspace(workspace)
        return cls(model_dir.parent / "data", model_dir, model_dir.parent / "checkpoints")


@dataclass(frozen=True)
class TrainerFlags:
    """``python -m trainer`` flags set from the parameters (values may be Katib placeholders)."""

    data_dir: str  # packed dataset directory
    model_dir: str  # where rank 0 writes the model directory
    checkpoint_dir: str  # per-epoch checkpoint.pt: a restarted pod resumes from it
    recipe: dict = field(default_factory=dict)  # TrainingJob.recipe: --<name>=<value> each
    train_limit: int | str | None = None  # None: the whole split
    test_limit: int | str | None = None
    no_cuda: bool = False  # train on CPU even where CUDA is available

    @classmethod
    def for_job(cls, job: TrainingJob, paths: WorkPaths) -> TrainerFlags:
        """The flags of a training job whose data is already the packed slice."""
        return cls(
            data_dir=str(paths.data_dir),
            model_dir=str(paths.model_dir),
            checkpoint_dir=str(paths.checkpoint_dir),
            recipe=job.recipe,
        )

    def for_trial(self, values: dict, trial_dir: str) -> TrainerFlags:
        """These flags with some recipe ``values`` replaced, writing under ``trial_dir``.

        Raises:
            KeyError: a value names no recipe flag (it would reach no trainer).
        """
        unknown = sorted(set(values) - set(self.recipe))
        if unknown:
            raise KeyError(f"not trainer flags of the recipe: {', '.join(unknown)}")
        return replace(
            self,
            model_dir=f"{trial_dir}/model",
            checkpoint_dir=f"{trial_dir}/checkpoints",
            recipe={**self.recipe, **values},
        )

    def args(self) -> list[str]:
        """``--name=value`` for the paths, the recipe, then the rest; ``--name`` for a true bool.

        A false recipe bool is ``--no-<name>`` (the trainer's flags are negatable); other
        None and False values are left out. Values are rendered with ``str``, so Katib's
        ``${trialParameters.lr}`` passes through.
        """
        paths = {"data_dir": self.data_dir, "model_dir": self.model_dir}
        paths["checkpoint_dir"] = self.checkpoint_dir
        recipe = {name: value for name, value in self.recipe.items() if value is not False}
        negated = {f"no_{name}": True for name, value in self.recipe.items() if value is False}
        rest = {"train_limit": self.train_limit, "test_limit": self.test_limit}
        rest["no_cuda"] = self.no_cuda
        flags = {**paths, **recipe, **negated, **rest}
        return [arg for name, value in flags.items() for arg in _flag(name, value)]


def _flag(name: str, value) -> list[str]:
    """``--name`` for True, nothing for None or False, else ``--name=value``."""
    flag = "--" + name.replace("_", "-")
    if value is True:
        return [flag]
    return [] if value is None or value is False else [f"{flag}={value}"]


def resources(cpu: str, memory: str, gpus: int = 0, gpu_resource: str = "nvidia.com/gpu") -> dict:
    """Requests = limits for CPU and memory; GPUs (or MIG slices) as a limit when > 0.

    Every quantity is a string, as the API server writes them back.
    """
    limits = {"cpu": cpu, "memory": memory}
    if gpus:
        limits[gpu_resource] = str(gpus)
    return {"requests": {"cpu": cpu, "memory": memory}, "limits": limits}


def pvc_volume(name: str, claim_name: str) -> dict:
    """A pod volume backed by a PersistentVolumeClaim."""
    return {"name": name, "persistentVolumeClaim": {"claimName": claim_name}}


def volume_mount(name: str, mount_path: str) -> dict:
    """A container's mount of a pod volume."""
    return {"name": name, "mountPath": mount_path}


def pod_security_context() -> dict:
    """The pod-wide part of "restricted" (seccomp), and the group that owns fresh PVCs.

    The kubelet gives a volume's root the fsGroup (group-writable) when it does not
    have it yet (``OnRootMismatch``), so uid 10001 can write a fresh ``root:root 0755``
    volume without a recursive walk over every file at each start. No ``runAsNonRoot``
    here: it would bind the root containers controllers inject (see the module docstring).
    """
    return {
        "fsGroup": IMAGE_USER,
        "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security_context() -> dict:
    """Pod Security Standard "restricted" for our own containers: the images' numeric user."""
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
        "runAsUser": IMAGE_USER,
    }


def cpu_threads(job: TrainingJob) -> int | None:
    """Intra-op threads per training process on a CPU node; None on GPU nodes.

    Each process gets its share of the node's CPU limit, rounded down, at least 1: torch
    otherwise starts one thread per core of the machine, not of the pod's limit.
    """
    if job.gpus_per_worker:
        return None
    return max(1, math.floor(quantity_value(job.cpu) / job.nproc_per_node))


def bounded_args(job: TrainingJob, args: list[str]) -> list[str]:
    """The trainer's ``args`` plus ``--num-threads`` on CPU nodes."""
    threads = cpu_threads(job)
    return list(args) if threads is None else [*args, f"--num-threads={threads}"]


def bounded_env(job: TrainingJob, env: list[dict]) -> list[dict]:
    """``env`` plus OMP_NUM_THREADS on CPU nodes, unless ``env`` sets it already."""
    threads = cpu_threads(job)
    if threads is None or any(item["name"] == THREADS_ENV for item in env):
        return list(env)
    return [*env, {"name": THREADS_ENV, "value": str(threads)}]


def shm_volume(size: str) -> dict:
    """A memory-backed /dev/shm of ``size`` (NCCL and DataLoader workers outgrow 64 MiB)."""
    return {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": size}}


def shm_mount() -> dict:
    """The container's mount of ``shm_volume``."""
    return volume_mount(SHM_VOLUME, "/dev/shm")


@dataclass(frozen=True)
class Placement:
    """Where and with what the training pods run: the launcher task's config, passed on."""

    tolerations: list[dict] = field(default_factory=list)
    node_selector: dict[str, str] = field(default_factory=dict)
    affinity: dict = field(default_factory=dict)
    volumes: list[dict] = field(default_factory=list)
    volume_mounts: list[dict] = field(default_factory=list)
    env: list[dict] = field(default_factory=list)

    def with_shm(self, job: TrainingJob) -> Placement:
        """This placement plus /dev/shm when the job's nodes need it."""
        if not job.needs_shm:
            return self
        return Placement(
            self.tolerations,
            self.node_selector,
            self.affinity,
            [*self.volumes, shm_volume(job.shm_size)],
            [*self.volume_mounts, shm_mount()],
            self.env,
        )


def workspace_placement(claim_name: str, mount_path: str = WORKSPACE_MOUNT_PATH) -> Placement:
    """A workspace PVC mounted at ``mount_path`` (the volume named after it), GPU-tolerant.

    The placement of the pvc variant's jobs and of ``fmnist sweep`` and ``fmnist render``.
    """
    volume = PurePosixPath(mount_path).name
    return Placement(
        tolerations=[dict(GPU_TOLERATION)],
        volumes=[pvc_volume(volume, claim_name)],
        volume_mounts=[volume_mount(volume, mount_path)],
    )


def step_placement(task_config, workspace_path: str, workspace_pvc: str = "") -> Placement:
    """Where the train or tune step's job runs: on the PVC it was told, else as the step does.

    Args:
        task_config: The step's passed-through ``dsl.TaskConfig`` (KFP >= 2.15).
        workspace_path: Where the step sees the workspace.
        workspace_pvc: The workspace's PVC on older backends; empty: use ``task_config``.
    """
    if workspace_pvc:
        return workspace_placement(workspace_pvc, workspace_path)
    return placement_from(task_config, workspace_path)


def placement_from(task_config, workspace_path: str) -> Placement:
    """The launcher task's passed-through config; it must include the workspace's volume.

    Raises:
        ValueError: no passed-through mount covers ``workspace_path``.
    """
    mounts = task_config.volume_mounts or []
    workspace = Path(workspace_path)
    if not any(workspace.is_relative_to(mount["mountPath"]) for mount in mounts):
        raise ValueError(
            f"the workspace {workspace_path} is not among the volumes passed to this step "
            f"({[mount['mountPath'] for mount in mounts]}); compile the pipeline with a "
            "PipelineConfig workspace and KUBERNETES_VOLUMES in task_config_passthroughs"
        )
    return Placement(
        tolerations=task_config.tolerations or [],
        node_selector=task_config.node_selector or {},
        affinity=task_config.affinity or {},
        volumes=task_config.volumes or [],
        volume_mounts=mounts,
        env=task_config.env or [],
    )


def trainer_container(name: str, image: str, args: list[str], resource_spec: dict) -> dict:
    """The training container: ``torchrun -m trainer`` with the trainer's flags, restricted."""
    return {
        "name": name,
        "image": image,
        "command": list(TRAINER_COMMAND),
        "args": list(args),
        "resources": resource_spec,
        "securityContext": container_security_context(),
    }


def job_resources(job: TrainingJob) -> dict:
    """One node's resources."""
    return resources(job.cpu, job.memory, job.gpus_per_worker, job.gpu_resource)
