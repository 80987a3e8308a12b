"""Train on the cluster: create the job (or adopt it), wait for it to end, collect the model.

The step's pod and the job's pods see the same storage: KFP mounts the run's workspace
PVC into the step and hands the step that volume through ``task_config_passthroughs``;
the job gets exactly those volumes and mounts, so its ``--data-dir``, ``--model-dir`` and
``--checkpoint-dir`` are the step's files too.

1. **Create.** The job is named after the run: a retried step adopts the job its first
   attempt made instead of failing on 409 (objects.py). The packed dataset is staged in
   the workspace first.
2. **Wait.** job_wait.py follows the job to its end: rank 0's log in the step's log, a
   failed job fails the step, transient API errors are waited out, the step's timeout or
   a termination deletes the job. Kueue's suspension and preemption, MultiKueue's worker
   clusters, lost nodes and a stalled log are its watchers (components/runtime/watchers/).
3. **Collect.** The model directory is copied into the step's output. A succeeded
   PyTorchJob is left to its TTL; a succeeded TrainJob, which has none, is deleted.

The Training Operator SDK's ``TrainingClient`` is not used for the calls: it turns every
``ApiException`` into a ``RuntimeError`` (kubeflow-training 1.9.4
``kubeflow/training/api/training_client.py``), losing the status that tells a 409 to
adopt, a 404 and a transient 5xx apart, and it knows no TrainJob. The SDK's typed models
build the PyTorchJob (``components/specs/pytorchjob.py``).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from typing import TYPE_CHECKING

from components.runtime.discovery import find_target
from components.runtime.job_wait import follow_job
from components.runtime.kube import KubeClient, current_namespace
from components.runtime.objects import create_or_adopt, run_object_name
from components.runtime.volumes import stage_dataset
from components.specs.training_job import workspace_job

if TYPE_CHECKING:
    from components.specs.params import TrainingJob
    from components.specs.pods import Placement

JOB_PREFIX = "fmnist"


def run_training_job(
    job: TrainingJob,
    dataset_dir: str,
    model_dir: str,
    workspace_path: str,
    run_id: str,
    placement: Placement,
    kube: KubeClient | None = None,
    echo: Callable[[str], None] = print,
) -> dict:
    """Create or adopt the training job, follow it to its end, copy its model to ``model_dir``.

    Returns:
        The job as it ended.
    """
    kube = kube or KubeClient.connect()
    target = find_target(kube, job.job_api)
    namespace, name = current_namespace(), run_object_name(JOB_PREFIX, run_id)
    body, paths = workspace_job(target, name, namespace, job, workspace_path, placement)
    what = f"{body['kind']} {namespace}/{name}"

    _, adopted = create_or_adopt(
        kube, target.kind.resource, body, lambda: stage_dataset(dataset_dir, paths)
    )
    echo(
        f"{'adopted' if adopted else 'created'} {what} (queue {job.queue}, "
        f"{job.workers} x {job.nproc_per_node} processes)"
    )

    final = follow_job(kube, target.kind, namespace, name, job.timeout_seconds, echo=echo)

    shutil.copytree(paths.model_dir, model_dir, dirs_exist_ok=True)
    if target.api == "trainjob":  # a TrainJob has no TTL; its log is in this step's
        echo(f"deleting the finished {what}")
        kube.delete(target.kind.resource, namespace, name)
    return final
