"""Writing the volumes the steps share, or a clear error when the step's user may not.

The steps run as the images' user (uid 10001, group 0) and write two volumes: the train and
tune steps stage the packed dataset into the run's workspace, the deploy step copies the model
into the model volume. A fresh volume whose root is ``root:root 0755`` (many block-backed
storage classes) is writable by that user only when the pod's ``fsGroup`` makes the kubelet
give the volume that group (k8s.io/kubernetes v1.36.3 pkg/volume/volume_linux.go
``SetVolumeOwnership``). The training pods set it themselves (components/specs/pods.py); KFP's
step pods get no pod security context unless the cluster's Argo gives one to every workflow
(k8s/pipelines).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from components.specs.pods import WorkPaths
from trainer.model_dir import MODEL_STORE, store_path

FIX = (
    "give the pipeline's pods fsGroup 10001 (apply k8s/pipelines to the cluster's Argo "
    "workflow controller) or use a storage class whose new volumes are group-writable; see "
    "docs/install.md#who-may-write-a-fresh-volume"
)


class VolumeNotWritable(PermissionError):
    """The step's user cannot write a volume the steps share."""


def not_writable(volume: str, path: Path) -> VolumeNotWritable:
    """The error naming ``path``'s nearest existing folder, its owner and mode, and the fix."""
    folder = next(p for p in (path, *path.parents) if p.exists())
    info = folder.stat()
    return VolumeNotWritable(
        f"the {volume} folder {folder} (owner {info.st_uid}:{info.st_gid}, mode "
        f"{info.st_mode & 0o7777:04o}) is not writable by this step's user {os.getuid()} "
        f"(groups {', '.join(map(str, sorted(os.getgroups())))}): {FIX}"
    )


def copy_to_volume(source: str | Path, target: Path, volume: str) -> None:
    """Copy the folder ``source`` into ``target`` on ``volume`` (merging with what is there)."""
    try:
        shutil.copytree(source, target, dirs_exist_ok=True)
    except PermissionError as error:
        raise not_writable(volume, Path(error.filename or target)) from None


def stage_dataset(dataset_dir: str, paths: WorkPaths) -> None:
    """Copy the packed dataset into the workspace, where the job's pods can read it."""
    copy_to_volume(dataset_dir, paths.data_dir, "workspace")
    paths.checkpoint_dir.mkdir(parents=True, exist_ok=True)  # beside data/: writable now


def publish_model(model_dir: str, model_name: str, run_id: str) -> str:
    """Copy the model directory onto the model volume; return its path there (its store_path)."""
    path = store_path(model_name, run_id)
    copy_to_volume(model_dir, Path(MODEL_STORE) / path, "model volume")
    return path
