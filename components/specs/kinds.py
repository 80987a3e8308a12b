"""The custom resources the steps create or read, and what the launcher knows of a job kind.

A training job kind is known to the launcher only by its ``JobKind``: where it lives in
the API, which pod is rank 0 and which container prints the log, and which condition
types mean success, failure and suspension. Upstream sources of each, read at the tags
the project supports:

- PyTorchJob (kubeflow/training-operator v1.9.4): conditions ``Succeeded``/``Failed``/
  ``Suspended`` (``pkg/apis/kubeflow.org/v1/common_types.go``), container ``pytorch``.
- TrainJob (kubeflow/trainer v2.1.0 and v2.3.0): container ``node``
  (``manifests/base/runtimes/torch_distributed.yaml``), conditions ``Complete``/``Failed``/
  ``Suspended`` (``pkg/apis/trainer/v1alpha1/trainjob_types.go``).
- Who runs the job: PyTorchJob ``spec.runPolicy.managedBy`` (training-operator v1.9.4
  ``pkg/apis/kubeflow.org/v1/common_types.go``), TrainJob ``spec.managedBy`` (trainer v2.3.0
  ``trainjob_types.go``); Kueue's MultiKueue sets ``kueue.x-k8s.io/multikueue`` there.

Rank 0's pod labels, per kind, are in ``components/specs/compat.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from kubeflow.training import constants as training

from components.specs.compat import (
    DEFAULT_TRAINER_GENERATION,
    JOB_NAME_LABELS,
    KUEUE_VERSIONS,
    RANK0_POD_LABELS,
)


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
# Read at the newest of compat.KUEUE_VERSIONS served (runtime/discovery.py kueue_resource).
LOCALQUEUE = CustomResource("kueue.x-k8s.io", KUEUE_VERSIONS[0], "localqueues", "LocalQueue")
WORKLOAD = CustomResource("kueue.x-k8s.io", KUEUE_VERSIONS[0], "workloads", "Workload")


@dataclass(frozen=True)
class JobKind:
    """What the launcher knows of a training job kind."""

    resource: CustomResource
    container: str  # the trainer container, whose log is followed
    succeeded: str  # condition type that means the job succeeded
    managed_by: tuple[str, ...]  # where the job says which controller runs it
    failed: str = "Failed"
    suspended: str = "Suspended"

    def manager(self, job: dict) -> str:
        """The controller the job names as the one that runs it ("" when none)."""
        value = job
        for key in self.managed_by:
            value = (value or {}).get(key)
        return value or ""

    @property
    def rank0_labels(self) -> dict[str, str]:
        """The labels of rank 0's pod in any job of this kind (what Katib's trials read)."""
        return dict(RANK0_POD_LABELS[self.resource.kind])

    def pods_selector(self, name: str) -> str:
        """The label selector of every pod of the job called ``name``."""
        return f"{JOB_NAME_LABELS[self.resource.kind]}={name}"

    def rank0_selector(self, name: str) -> str:
        """The label selector of rank 0's pod in the job called ``name``."""
        labels = {JOB_NAME_LABELS[self.resource.kind]: name, **self.rank0_labels}
        return ",".join(f"{key}={value}" for key, value in labels.items())


PYTORCHJOB_KIND = JobKind(
    PYTORCHJOB,
    container=training.PYTORCHJOB_CONTAINER,
    succeeded=training.JOB_CONDITION_SUCCEEDED,
    managed_by=("spec", "runPolicy", "managedBy"),
)
TRAINJOB_KIND = JobKind(
    TRAINJOB,
    container="node",
    succeeded="Complete",
    managed_by=("spec", "managedBy"),
)
JOB_KINDS = {"pytorchjob": PYTORCHJOB_KIND, "trainjob": TRAINJOB_KIND}


@dataclass(frozen=True)
class Target:
    """Which API a training job goes to, and in what generation."""

    api: str  # pytorchjob or trainjob
    generation: str = DEFAULT_TRAINER_GENERATION  # the Trainer generation, for a TrainJob

    @property
    def kind(self) -> JobKind:
        """What the launcher knows of this kind."""
        return JOB_KINDS[self.api]
