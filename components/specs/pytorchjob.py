"""The PyTorchJob (``kubeflow.org/v1``), built from the Training Operator SDK's typed models.

One Master and ``workers - 1`` Workers, each running ``torchrun -m trainer`` with
``nprocPerNode`` processes; torchrun takes nodes, node rank and the master's address from
the ``PET_*`` variables the operator sets (kubeflow/training-operator v1.9.4
``pkg/controller.v1/pytorch/envvar.go``). Kueue admits the job through its queue label;
the priority label is set only when given, since a missing WorkloadPriorityClass blocks
admission.
"""

from __future__ import annotations

import copy

from kubeflow.training import (
    ApiClient,
    KubeflowOrgV1PyTorchJob,
    KubeflowOrgV1PyTorchJobSpec,
    KubeflowOrgV1ReplicaSpec,
    KubeflowOrgV1RunPolicy,
)
from kubeflow.training import constants as training
from kubernetes.client import V1ObjectMeta

from components.specs.kinds import PYTORCHJOB
from components.specs.params import TrainingJob
from components.specs.pods import (
    Placement,
    bounded_args,
    bounded_env,
    job_resources,
    pod_security_context,
    trainer_container,
    training_pod_labels,
)

MASTER_PORT = 23456  # the training operator's default PyTorchJob port
QUEUE_LABEL = training.LOCAL_QUEUE_LABEL  # kueue.x-k8s.io/queue-name
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
TTL_SECONDS = 3600  # the operator deletes a finished job (and its pods) after this
# Failures a job survives (each resumes from the checkpoint). The Training Operator's
# backoffLimit counts container restarts summed over the job's Running pods (v1.9.4
# pkg/core/job.go PastBackoffLimit), and one failure restarts every rank (a rank's death
# fails its peers' collectives), so the limit is that many restarts of every replica.
FAILURES_SURVIVED = 3


def backoff_limit(workers: int) -> int:
    """runPolicy.backoffLimit for ``workers`` replicas: FAILURES_SURVIVED of the whole job."""
    return FAILURES_SURVIVED * workers


def kueue_labels(job: TrainingJob) -> dict[str, str]:
    """The queue label, and the priority label when a class is given."""
    labels = {QUEUE_LABEL: job.queue}
    if job.priority_class:
        labels[PRIORITY_LABEL] = job.priority_class
    return labels


def pod_template(job: TrainingJob, args: list[str], placement: Placement) -> dict:
    """One replica's pod: the ``pytorch`` container, restricted, labelled a training pod.

    No Istio sidecar; the role label is what k8s/network-policies selects. On CPU nodes
    torch's threads are bounded by the CPU limit (``cpu_threads``).
    """
    container = trainer_container(
        training.PYTORCHJOB_CONTAINER,
        job.image,
        bounded_args(job, args),
        job_resources(job),
    )
    container["ports"] = [{"name": "pytorchjob-port", "containerPort": MASTER_PORT}]
    env = bounded_env(job, placement.env)
    if env:
        container["env"] = env
    if placement.volume_mounts:
        container["volumeMounts"] = list(placement.volume_mounts)
    spec = {
        "securityContext": pod_security_context(),
        # Training never calls the Kubernetes API: no service-account token in its pods.
        "automountServiceAccountToken": False,
        "containers": [container],
    }
    optional = {
        "tolerations": list(placement.tolerations),
        "nodeSelector": dict(placement.node_selector),
        "affinity": dict(placement.affinity),
        "volumes": list(placement.volumes),
    }
    spec.update({key: value for key, value in optional.items() if value})
    return {"metadata": {"labels": training_pod_labels()}, "spec": spec}


def pytorchjob(
    *,
    name: str | None,
    namespace: str | None,
    job: TrainingJob,
    args: list[str],
    placement: Placement,
) -> dict:
    """The PyTorchJob for ``job`` running the trainer with ``args``.

    ``name`` and ``namespace`` are None in a Katib trial template (Katib sets them).
    """
    template = pod_template(job, args, placement.with_shm(job))
    replicas = {training.REPLICA_TYPE_MASTER: _replicas(1, template)}
    if job.workers > 1:
        replicas[training.REPLICA_TYPE_WORKER] = _replicas(job.workers - 1, copy.deepcopy(template))
    body = KubeflowOrgV1PyTorchJob(
        api_version=PYTORCHJOB.api_version,
        kind=PYTORCHJOB.kind,
        metadata=V1ObjectMeta(name=name, namespace=namespace, labels=kueue_labels(job)),
        spec=KubeflowOrgV1PyTorchJobSpec(
            nproc_per_node=str(job.nproc_per_node),
            pytorch_replica_specs=replicas,
            run_policy=KubeflowOrgV1RunPolicy(
                clean_pod_policy="Running",  # kill pods still running when the job ends
                ttl_seconds_after_finished=TTL_SECONDS,
                backoff_limit=backoff_limit(job.workers),
                active_deadline_seconds=job.timeout_seconds,
            ),
        ),
    )
    return ApiClient().sanitize_for_serialization(body)


def _replicas(count: int, template: dict) -> KubeflowOrgV1ReplicaSpec:
    return KubeflowOrgV1ReplicaSpec(replicas=count, restart_policy="OnFailure", template=template)
