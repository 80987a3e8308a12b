"""Which compiled variant a Kubeflow Pipelines server can run, found out from the server.

The API server reports its release in ``tag_name`` on ``/apis/v2beta1/healthz``
(kubeflow/pipelines 2.15.0 ``backend/src/apiserver/main.go``). Then:

- before 2.2: no kfp-kubernetes PVC support: refused;
- 2.2 to 2.14: the ``pvc`` variant (2.14 creates the run workspace but never mounts it),
  with a storage class named (their driver falls back to one called ``standard``);
- 2.15 and 2.16: the ``workspace`` variant, which needs a storage class: these releases
  reject a workspace PVC without one unless the API server has a default workspace spec
  (2.15.0 ``backend/src/v2/compiler/argocompiler/argo.go``), which Kubeflow 1.11's
  manifests do not set;
- 2.17 and later: the ``workspace`` variant; the cluster's default class is used when
  none is named.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from cli.errors import UsageError
from pipelines.settings import PVC_NEEDS_CLASS

FIRST_SUPPORTED = (2, 2)
WORKSPACE_FROM = (2, 15)
DEFAULT_CLASS_FROM = (2, 17)


def parse_version(tag: str | None) -> tuple[int, int] | None:
    """``2.15.0`` (or ``v2.15.0-rc.1``) as (2, 15); None if it is no version."""
    found = re.match(r"^v?(\d+)\.(\d+)", tag or "")
    return (int(found[1]), int(found[2])) if found else None


def _text(version: tuple[int, int]) -> str:
    return ".".join(map(str, version))


def choose_variant(version: tuple[int, int], storage_class: str) -> str:
    """The variant (``workspace`` or ``pvc``) a server of ``version`` runs.

    Raises:
        UsageError: the server is too old, or needs a storage class that was not given.
    """
    if version < FIRST_SUPPORTED:
        raise UsageError(
            f"Kubeflow Pipelines {_text(version)} is too old: this pipeline needs "
            f"{_text(FIRST_SUPPORTED)} or later"
        )
    if version < WORKSPACE_FROM:
        if not storage_class:
            raise UsageError(f"Kubeflow Pipelines {_text(version)}: {PVC_NEEDS_CLASS}")
        return "pvc"
    if version < DEFAULT_CLASS_FROM and not storage_class:
        raise UsageError(
            f"Kubeflow Pipelines {_text(version)} refuses a run workspace without a storage "
            "class (unless its API server sets a default workspace spec, which Kubeflow 1.11 "
            "does not): pass --workspace-storage-class NAME (kubectl get storageclass); "
            f"{_text(DEFAULT_CLASS_FROM)} and later use the cluster's default class"
        )
    return "workspace"


def package_settings(package: Path) -> tuple[str, str]:
    """(variant, storage class) of a compiled pipeline YAML."""
    documents = list(yaml.safe_load_all(Path(package).read_text()))
    platform = next((doc for doc in documents[1:] if doc and "platforms" in doc), {})
    config = platform.get("platforms", {}).get("kubernetes", {}).get("pipelineConfig", {})
    workspace = config.get("workspace")
    if not workspace:
        create = documents[0]["root"].get("dag", {}).get("tasks", {}).get("createpvc", {})
        value = create.get("inputs", {}).get("parameters", {}).get("storage_class_name", {})
        return "pvc", value.get("runtimeValue", {}).get("constant", "")
    patch = workspace.get("kubernetes", {}).get("pvcSpecPatch", {})
    return "workspace", patch.get("storageClassName", "")


def check_package(package: Path, version: tuple[int, int]) -> None:
    """Refuse, before upload, a compiled pipeline the server would reject."""
    variant, storage_class = package_settings(package)
    wanted = "pvc" if version < WORKSPACE_FROM else "workspace"
    if version >= FIRST_SUPPORTED and variant != wanted:
        raise UsageError(
            f"--package {package} is the {variant} variant, but Kubeflow Pipelines "
            f"{_text(version)} runs the {wanted} variant: use the other file from "
            "`fmnist compile`, or drop --package"
        )
    choose_variant(version, storage_class)  # too old, or a storage class missing
