"""k8s/pipelines: Argo's workflowDefaults give every pipeline pod fsGroup 10001.

Rendered as a component over the config map it patches, as kubeflow/pipelines 2.15.0
manifests/kustomize/third-party/argo/base/workflow-controller-configmap-patch.yaml has it
(its keys abridged to the two every install has). What Argo does with it, read in
argo-workflows v3.7.3 (and v3.5.14, KFP 2.5's): workflow/controller/controller.go
``setWorkflowDefaults`` strategic-merges ``workflowDefaults`` into each Workflow (the Workflow's
own fields win; workflow/util/merge.go ``MergeTo``), and workflow/controller/workflowpod.go
gives every pod of a template without its own securityContext the Workflow's. KFP 2.15 sets
``spec.securityContext`` only to ``{runAsUser}`` when PIPELINE_RUN_AS_USER is set
(backend/src/v2/compiler/argocompiler/argo.go); the merge keeps both.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

from components.specs.pods import IMAGE_USER

K8S = Path(__file__).resolve().parents[2] / "k8s"
UPSTREAM = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {"name": "workflow-controller-configmap", "namespace": "kubeflow"},
    "data": {
        "artifactRepository": "archiveLogs: true\ns3:\n  bucket: mlpipeline\n",
        "executor": "imagePullPolicy: IfNotPresent\n",
    },
}


def workflow_defaults(config_map: dict) -> dict:
    """The ``workflowDefaults`` Workflow a config map holds."""
    return yaml.safe_load(config_map["data"]["workflowDefaults"])


@pytest.fixture(scope="module")
def patched(tmp_path_factory) -> dict:
    """The upstream config map with the component applied."""
    root = tmp_path_factory.mktemp("kfp-overlay")
    (root / "configmap.yaml").write_text(yaml.safe_dump(UPSTREAM))
    overlay = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": ["configmap.yaml"],
        "components": [os.path.relpath(K8S / "pipelines", root)],
    }
    (root / "kustomization.yaml").write_text(yaml.safe_dump(overlay))
    result = subprocess.run(["kubectl", "kustomize", str(root)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    (config_map,) = yaml.safe_load_all(result.stdout)
    return config_map


def test_the_patch_adds_the_defaults_and_keeps_every_upstream_key(patched):
    assert patched["metadata"] == UPSTREAM["metadata"]
    for key, value in UPSTREAM["data"].items():
        assert patched["data"][key] == value
    assert set(patched["data"]) == {*UPSTREAM["data"], "workflowDefaults"}


def test_every_pipeline_pod_gets_the_images_user_as_its_fs_group(patched):
    defaults = workflow_defaults(patched)
    assert defaults == {
        "spec": {
            "securityContext": {"fsGroup": IMAGE_USER, "fsGroupChangePolicy": "OnRootMismatch"}
        }
    }
