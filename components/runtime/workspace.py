"""The run's workspace: the packed dataset staged there, or a clear error when it is not writable.

The steps run as the images' user (uid 10001, group 0). A fresh volume whose root is
``root:root 0755`` (many block-backed storage classes) is writable by that user only when the
pod's ``fsGroup`` makes the kubelet give the volume that group (k8s.io/kubernetes v1.36.3
pkg/volume/volume_linux.go ``SetVolumeOwnership``). The training pods set it themselves
(components/specs/pods.py); KFP's step pods get no pod security context unless the cluster's
Argo sets one for every workflow (k8s/pipelines).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from components.specs.pods import WorkPaths

FIX = (
    "give the pipeline's pods fsGroup 10001 (apply k8s/pipelines to the cluster's Argo "
    "workflow controller) or use a storage class whose new volumes are group-writable; see "
    "docs/operations.md#the-workspace-volume"
)


class WorkspaceNotWritable(PermissionError):
    """The step's user cannot write the run's workspace."""


def not_writable(path: Path) -> WorkspaceNotWritable:
    """The error naming ``path``'s nearest existing folder, its owner and mode, and the fix."""
    folder = next(p for p in (path, *path.parents) if p.exists())
    info = folder.stat()
    return WorkspaceNotWritable(
        f"the workspace folder {folder} (owner {info.st_uid}:{info.st_gid}, mode "
        f"{info.st_mode & 0o7777:04o}) is not writable by this step's user {os.getuid()} "
        f"(groups {', '.join(map(str, sorted(os.getgroups())))}): {FIX}"
    )


def stage_dataset(dataset_dir: str, paths: WorkPaths) -> None:
    """Copy the packed dataset into the workspace, where the job's pods can read it."""
    try:
        shutil.copytree(dataset_dir, paths.data, dirs_exist_ok=True)
        paths.checkpoints.mkdir(parents=True, exist_ok=True)
    except PermissionError as error:
        raise not_writable(Path(error.filename or paths.data)) from None
