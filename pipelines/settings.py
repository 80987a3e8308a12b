"""What is fixed when a pipeline is compiled: the images, the run's workspace, the backend.

Kubeflow Pipelines mounts a per-run workspace only from 2.15 on; 2.15 and 2.16 also
refuse a workspace PVC without a storage class unless their API server has a default
workspace spec (kubeflow/pipelines 2.15.0 ``backend/src/v2/compiler/argocompiler/argo.go``,
``GetWorkspacePVC``); 2.17 falls back to the cluster's default class. For backends
before 2.15 the ``pvc`` variant creates and deletes a PVC of its own (kfp-kubernetes
``CreatePVC``/``DeletePVC``) instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from kfp import dsl

from components.images import Images, default_image

VARIANTS = {"workspace": "KFP >= 2.15: the run's workspace", "pvc": "KFP 2.2-2.14: a PVC per run"}
ACCESS_MODES = ("ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod")
# KFP 2.2-2.14's driver creates the PVC with the class given, or "standard" when none is
# (kubeflow/pipelines 2.14.0 backend/src/v2/driver/k8s.go, createPVC): name a real one.
PVC_NEEDS_CLASS = (
    "the pvc variant (Kubeflow Pipelines 2.2-2.14) needs --workspace-storage-class: those "
    "backends create the PVC with the class named, or with 'standard' when none is"
)
_QUANTITY = re.compile(r"^\d+(\.\d+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


@dataclass(frozen=True)
class Workspace:
    """The run's shared volume: the train step stages data there, the job writes there."""

    size: str = "5Gi"
    # Empty: the cluster's default StorageClass (KFP >= 2.17; 2.15 and 2.16 need a name).
    storage_class: str = ""
    # Several training nodes write checkpoints and the model: ReadWriteMany.
    access_mode: str = "ReadWriteMany"

    def __post_init__(self):
        if not _QUANTITY.match(self.size):
            raise ValueError(f"workspace size must be a quantity such as 5Gi, got {self.size!r}")
        if self.storage_class and not _DNS_SUBDOMAIN.match(self.storage_class):
            raise ValueError(f"workspace storage class {self.storage_class!r} is not a valid name")
        if self.access_mode not in ACCESS_MODES:
            raise ValueError(f"workspace access mode must be one of {', '.join(ACCESS_MODES)}")

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


def _default_images() -> Images:
    return Images(*(default_image(runtime) for runtime in ("trainer", "serving", "components")))


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

    def step(self, task: dsl.PipelineTask) -> dsl.PipelineTask:
        """``task`` running in the components image."""
        return task.set_container_image(self.images.components)

    def check(self, task: dsl.PipelineTask) -> dsl.PipelineTask:
        """A validate step: in the components image, never cached (it asks the cluster)."""
        return self.step(task).set_caching_options(False)
