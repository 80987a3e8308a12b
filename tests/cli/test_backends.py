"""Which compiled variant a Kubeflow Pipelines release runs, and refusing the wrong package.

The rules follow kubeflow/pipelines: kfp-kubernetes PVC tasks from 2.2; the run workspace
mounted from 2.15; 2.15.0 and 2.16 reject a workspace PVC without a storage class unless
the API server has a default workspace spec (2.15.0
``backend/src/v2/compiler/argocompiler/argo.go``); 2.17 uses the cluster's default class.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cli.backends import check_package, choose_variant, package_settings, parse_version
from cli.compiling import compile_pipeline
from cli.errors import UsageError
from cli.server import server_version, stated_version
from pipelines.settings import CompileSettings, Workspace


@pytest.mark.parametrize(
    ("tag", "version"),
    [
        ("2.15.0", (2, 15)),
        ("v2.16.1-rc.2", (2, 16)),
        ("2.5.0", (2, 5)),
        ("unknown", None),  # what the API server reports without TAG_NAME
        ("", None),
        (None, None),
    ],
)
def test_parse_version(tag, version):
    assert parse_version(tag) == version


@pytest.mark.parametrize(
    ("version", "storage_class", "variant"),
    [
        ((2, 5), "fast", "pvc"),
        ((2, 14), "fast", "pvc"),
        ((2, 15), "fast", "workspace"),
        ((2, 16), "fast", "workspace"),
        ((2, 17), "", "workspace"),
        ((2, 17), "fast", "workspace"),
        ((3, 0), "", "workspace"),
    ],
)
def test_choose_variant(version, storage_class, variant):
    assert choose_variant(version, storage_class) == variant


@pytest.mark.parametrize(
    ("version", "message"),
    [
        ((2, 1), "Kubeflow Pipelines 2.1 is too old: this pipeline needs 2.2 or later"),
        ((2, 5), "2.5: the pvc variant .Kubeflow Pipelines 2.2-2.14. needs --workspace-storage"),
        ((2, 14), "create the PVC with the class named, or with 'standard' when none is"),
        ((2, 15), "Kubeflow Pipelines 2.15 refuses a run workspace without a storage class"),
        ((2, 16), "pass --workspace-storage-class NAME"),
    ],
)
def test_choose_variant_refuses(version, message):
    with pytest.raises(UsageError, match=message):
        choose_variant(version, "")


def test_an_unknown_server_version_asks_for_kfp_version():
    assert server_version({"tag_name": "unknown"}, stated_version("2.14.1")) == (2, 14)
    assert server_version({"tag_name": "2.15.0"}, None) == (2, 15)
    with pytest.raises(UsageError, match="pass --kfp-version, e.g. --kfp-version 2.15.0"):
        server_version({"tag_name": "unknown"}, None)


@pytest.mark.parametrize("text", ["banana", "", "v", "2"])
def test_a_kfp_version_that_is_no_release_is_named_as_such(text):
    with pytest.raises(
        UsageError, match=f"--kfp-version must be a release such as 2.15.0, got {text!r}"
    ):
        stated_version(text)


@pytest.fixture(scope="module")
def variants(packages, tmp_path_factory) -> dict[str, Path]:
    """fashion-mnist compiled as: workspace (no class), workspace with class fast, pvc."""
    fast = CompileSettings(workspace=Workspace(storage_class="fast"))
    return {
        "workspace": packages[("fashion-mnist", "workspace")],
        "workspace-fast": compile_pipeline("fashion-mnist", tmp_path_factory.mktemp("fast"), fast),
        "pvc": packages[("fashion-mnist", "pvc")],
    }


def test_package_settings_read_the_variant(variants):
    assert package_settings(variants["workspace"]) == ("workspace", "")
    assert package_settings(variants["workspace-fast"]) == ("workspace", "fast")
    assert package_settings(variants["pvc"]) == (
        "pvc",
        "nfs-rwx",
    )  # the pvc variant's class is not read


@pytest.mark.parametrize(
    ("package", "version", "message"),
    [
        ("workspace", (2, 17), None),
        ("workspace-fast", (2, 15), None),
        ("workspace-fast", (2, 16), None),
        ("pvc", (2, 5), None),
        ("pvc", (2, 14), None),
        ("workspace", (2, 15), "refuses a run workspace without a storage class"),
        (
            "workspace",
            (2, 14),
            "is the workspace variant, but Kubeflow Pipelines 2.14 runs the pvc",
        ),
        ("pvc", (2, 17), "is the pvc variant, but Kubeflow Pipelines 2.17 runs the workspace"),
        ("pvc", (2, 1), "2.1 is too old"),
    ],
)
def test_check_package(variants, package, version, message):
    if message is None:
        check_package(variants[package], version)
        return
    with pytest.raises(UsageError, match=message):
        check_package(variants[package], version)
