"""Writing the shared volumes: a folder the step cannot write is a one-line error.

These tests run as root on CI, which no folder mode stops, so the refusal itself is raised by
a stand-in for ``shutil.copytree``; the real refusal (uid 10001 on a fresh ``root:root 0755``
volume, on a real kubelet) is shown in tests/cluster/test_real_components.py.
"""

from __future__ import annotations

import os

import pytest

from components.runtime import volumes
from components.runtime.volumes import VolumeNotWritable, publish_model, stage_dataset
from components.specs.pods import WorkPaths


def test_staging_copies_the_dataset_and_makes_the_checkpoint_folder(tmp_path):
    source = tmp_path / "packed"
    source.mkdir()
    (source / "manifest.json").write_text("{}")
    paths = WorkPaths.under(tmp_path / "workspace")
    stage_dataset(str(source), paths)
    assert (paths.data_dir / "manifest.json").read_text() == "{}"
    assert paths.checkpoint_dir.is_dir()


def test_a_refused_write_names_the_folder_its_owner_mode_and_the_fix(tmp_path, monkeypatch):
    root = tmp_path / "kfp-workspace"
    root.mkdir()
    root.chmod(0o755)
    paths = WorkPaths.under(root)

    def refuse(source, target, **kwargs):
        raise PermissionError(13, "Permission denied", str(target.parent))

    monkeypatch.setattr(volumes.shutil, "copytree", refuse)
    with pytest.raises(VolumeNotWritable) as raised:
        stage_dataset(str(tmp_path), paths)
    message = str(raised.value)
    assert "\n" not in message
    info = root.stat()  # train/ does not exist: the nearest existing folder is the root
    assert f"the workspace folder {root} (owner {info.st_uid}:{info.st_gid}, mode 0755)" in message
    assert f"this step's user {os.getuid()}" in message
    assert "k8s/pipelines" in message
    assert "docs/install.md#who-may-write-a-fresh-volume" in message
    assert raised.value.__cause__ is None and raised.value.__suppress_context__


def test_publishing_to_a_refused_model_volume_says_so(tmp_path, monkeypatch):
    store = tmp_path / "models"
    store.mkdir()

    def refuse(source, target, **kwargs):
        raise PermissionError(13, "Permission denied", str(target.parent))

    monkeypatch.setattr(volumes.shutil, "copytree", refuse)
    monkeypatch.setattr(volumes, "MODEL_STORE", str(store))
    with pytest.raises(VolumeNotWritable, match=f"the model volume folder {store} "):
        publish_model(str(tmp_path), "fmnist", "run-1")
