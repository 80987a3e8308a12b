"""Every kustomization under k8s/ renders, and every object in it passes its schema.

Objects are rendered with ``kubectl kustomize`` and validated strictly (unknown fields
rejected) against ../shared/crds or Kubernetes' own schemas. The Kueue, GPU and Karmada
objects are then checked against what the pipeline really asks for: its default queue,
its GPU toleration and resource name, its default job size.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import yaml

from components import manifests
from components.params import DEFAULTS, PipelineParams, is_mig_profile
from pipelines.commands import sweep

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "k8s"
KUSTOMIZATIONS = sorted(path.parent for path in K8S.rglob("kustomization.yaml"))
GPU = "nvidia.com/gpu"


def by_kind(objects: list[dict], kind: str) -> dict[str, dict]:
    return {obj["metadata"]["name"]: obj for obj in objects if obj["kind"] == kind}


def quantity(value) -> float:
    """A Kubernetes quantity as a number (the suffixes these files use)."""
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "m": 1e-3}
    text = str(value)
    for suffix, factor in units.items():
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * factor
    return float(text)


def flavor_quotas(cluster_queue: dict) -> dict[str, dict[str, float]]:
    """nominalQuota by flavor, then by resource."""
    return {
        flavor["name"]: {res["name"]: quantity(res["nominalQuota"]) for res in flavor["resources"]}
        for group in cluster_queue["spec"]["resourceGroups"]
        for flavor in group["flavors"]
    }


def test_the_kit_has_the_four_parts():
    names = {path.relative_to(K8S).as_posix() for path in KUSTOMIZATIONS}
    assert {"kueue", "kueue/config", "rbac", "karmada", "gpu", "storage"} <= names


@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=lambda p: p.relative_to(K8S).as_posix())
def test_every_rendered_object_passes_its_schema(directory, render_kustomization, validate_object):
    objects = render_kustomization(directory)
    assert objects, f"{directory} renders nothing"
    for obj in objects:
        validate_object(obj)


def test_every_yaml_file_is_part_of_a_kustomization():
    referenced = set()
    for directory in KUSTOMIZATIONS:
        spec = yaml.safe_load((directory / "kustomization.yaml").read_text())
        referenced.update(directory / name for name in spec.get("resources", []))
        for generator in spec.get("configMapGenerator", []):
            referenced.update(directory / item.split("=")[-1] for item in generator["files"])
    files = {path for path in K8S.rglob("*.yaml") if path.name != "kustomization.yaml"}
    assert files - referenced == set(), "YAML that no kustomization applies (or validates)"


@pytest.fixture(scope="module")
def kueue(render_kustomization) -> list[dict]:
    return render_kustomization(K8S / "kueue")


def test_local_queue_is_the_pipelines_default_queue(kueue):
    local_queues = by_kind(kueue, "LocalQueue")
    assert list(local_queues) == [DEFAULTS.queue_name]
    queue = local_queues[DEFAULTS.queue_name]
    assert queue["metadata"]["namespace"] == "kubeflow"
    assert queue["spec"]["clusterQueue"] in by_kind(kueue, "ClusterQueue")


@pytest.mark.parametrize("part", ["kueue", "kueue/mig"])
def test_cluster_queues_are_well_formed(part, render_kustomization):
    """The rules Kueue's webhook checks and a JSON schema cannot express."""
    objects = render_kustomization(K8S / part)
    flavors = by_kind(objects, "ResourceFlavor") | by_kind(
        render_kustomization(K8S / "kueue"), "ResourceFlavor"
    )
    for cluster_queue in by_kind(objects, "ClusterQueue").values():
        assert cluster_queue["spec"]["cohortName"] == "fmnist"
        for group in cluster_queue["spec"]["resourceGroups"]:
            for flavor in group["flavors"]:
                assert flavor["name"] in flavors
                # Same resources, in the same order, as coveredResources.
                assert [res["name"] for res in flavor["resources"]] == group["coveredResources"]


def test_cpu_jobs_take_the_cpu_flavor_and_gpu_jobs_the_gpu_flavor(kueue):
    cluster_queue = by_kind(kueue, "ClusterQueue")["fmnist"]
    quotas = flavor_quotas(cluster_queue)
    assert list(quotas) == ["fmnist-cpu", "fmnist-gpu"]  # tried in this order
    assert quotas["fmnist-cpu"][GPU] == 0
    assert quotas["fmnist-gpu"][GPU] >= 1
    gpu_flavor = by_kind(kueue, "ResourceFlavor")["fmnist-gpu"]["spec"]
    assert manifests.GPU_TOLERATION in gpu_flavor["tolerations"]
    assert gpu_flavor["nodeLabels"] == {"nvidia.com/gpu.present": "true"}


@pytest.mark.parametrize("gpus", [0, 1])
def test_the_default_job_fits_the_quota(gpus, kueue):
    """A quota smaller than one job would leave it queued forever (Kueue never admits it)."""
    params = PipelineParams(gpus_per_worker=gpus)
    limits = manifests.resources(params.cpu, params.memory, gpus, params.gpu_resource)["limits"]
    flavor = "fmnist-gpu" if gpus else "fmnist-cpu"
    quota = flavor_quotas(by_kind(kueue, "ClusterQueue")["fmnist"])[flavor]
    for resource, amount in limits.items():
        assert params.workers * quantity(amount) <= quota[resource], resource


def test_priority_classes_are_usable_pipeline_parameters(kueue):
    classes = by_kind(kueue, "WorkloadPriorityClass")
    assert classes["fmnist-production"]["value"] > classes["fmnist-experiment"]["value"]
    for name in classes:
        assert PipelineParams(priority_class=name).priority_class == name


def test_mig_queue_matches_a_mig_pipeline_run(render_kustomization):
    objects = render_kustomization(K8S / "kueue" / "mig")
    (queue,) = by_kind(objects, "LocalQueue").values()
    (cluster_queue,) = by_kind(objects, "ClusterQueue").values()
    (resource,) = [
        name
        for name in cluster_queue["spec"]["resourceGroups"][0]["coveredResources"]
        if name.startswith("nvidia.com/")
    ]
    assert is_mig_profile(resource)
    params = PipelineParams(
        queue_name=queue["metadata"]["name"], gpu_resource=resource, gpus_per_worker=1
    )
    assert manifests.resources(params.cpu, params.memory, 1, resource)["limits"][resource] == 1
    flavor = by_kind(objects, "ResourceFlavor")["fmnist-mig"]["spec"]
    assert manifests.GPU_TOLERATION in flavor["tolerations"]


def test_kueue_config_enables_the_pytorchjob_integration(render_kustomization):
    (config_map,) = render_kustomization(K8S / "kueue" / "config")
    assert config_map["metadata"] == {
        "name": "kueue-manager-config",
        "namespace": "kueue-system",
        "labels": {"app.kubernetes.io/name": "kueue", "control-plane": "controller-manager"},
    }
    config = yaml.safe_load(config_map["data"]["controller_manager_config.yaml"])
    assert config["apiVersion"] == "config.kueue.x-k8s.io/v1beta2"
    assert config["kind"] == "Configuration"
    frameworks = config["integrations"]["frameworks"]
    assert "kubeflow.org/pytorchjob" in frameworks
    assert len(frameworks) == len(set(frameworks))


def test_device_plugin_configs(render_kustomization):
    (config_map,) = render_kustomization(K8S / "gpu")
    configs = {key: yaml.safe_load(text) for key, text in config_map["data"].items()}
    assert set(configs) == {"exclusive", "time-sliced", "mig-single", "mig-mixed"}
    strategies = {key: config["flags"]["migStrategy"] for key, config in configs.items()}
    assert strategies == {
        "exclusive": "none",
        "time-sliced": "none",
        "mig-single": "single",
        "mig-mixed": "mixed",
    }
    assert all(config["version"] == "v1" for config in configs.values())
    sharing = configs["time-sliced"]["sharing"]["timeSlicing"]
    # Slices keep the pipeline's default resource name, one slice per pod.
    assert sharing["resources"] == [{"name": DEFAULTS.gpu_resource, "replicas": 4}]
    assert sharing["renameByDefault"] is False
    assert sharing["failRequestsGreaterThanOne"] is True


def test_karmada_policy_is_what_the_builder_makes(render_kustomization):
    (policy,) = render_kustomization(K8S / "karmada")
    assert policy == manifests.propagation_policy(
        name="fmnist-pytorchjobs",
        namespace="kubeflow",
        queue_name=DEFAULTS.queue_name,
        cluster_weights={"member1": 1, "member2": 1},
    )


def test_rbac_binds_the_role_to_the_pipeline_runner(render_kustomization):
    objects = render_kustomization(K8S / "rbac")
    (role,) = by_kind(objects, "Role").values()
    (binding,) = by_kind(objects, "RoleBinding").values()
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "pipeline-runner", "namespace": "kubeflow"}
    ]
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == "kubeflow"


def test_volumes_are_the_ones_the_pipeline_and_the_sweep_command_use(render_kustomization):
    commands = argparse.ArgumentParser().add_subparsers()
    sweep.register(commands)
    sweep_workspace = commands.choices["sweep"].get_default("workspace_pvc")
    pvcs = by_kind(render_kustomization(K8S / "storage"), "PersistentVolumeClaim")
    assert set(pvcs) == {DEFAULTS.model_pvc, sweep_workspace}
    for pvc in pvcs.values():
        assert pvc["metadata"]["namespace"] == "kubeflow"
        assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
