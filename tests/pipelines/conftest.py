"""Every pipeline compiled once per test session, in both variants, with default settings."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pipelines import PIPELINES
from pipelines.commands.compile import compile_pipeline
from pipelines.settings import VARIANTS, CompileSettings, Workspace

STORAGE_CLASS = "nfs-rwx"  # the pvc variant needs one


def settings(variant: str) -> CompileSettings:
    """The default settings of ``variant`` (the pvc variant with STORAGE_CLASS)."""
    storage_class = STORAGE_CLASS if variant == "pvc" else ""
    return CompileSettings(workspace=Workspace(storage_class=storage_class), variant=variant)


@pytest.fixture(scope="session")
def packages(tmp_path_factory) -> dict[tuple[str, str], Path]:
    """(pipeline, variant) -> its compiled YAML file."""
    out = tmp_path_factory.mktemp("compiled")
    return {
        (name, variant): compile_pipeline(name, out, settings(variant))
        for name in PIPELINES
        for variant in VARIANTS
    }


@pytest.fixture(scope="session")
def compiled(packages) -> dict[tuple[str, str], list[dict]]:
    """(pipeline, variant) -> its YAML documents: the pipeline spec, the platform spec."""
    return {key: list(yaml.safe_load_all(path.read_text())) for key, path in packages.items()}
