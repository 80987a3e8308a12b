"""The custom resources the steps create or read, and what the launcher knows of a job kind.

A training job kind is known to the launcher only by its ``JobKind``: where it lives in
the API, which pod is rank 0 and which container prints the log, and which condition
types mean success, failure and suspension. Upstream sources of each, read at the tags
the project supports:

- PyTorchJob (kubeflow/training-operator v1.9.4): labels ``training.kubeflow.org/job-name``
  and ``training.kubeflow.org/replica-type`` and conditions ``Succeeded``/``Failed``/
  ``Suspended`` (``pkg/apis/kubeflow.org/v1/common_types.go``), the replica type in lower
  case (``pkg/controller.v1/common/pod.go``), container ``pytorch``.
- TrainJob (kubeflow/trainer v2.1.0 and v2.3.0): pods of the JobSet's ``node`` replicated
  job, rank 0 at completion index 0 (katib v0.19.0 ``DefaultTrainJobPrimaryPodLabels`` in
  ``pkg/apis/controller/experiments/v1beta1/constants.go``), container ``node``
  (``manifests/base/runtimes/torch_distributed.yaml``), conditions ``Complete``/``Failed``/
  ``Suspended`` (``pkg/apis/trainer/v1alpha1/trainjob_types.go``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from kubeflow.training import constants as training


@dataclass(frozen=True)
class CustomResource:
    """Where a custom resource lives in the API: what CustomObjectsApi calls need."""

    group: str
    version: str
    plural: str
    kind: str

    @property
    def api_version(self) -> str:
        """``group/version``, as written in the object."""
        return f"{self.group}/{self.version}"

    def at(self, version: str) -> CustomResource:
        """The same resource at another API version."""
        return replace(self, version=version)


PYTORCHJOB = CustomResource(
    training.GROUP, training.VERSION, training.PYTORCHJOB_PLURAL, training.PYTORCHJOB_KIND
)
TRAINJOB = CustomResource("trainer.kubeflow.org", "v1alpha1", "trainjobs", "TrainJob")
INFERENCESERVICE = CustomResource(
    "serving.kserve.io", "v1beta1", "inferenceservices", "InferenceService"
)
EXPERIMENT = CustomResource("kubeflow.org", "v1beta1", "experiments", "Experiment")
TRIAL = CustomResource("kubeflow.org", "v1beta1", "trials", "Trial")
PROPAGATION_POLICY = CustomResource(
    "policy.karmada.io", "v1alpha1", "propagationpolicies", "PropagationPolicy"
)
# Read at the newest version served (runtime/discovery.py kueue_resource): Kueue v0.19.2
# serves v1beta2 and deprecates v1beta1 (config/components/crd/bases/*.yaml), older Kueue
# serves only v1beta1. The fields read (conditions, existence) are the same in both.
KUEUE_VERSIONS = ("v1beta2", "v1beta1")
LOCALQUEUE = CustomResource("kueue.x-k8s.io", "v1beta2", "localqueues", "LocalQueue")
WORKLOAD = CustomResource("kueue.x-k8s.io", "v1beta2", "workloads", "Workload")


@dataclass(frozen=True)
class JobKind:
    """What the launcher knows of a training job kind."""

    resource: CustomResource
    container: str  # the trainer container, whose log is followed
    rank0_labels: str  # label selector of rank 0's pod; {name} is the job's name
    succeeded: str  # condition type that means the job succeeded
    failed: str = "Failed"
    suspended: str = "Suspended"

    def rank0_selector(self, name: str) -> str:
        """The label selector of this job's rank-0 pod."""
        return self.rank0_labels.format(name=name)


PYTORCHJOB_KIND = JobKind(
    PYTORCHJOB,
    container=training.PYTORCHJOB_CONTAINER,
    rank0_labels=f"{training.JOB_NAME_LABEL}={{name}},{training.REPLICA_TYPE_LABEL}=master",
    succeeded=training.JOB_CONDITION_SUCCEEDED,
)
TRAINJOB_KIND = JobKind(
    TRAINJOB,
    container="node",
    rank0_labels=(
        "jobset.sigs.k8s.io/jobset-name={name},jobset.sigs.k8s.io/replicatedjob-name=node,"
        "batch.kubernetes.io/job-completion-index=0"
    ),
    succeeded="Complete",
)
JOB_KINDS = {"pytorchjob": PYTORCHJOB_KIND, "trainjob": TRAINJOB_KIND}
