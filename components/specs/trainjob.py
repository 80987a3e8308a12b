"""The TrainJob (``trainer.kubeflow.org/v1alpha1``, Kubeflow Trainer v2) of a training job.

It refers to a ClusterTrainingRuntime (``torch-distributed`` by default) and sets the
trainer: image, ``torchrun -m trainer`` with our flags, ``numNodes`` = workers,
``numProcPerNode`` (always an int: v2.1 resolves ``auto`` to the CPU count on CPU nodes,
kubeflow/trainer v2.1.0 ``pkg/runtime/framework/plugins/torch/torch.go``) and the
resources per node (on CPU nodes with torch's threads bounded by the CPU limit, as in the
PyTorchJob). Pod-level settings (volumes, /dev/shm, tolerations, node selector,
restricted security) reach the pods differently in the two generations in use:

- ``v2.1`` (Kubeflow 1.11.0): ``spec.podTemplateOverrides``; it has no
  field for a securityContext or a deadline (v2.1.0
  ``pkg/apis/trainer/v1alpha1/trainjob_types.go``),
  so restricted pods need a runtime that sets it (``k8s/trainer``).
- ``v2.2`` and later: ``spec.runtimePatches`` (keyed by manager) and
  ``spec.activeDeadlineSeconds`` (v2.3.0 ``trainjob_types.go``), built with the typed
  models of the ``kubeflow-trainer-api`` package.
"""

from __future__ import annotations

from kubeflow_trainer_api import models

from components.specs.compat import TRAINER_GENERATIONS
from components.specs.kinds import TRAINJOB, TRAINJOB_KIND
from components.specs.params import TrainingJob
from components.specs.pods import (
    TRAINER_COMMAND,
    Placement,
    bounded_args,
    bounded_env,
    container_security_context,
    job_resources,
    pod_security_context,
    training_pod_labels,
)
from components.specs.pytorchjob import kueue_labels

# Our entry among spec.runtimePatches (Kueue adds its own): a domain-prefixed path, which
# Trainer v2.3.0's webhook requires (pkg/runtime/framework/plugins/jobset/jobset.go,
# validation.IsDomainPrefixedPath; Kueue's is "kueue.x-k8s.io/manager").
PATCH_MANAGER = "fmnist.dev/pipeline"
NODE_JOB = "node"  # the runtime's replicated job that runs the trainer


def trainjob(
    *,
    name: str | None,
    namespace: str | None,
    job: TrainingJob,
    args: list[str],
    placement: Placement,
    generation: str,
) -> dict:
    """The TrainJob for ``job`` running the trainer with ``args``, for a Trainer generation.

    ``name`` and ``namespace`` are None in a Katib trial template (Katib sets them).
    """
    if generation not in TRAINER_GENERATIONS:
        allowed = ", ".join(TRAINER_GENERATIONS)
        raise ValueError(f"generation must be one of {allowed}, got {generation!r}")
    placement = placement.with_shm(job)
    metadata = {"labels": kueue_labels(job)}
    metadata.update(
        {key: value for key, value in (("name", name), ("namespace", namespace)) if value}
    )
    spec = {
        "runtimeRef": {
            "name": job.trainjob_runtime,
            "apiGroup": TRAINJOB.group,
            "kind": "ClusterTrainingRuntime",
        },
        "trainer": _trainer(job, args, placement),
    }
    body = {
        "apiVersion": TRAINJOB.api_version,
        "kind": TRAINJOB.kind,
        "metadata": metadata,
        "spec": spec,
    }
    if generation == "v2.1":
        spec["podTemplateOverrides"] = [_override(placement)]
        return body
    spec["runtimePatches"] = [_runtime_patch(placement)]
    spec["activeDeadlineSeconds"] = job.timeout_seconds
    return _typed(body)


def _trainer(job: TrainingJob, args: list[str], placement: Placement) -> dict:
    trainer = {
        "image": job.image,
        "command": list(TRAINER_COMMAND),
        "args": bounded_args(job, args),
        "numNodes": job.workers,
        "numProcPerNode": job.nproc_per_node,
        "resourcesPerNode": job_resources(job),
    }
    env = bounded_env(job, placement.env)
    if env:
        trainer["env"] = env
    return trainer


def _pod_settings(placement: Placement) -> dict:
    settings = {
        "tolerations": list(placement.tolerations),
        "nodeSelector": dict(placement.node_selector),
        "affinity": dict(placement.affinity),
        "volumes": list(placement.volumes),
    }
    return {key: value for key, value in settings.items() if value}


def _override(placement: Placement) -> dict:
    """v2.1: one podTemplateOverride for the node job (no securityContext field there)."""
    container = {"name": TRAINJOB_KIND.container}
    if placement.volume_mounts:
        container["volumeMounts"] = list(placement.volume_mounts)
    spec = {**_pod_settings(placement), "containers": [container]}
    # spec.labels label only the JobSet; the pod's own labels come from the override
    # (v2.1.0 pkg/runtime/core/trainingruntime.go, mergePodTemplateOverrides).
    metadata = {"labels": training_pod_labels()}
    return {"targetJobs": [{"name": NODE_JOB}], "metadata": metadata, "spec": spec}


def _runtime_patch(placement: Placement) -> dict:
    """v2.2+: our runtimePatch of the node job's pod template, restricted."""
    container = {"name": TRAINJOB_KIND.container, "securityContext": container_security_context()}
    if placement.volume_mounts:
        container["volumeMounts"] = list(placement.volume_mounts)
    pod = {
        "metadata": {"labels": training_pod_labels()},
        "spec": {
            **_pod_settings(placement),
            "securityContext": pod_security_context(),
            "containers": [container],
        },
    }
    node_job = {"name": NODE_JOB, "template": {"spec": {"template": pod}}}
    return {
        "manager": PATCH_MANAGER,
        "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [node_job]}}},
    }


def _typed(body: dict) -> dict:
    """``body`` through the package's typed model; a field it does not know is an error."""
    typed = models.TrainerV1alpha1TrainJob.from_dict(body).to_dict()
    if typed != body:
        raise ValueError(f"the TrainJob has fields kubeflow-trainer-api does not know: {body}")
    return typed
