"""k8s/pipelines: Argo's config runs every pipeline pod as uid 10001, restricted where it reaches.

Rendered as a component over the config map it patches, as kubeflow/pipelines 2.15.0
manifests/kustomize/third-party/argo/base/workflow-controller-configmap-patch.yaml has it
(its keys abridged to the two every install has). What Argo does with it, read in
argo-workflows v3.7.3 (and v3.5.14, KFP 2.5's): workflow/controller/controller.go
``setWorkflowDefaults`` strategic-merges ``workflowDefaults`` into each Workflow (the Workflow's
own fields win; workflow/util/merge.go ``MergeTo``); workflow/controller/workflowpod.go gives
every pod of a template without its own securityContext the Workflow's, strategic-merges
``mainContainer`` into the template's main container (``createWorkflowPod``), gives its own
init and wait containers the ``executor``'s securityContext (``newExecContainer``) and appends
a template's init containers as they are (``addInitContainers``). KFP 2.15 sets
``spec.securityContext`` only to ``{runAsUser}`` when PIPELINE_RUN_AS_USER is set
(backend/src/v2/compiler/argocompiler/argo.go), and its executor template has one init
container of its own, ``kfp-launcher``, with no securityContext (argocompiler/container.go).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml
from pss import violations

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


def argo_config(config_map: dict, key: str) -> dict:
    """One YAML value of Argo's config map ({} when it has none)."""
    return yaml.safe_load(config_map["data"].get(key, "{}"))


def test_the_patch_keeps_every_upstream_setting_and_adds_its_own(patched):
    assert patched["metadata"] == UPSTREAM["metadata"]
    assert patched["data"]["artifactRepository"] == UPSTREAM["data"]["artifactRepository"]
    assert argo_config(patched, "executor")["imagePullPolicy"] == "IfNotPresent"
    assert set(patched["data"]) == {*UPSTREAM["data"], "workflowDefaults", "mainContainer"}


def test_every_pipeline_pod_runs_as_the_images_user_with_its_fs_group(patched):
    pod_context = argo_config(patched, "workflowDefaults")["spec"]["securityContext"]
    assert pod_context == {
        "runAsNonRoot": True,
        "runAsUser": IMAGE_USER,
        "fsGroup": IMAGE_USER,
        "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def kfp_step_pod(config_map: dict) -> dict:
    """A KFP 2.15 step's pod spec as Argo makes it from the config map (contexts only)."""
    restricted = argo_config(config_map, "mainContainer").get("securityContext", {})
    executor = argo_config(config_map, "executor").get("securityContext", {})
    defaults = argo_config(config_map, "workflowDefaults").get("spec", {})
    return {
        "securityContext": defaults.get("securityContext", {}),
        "initContainers": [
            {"name": "init", "securityContext": executor},  # Argo's
            {"name": "kfp-launcher"},  # KFP's, appended as the template has it
        ],
        "containers": [
            {"name": "wait", "securityContext": executor},
            {"name": "main", "securityContext": restricted},  # the driver's patch adds none
        ],
    }


def test_a_kfp_step_pod_is_restricted_but_for_kfp_s_own_launcher_init_container(patched):
    """Only what KFP 2.16's compiler adds is missing, on the container Argo's config can't reach."""
    assert violations(kfp_step_pod(patched)) == [
        "privilege escalation: kfp-launcher must set allowPrivilegeEscalation false",
        "capabilities: kfp-launcher must drop ALL",
    ]


def test_with_kfp_s_config_map_alone_every_container_breaks_four_controls():
    assert len(violations(kfp_step_pod(UPSTREAM))) == 4 * 4  # escalation, user, seccomp, caps
