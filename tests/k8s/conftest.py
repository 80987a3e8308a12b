"""Fixtures for the cluster kit: render a kustomization, validate any object strictly."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

# The Kubernetes version whose built-in schemas (ConfigMap, Role, ...) objects must match.
KUBERNETES_VERSION = "1.31.0"


@pytest.fixture(scope="session")
def render_kustomization():
    """``kubectl kustomize DIR`` as a list of objects (kubectl 1.20+ renders these alike)."""
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl renders k8s/: install it (Debian: apt-get install kubernetes-client)"
    cache: dict[Path, list[dict]] = {}

    def render(directory: Path) -> list[dict]:
        if directory not in cache:
            result = subprocess.run(
                [kubectl, "kustomize", str(directory)], capture_output=True, text=True
            )
            assert result.returncode == 0, f"kubectl kustomize {directory}:\n{result.stderr}"
            cache[directory] = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
        return cache[directory]

    return render


@pytest.fixture(scope="session")
def validate_object(crd_schemas, validate_crd):
    """Validate against the upstream CRD if there is one, else Kubernetes' own schema.

    Both reject unknown fields. Raises on any violation.
    """

    def validate(obj: dict) -> None:
        if (obj["apiVersion"], obj["kind"]) in crd_schemas:
            validate_crd(obj)
        else:
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)

    return validate
