"""What is fixed when a pipeline is compiled: the images, the run's workspace, the backend.

Kubeflow Pipelines mounts a per-run workspace only from 2.15 on; 2.15 and 2.16 also
refuse a workspace PVC without a storage class unless their API server has a default
workspace spec (kubeflow/pipelines 2.15.0 ``backend/src/v2/compiler/argocompiler/argo.go``,
``GetWorkspacePVC``); 2.17 falls back to the cluster's default class. For backends
before 2.15 the ``pvc`` variant creates and deletes a PVC of its own (kfp-kubernetes
``CreatePVC``/``DeletePVC``) instead.

Every step's pod gets CPU and memory requests and limits (``StepResources``): the steps
hold the pipeline runner's RBAC, so none may starve its node.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kfp import dsl

from components.images import RUNTIMES, Images, default_image
from components.specs.names import is_dns_subdomain, is_quantity
from components.specs.params import QUANTITY, require

VARIANTS = {"workspace": "KFP >= 2.15: the run's workspace", "pvc": "KFP 2.2-2.14: a PVC per run"}
ACCESS_MODES = ("ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod")
# KFP 2.2-2.14's driver creates the PVC with the class given, or "standard" when none is
# (kubeflow/pipelines 2.14.0 backend/src/v2/driver/k8s.go, createPVC): name a real one.
PVC_NEEDS_CLASS = (
    "the pvc variant (Kubeflow Pipelines 2.2-2.14) needs --workspace-storage-class: those "
    "backends create the PVC with the class named, or with 'standard' when none is"
)


@dataclass(frozen=True)
class Workspace:
    """The run's shared volume: the train step stages data there, the job writes there."""

    size: str = "5Gi"
    # Empty: the cluster's default StorageClass (KFP >= 2.17; 2.15 and 2.16 need a name).
    storage_class: str = ""
    # Several training nodes write checkpoints and the model: ReadWriteMany.
    access_mode: str = "ReadWriteMany"

    def __post_init__(self):
        """Raises ``ParamError`` naming ``workspace_size`` etc. (the flags' names)."""
        require(is_quantity(self.size), "workspace_size", QUANTITY, self.size)
        storage_class = self.storage_class
        allowed = "empty or a lowercase DNS subdomain"
        require(
            not storage_class or is_dns_subdomain(storage_class),
            "workspace_storage_class",
            allowed,
            storage_class,
        )
        modes = f"one of {', '.join(ACCESS_MODES)}"
        require(self.access_mode in ACCESS_MODES, "workspace_access_mode", modes, self.access_mode)

    def pvc_spec_patch(self) -> dict:
        """The PVC fields KFP's workspace takes from the pipeline."""
        patch = {"accessModes": [self.access_mode]}
        if self.storage_class:
            patch["storageClassName"] = self.storage_class
        return patch

    def pipeline_config(self) -> dsl.PipelineConfig:
        """The run workspace of the ``workspace`` variant."""
        kubernetes = dsl.KubernetesWorkspaceConfig(pvcSpecPatch=self.pvc_spec_patch())
        return dsl.PipelineConfig(
            workspace=dsl.WorkspaceConfig(size=self.size, kubernetes=kubernetes)
        )


@dataclass(frozen=True)
class StepResources:
    """The CPU and memory requests and limits of one KFP step's pod (Kubernetes quantities).

    KFP's driver puts them on the step's container: kubeflow/pipelines 2.5.0 and 2.15.0
    ``backend/src/v2/driver/driver.go``, ``initPodSpecPatch`` (``resourceCpuRequest`` and
    the like, which ``PipelineTask.set_cpu_request`` etc. compile to).
    """

    cpu_request: str
    cpu_limit: str
    memory_request: str
    memory_limit: str

    def apply(self, task: dsl.PipelineTask) -> dsl.PipelineTask:
        """``task`` with these requests and limits."""
        return (
            task.set_cpu_request(self.cpu_request)
            .set_cpu_limit(self.cpu_limit)
            .set_memory_request(self.memory_request)
            .set_memory_limit(self.memory_limit)
        )


# Steps that ask the API and follow what they create: validate, train and tune (the job's
# pods do the work), register, deploy. About 110 MiB with every runtime module imported.
API_STEP = StepResources(cpu_request="100m", cpu_limit="1", memory_request="256Mi",
                         memory_limit="1Gi")  # fmt: skip
# Steps that hold the dataset: pack (879 MiB at its peak on all 70,000 images) and evaluate
# (761 MiB on the 10,000 test images), measured with ru_maxrss.
DATA_STEP = StepResources(cpu_request="500m", cpu_limit="2", memory_request="1Gi",
                          memory_limit="2Gi")  # fmt: skip


def _default_images() -> Images:
    return Images(**{runtime: default_image(runtime) for runtime in RUNTIMES})


@dataclass(frozen=True)
class CompileSettings:
    """Images, workspace and backend variant of one compiled pipeline."""

    images: Images = field(default_factory=_default_images)
    workspace: Workspace = field(default_factory=Workspace)
    variant: str = "workspace"

    def __post_init__(self):
        if self.variant not in VARIANTS:
            raise ValueError(f"variant must be one of {', '.join(VARIANTS)}, got {self.variant!r}")
        if self.variant == "pvc" and not self.workspace.storage_class:
            raise ValueError(PVC_NEEDS_CLASS)

    def step(self, task: dsl.PipelineTask, resources: StepResources = API_STEP) -> dsl.PipelineTask:
        """``task`` running in the components image, with ``resources``."""
        return resources.apply(task.set_container_image(self.images.components))

    def check(self, task: dsl.PipelineTask) -> dsl.PipelineTask:
        """A validate step: in the components image, never cached (it asks the cluster)."""
        return self.step(task).set_caching_options(False)
