"""What differs between the upstream releases the project supports, each written down once.

Every version-dependent name, default and map lives here, beside the upstream file and tag
that shows it. What a step finds on a cluster is asked of the cluster
(``components/runtime/discovery.py``); this module says what the answers mean. The version
pins that cannot import Python (``pyproject.toml``, ``images/serving.Dockerfile``, the
cluster tier's defaults in ``Makefile`` and ``tools/controlplane/harness/commands.py``) are
checked against the values here by ``tests/components/test_compat.py``.
"""

from __future__ import annotations

# --- Kubeflow Trainer (TrainJob, trainer.kubeflow.org/v1alpha1) ---------------------------
# Two generations of the TrainJob spec carry our pod settings: v2.1.0 has
# spec.podTemplateOverrides, v2.2.0 replaced it with spec.runtimePatches, which v2.3.0 keeps
# (kubeflow/trainer pkg/apis/trainer/v1alpha1/trainjob_types.go at v2.1.0 and v2.3.0).
# The field of the served TrainJob schema that marks each generation, newest first.
TRAINER_GENERATION_FIELDS = {"v2.2": "runtimePatches", "v2.1": "podTemplateOverrides"}
TRAINER_GENERATIONS = tuple(sorted(TRAINER_GENERATION_FIELDS))  # ("v2.1", "v2.2")
# A Trainer release (what a user names) -> the generation of its TrainJob spec.
TRAINER_RELEASES = {"v2.1": "v2.1", "v2.2": "v2.2", "v2.3": "v2.2"}
# The newest release: what `render` and `sweep --render` write for when not told otherwise.
DEFAULT_TRAINER_RELEASE = "v2.3"
DEFAULT_TRAINER_GENERATION = TRAINER_RELEASES[DEFAULT_TRAINER_RELEASE]

# --- Rank 0's pod, per job kind ----------------------------------------------------------
# The label naming the job on each of its pods: training-operator v1.9.4
# pkg/apis/kubeflow.org/v1/common_types.go (JobNameLabel); on a TrainJob's pods, its JobSet's
# name, which is the TrainJob's (jobset api/jobset/v1alpha2/jobset_types.go, JobSetNameKey).
JOB_NAME_LABELS = {
    "PyTorchJob": "training.kubeflow.org/job-name",
    "TrainJob": "jobset.sigs.k8s.io/jobset-name",
}
# The labels of rank 0's pod, as Katib v0.19.0 defaults them for a trial's primary pod
# (pkg/apis/controller/experiments/v1beta1/constants.go, DefaultKubeflowJobPrimaryPodLabels,
# DefaultTrainJobPrimaryPodLabels); the training operator puts job-role=master on the Master
# replica (v1.9.4 pkg/controller.v1/common/pod.go), Trainer's JobSet runs rank 0 at
# completion index 0 of the `node` replicated job (v2.3.0 manifests/base/runtimes/
# torch_distributed.yaml).
RANK0_POD_LABELS = {
    "PyTorchJob": {"training.kubeflow.org/job-role": "master"},
    "TrainJob": {
        "jobset.sigs.k8s.io/replicatedjob-name": "node",
        "batch.kubernetes.io/job-completion-index": "0",
    },
}

# --- Kueue --------------------------------------------------------------------------------
# Read at the newest version served: Kueue v0.19.2 serves v1beta2 and deprecates v1beta1
# (config/components/crd/bases/*.yaml), older Kueue serves only v1beta1. The fields read
# (conditions, existence) are the same in both.
KUEUE_VERSIONS = ("v1beta2", "v1beta1")

# --- KServe -------------------------------------------------------------------------------
# The deployment modes as KServe >= 0.16 names them, and the names KServe <= 0.15 knows
# instead (kserve pkg/constants/constants.go at v0.15.2 and v0.16.0).
DEPLOYMENT_MODES = ("Standard", "Knative")
LEGACY_DEPLOYMENT_MODES = {"RawDeployment": "Standard", "Serverless": "Knative"}
# The InferenceService schema field that v0.16.0, the release of the new names, added: a
# served schema without it is a KServe that wants the legacy names (kserve
# config/crd/full/serving.kserve.io_inferenceservices.yaml at v0.15.2 and v0.16.0).
KSERVE_NEW_NAMES_FIELD = ("spec", "predictor", "storageUris")
# The kserve Python package the predictor subclasses (serving/server.py): pyproject.toml's
# range and the serving image's exact pin.
KSERVE_PACKAGE_VERSION = "0.21.0"
# The KServe controller the cluster tier builds by default (Kubeflow 1.11's KServe).
KSERVE_TIER_RELEASE = "v0.15.2"


def canonical_deployment_mode(mode: str) -> str:
    """``mode`` (either naming) as KServe >= 0.16 spells it: Standard or Knative."""
    return LEGACY_DEPLOYMENT_MODES.get(mode, mode)


def deployment_mode_name(mode: str, legacy: bool) -> str:
    """``mode`` (either naming) as KServe <= 0.15 (``legacy``) or >= 0.16 spells it."""
    canonical = canonical_deployment_mode(mode)
    if not legacy:
        return canonical
    return {new: old for old, new in LEGACY_DEPLOYMENT_MODES.items()}.get(canonical, canonical)
