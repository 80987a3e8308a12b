"""Train as a PyTorchJob: stage the data in the shared workspace, create the job, follow it.

The step's pod and the job's pods see the same storage: KFP mounts the run's workspace
PVC into the step (``dsl.WORKSPACE_PATH_PLACEHOLDER``) and hands the step that volume
through ``task_config_passthroughs``; the job gets exactly those volumes and mounts,
so ``--data-dir``, ``--model-dir`` and ``--checkpoint-dir`` point at the same files in
both. The step fails when the job fails (with its conditions and the master's log
tail), deletes a job it stops waiting for, and leaves finished jobs to the TTL.
"""

from __future__ import annotations

import secrets
import shutil
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from components.k8s import KubeClient, current_namespace
from components.manifests import (
    CONTAINER_NAME,
    GPU_TOLERATION,
    PYTORCHJOB,
    WORKSPACE_MOUNT_PATH,
    WORKSPACE_VOLUME,
    Placement,
    RunPolicy,
    TrainerFlags,
    pvc_volume,
    pytorchjob,
    resources,
    trainer_args,
    volume_mount,
)
from components.params import PipelineParams

POLL_SECONDS = 10.0
LOG_TAIL_LINES = 40
JOB_LABEL = "training.kubeflow.org/job-name"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"


class JobFailed(RuntimeError):
    """The PyTorchJob reached its Failed condition."""


@dataclass(frozen=True)
class WorkPaths:
    """Where the job reads the data and writes checkpoints and the model."""

    data: Path
    model: Path
    checkpoints: Path

    @classmethod
    def under(cls, workspace: str | Path) -> WorkPaths:
        """The training directories inside the run's workspace."""
        root = Path(workspace) / "train"
        return cls(root / "data", root / "model", root / "checkpoints")


def job_name(run_id: str) -> str:
    """A job name unique to this attempt, traceable to the run: ``fmnist-<run>-<random>``."""
    run = "".join(ch for ch in run_id.lower() if ch.isalnum())[:8] or "run"
    return f"fmnist-{run}-{secrets.token_hex(2)}"


def trainer_flags(params: PipelineParams, paths: WorkPaths) -> TrainerFlags:
    """The trainer's flags from the pipeline parameters (the data is already a packed slice)."""
    return TrainerFlags(
        data_dir=str(paths.data),
        model_dir=str(paths.model),
        checkpoint_dir=str(paths.checkpoints),
        epochs=params.epochs,
        batch_size=params.batch_size,
        lr=params.lr,
        momentum=params.momentum,
        optimizer=params.optimizer,
    )


def build_job(
    params: PipelineParams,
    name: str | None,
    namespace: str | None,
    paths: WorkPaths,
    placement: Placement,
    flags: TrainerFlags | None = None,
) -> dict:
    """The PyTorchJob the train step creates for these parameters.

    ``flags`` replaces the trainer flags derived from ``params`` (Katib's trials use
    placeholders for the searched values).
    """
    return pytorchjob(
        name=name,
        namespace=namespace,
        image=params.trainer_image,
        args=trainer_args(flags or trainer_flags(params, paths)),
        queue_name=params.queue_name,
        workers=params.workers,
        nproc_per_node=params.nproc_per_node,
        resource_spec=resources(
            params.cpu, params.memory, params.gpus_per_worker, params.gpu_resource
        ),
        priority_class=params.priority_class or None,
        placement=placement,
        run_policy=RunPolicy(active_deadline_seconds=params.timeout_seconds),
    )


def pipeline_placement(claim_name: str) -> Placement:
    """What the compiled pipeline hands the train step: the workspace PVC and GPU toleration."""
    return Placement(
        tolerations=[dict(GPU_TOLERATION)],
        volumes=[pvc_volume(WORKSPACE_VOLUME, claim_name)],
        volume_mounts=[volume_mount(WORKSPACE_VOLUME, WORKSPACE_MOUNT_PATH)],
    )


def placement_from(task_config, workspace_path: str) -> Placement:
    """The launcher task's passed-through config; it must include the workspace's volume.

    Raises:
        RuntimeError: no passed-through mount covers ``workspace_path``.
    """
    mounts = task_config.volume_mounts or []
    workspace = Path(workspace_path)
    if not any(workspace.is_relative_to(mount["mountPath"]) for mount in mounts):
        raise RuntimeError(
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


def stage_dataset(dataset_dir: str, paths: WorkPaths) -> None:
    """Copy the packed dataset into the workspace, where the job's pods can read it."""
    shutil.copytree(dataset_dir, paths.data, dirs_exist_ok=True)
    paths.checkpoints.mkdir(parents=True, exist_ok=True)


def condition_summary(job: dict) -> str:
    """The job's conditions, one ``Type=Status (Reason: message)`` per line."""
    lines = []
    for item in job.get("status", {}).get("conditions", []):
        detail = ": ".join(part for part in (item.get("reason"), item.get("message")) if part)
        lines.append(
            f"{item.get('type')}={item.get('status')}" + (f" ({detail})" if detail else "")
        )
    return "\n".join(lines) or "(no conditions yet)"


def finished_condition(job: dict) -> str | None:
    """``Succeeded`` or ``Failed`` once the job has ended, else None."""
    for item in job.get("status", {}).get("conditions", []):
        if item.get("type") in ("Succeeded", "Failed") and item.get("status") == "True":
            return item["type"]
    return None


class LogFollower:
    """Copies the master pod's log into this step's log, across polls and restarts."""

    def __init__(self, kube: KubeClient, namespace: str, name: str, echo=print):
        self.kube, self.namespace, self.echo = kube, namespace, echo
        self.selector = f"{JOB_LABEL}={name},{REPLICA_TYPE_LABEL}=master"
        self.container, self.printed = None, 0
        self.tail: deque[str] = deque(maxlen=LOG_TAIL_LINES)

    def poll(self) -> None:
        """Print the master's log lines that appeared since the last poll."""
        pods = self.kube.list_pods(self.namespace, self.selector)
        if not pods or pods[0].status.phase == "Pending":
            return
        pod = pods[0]
        container = (pod.metadata.uid, _restart_count(pod))
        if container != self.container:
            self.container, self.printed = container, 0
            self.echo(f"--- log of {pod.metadata.name} (restart {container[1]}) ---")
        lines = self.kube.pod_log(self.namespace, pod.metadata.name, CONTAINER_NAME).splitlines()
        for line in lines[self.printed :]:
            self.echo(line)
            self.tail.append(line)
        self.printed = len(lines)


def _restart_count(pod) -> int:
    statuses = pod.status.container_statuses or []
    return sum(status.restart_count or 0 for status in statuses if status.name == CONTAINER_NAME)


def wait_for_job(kube: KubeClient, namespace: str, name: str, timeout_seconds: float) -> dict:
    """Follow the job until it succeeds; stream the master's log meanwhile.

    Raises:
        JobFailed: the job failed; the message has its conditions and the log tail.
        TimeoutError: it did not finish within ``timeout_seconds``.
    """
    follower = LogFollower(kube, namespace, name)
    deadline = time.monotonic() + timeout_seconds
    while True:
        job = kube.get(PYTORCHJOB, namespace, name)
        if job is None:
            raise JobFailed(f"PyTorchJob {namespace}/{name} disappeared (deleted by someone?)")
        follower.poll()
        outcome = finished_condition(job)
        if outcome == "Succeeded":
            return job
        if outcome == "Failed" or time.monotonic() >= deadline:
            error = JobFailed if outcome else TimeoutError
            what = "failed" if outcome else f"did not finish within {timeout_seconds:g} s"
            raise error(
                f"PyTorchJob {namespace}/{name} {what}.\nConditions:\n"
                f"{condition_summary(job)}\nLast lines of the master's log:\n"
                + ("\n".join(follower.tail) or "(none)")
            )
        time.sleep(max(0.0, min(POLL_SECONDS, deadline - time.monotonic())))


def run_pytorchjob(
    params: PipelineParams,
    dataset_dir: str,
    model_dir: str,
    workspace_path: str,
    run_id: str,
    task_config,
) -> dict:
    """Stage, create the job, follow it to the end, and copy the model to ``model_dir``."""
    placement = placement_from(task_config, workspace_path)
    kube = KubeClient.connect()
    namespace, name = params.namespace or current_namespace(), job_name(run_id)
    paths = WorkPaths.under(workspace_path)
    stage_dataset(dataset_dir, paths)
    kube.create(PYTORCHJOB, namespace, build_job(params, name, namespace, paths, placement))
    print(f"created PyTorchJob {namespace}/{name} in queue {params.queue_name}", flush=True)
    try:
        job = wait_for_job(kube, namespace, name, params.timeout_seconds)
    except JobFailed:
        raise  # a failed job stays until its TTL, for inspection
    except BaseException:  # timeout, interrupt, API error: do not leave it running
        print(f"deleting PyTorchJob {namespace}/{name}", flush=True)
        kube.delete(PYTORCHJOB, namespace, name)
        raise
    shutil.copytree(paths.model, model_dir, dirs_exist_ok=True)
    return job
