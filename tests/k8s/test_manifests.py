"""Every kustomization under k8s/ renders, and every object in it passes its schema.

Objects are rendered with ``kubectl kustomize`` and validated strictly (unknown fields
rejected) against the pinned upstream CRDs or Kubernetes' own schemas. The Kueue, GPU,
Karmada and storage objects are then checked against what the pipeline really asks for:
the queue it picks, its GPU toleration and resource name, its default job size.

Kueue's flavor assignment is replayed from kubernetes-sigs/kueue v0.19.2
``pkg/scheduler/flavorassigner/flavorassigner.go`` (``findFlavorForPodSets``): the
requests are filtered to the resource group's ``coveredResources``, the group's flavors
are tried in their listed order, and the first flavor where every *requested* resource
fits is assigned; a ClusterQueue may borrow unused quota of the same flavor and resource
from the other ClusterQueues of its cohort. A resource no group covers makes the workload
inadmissible.
"""

from __future__ import annotations

import argparse
import copy
from pathlib import Path

import pytest
import yaml

from cli.commands import sweep
from components.specs.karmada import propagation_policy
from components.specs.params import TrainingJob, is_mig_profile
from components.specs.pods import GPU_TOLERATION, job_resources

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "k8s"
KUSTOMIZATIONS = sorted(path.parent for path in K8S.rglob("kustomization.yaml"))
GPU = "nvidia.com/gpu"
MIG = "nvidia.com/mig-1g.10gb"


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


def test_the_kit_has_its_parts():
    names = {path.relative_to(K8S).as_posix() for path in KUSTOMIZATIONS}
    assert names == {
        "admission",
        "gpu",
        "karmada",
        "katib",
        "kueue",
        "kueue/config",
        "kueue/mig",
        "kueue/multikueue",
        "kueue/multikueue/config",
        "kueue/multikueue/worker",
        "network-policies",
        "pipelines",
        "rbac",
        "storage",
        "trainer",
        "training-operator",
    }


# k8s/pipelines only patches Argo's config map: test_pipelines_admin.py renders it over that.
STANDALONE = [path for path in KUSTOMIZATIONS if path != K8S / "pipelines"]


@pytest.mark.parametrize("directory", STANDALONE, ids=lambda p: p.relative_to(K8S).as_posix())
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
        referenced.update(directory / patch["path"] for patch in spec.get("patches", []))
        for generator in spec.get("configMapGenerator", []):
            referenced.update(directory / item.split("=")[-1] for item in generator["files"])
    files = {path for path in K8S.rglob("*.yaml") if path.name != "kustomization.yaml"}
    assert files - referenced == set(), "YAML that no kustomization applies (or validates)"


# --- Kueue ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def kueue(render_kustomization) -> list[dict]:
    """The objects of k8s/kueue and k8s/kueue/mig together, as a cluster has them."""
    return render_kustomization(K8S / "kueue") + render_kustomization(K8S / "kueue" / "mig")


def test_each_cluster_queue_has_one_flavor_of_its_own(kueue):
    queues = by_kind(kueue, "ClusterQueue")
    assert {name: flavor_quotas(queue) for name, queue in queues.items()} == {
        "fmnist-cpu": {"fmnist-cpu": {"cpu": 8, "memory": 32 * 2**30}},
        "fmnist-gpu": {"fmnist-gpu": {"cpu": 8, "memory": 32 * 2**30, GPU: 4}},
        "fmnist-mig": {"fmnist-mig": {"cpu": 14, "memory": 56 * 2**30, MIG: 7}},
    }


def test_cluster_queues_are_well_formed(kueue):
    """The rules Kueue's webhook checks and a JSON schema cannot express."""
    flavors = by_kind(kueue, "ResourceFlavor")
    for cluster_queue in by_kind(kueue, "ClusterQueue").values():
        assert cluster_queue["spec"]["cohortName"] == "fmnist"
        for group in cluster_queue["spec"]["resourceGroups"]:
            for flavor in group["flavors"]:
                assert flavor["name"] in flavors
                # Same resources, in the same order, as coveredResources.
                assert [res["name"] for res in flavor["resources"]] == group["coveredResources"]


def test_local_queues_lead_to_their_cluster_queues(kueue):
    local_queues = by_kind(kueue, "LocalQueue")
    assert {name: queue["spec"]["clusterQueue"] for name, queue in local_queues.items()} == {
        "fmnist-cpu": "fmnist-cpu",
        "fmnist-gpu": "fmnist-gpu",
        "fmnist-mig": "fmnist-mig",
    }
    assert {queue["metadata"]["namespace"] for queue in local_queues.values()} == {"kubeflow"}


def test_gpu_flavors_select_and_tolerate_the_gpu_pool(kueue):
    flavors = by_kind(kueue, "ResourceFlavor")
    assert "spec" not in flavors["fmnist-cpu"]  # any node
    assert flavors["fmnist-gpu"]["spec"]["nodeLabels"] == {"nvidia.com/gpu.present": "true"}
    assert flavors["fmnist-mig"]["spec"]["nodeLabels"] == {"nvidia.com/mig.strategy": "mixed"}
    for name in ("fmnist-gpu", "fmnist-mig"):
        assert flavors[name]["spec"]["tolerations"] == [GPU_TOLERATION]


JOBS = {  # the job sizes the pipeline's queue choice has to cover
    "cpu": TrainingJob(),
    "gpu": TrainingJob(gpus_per_worker=1),
    "mig": TrainingJob(gpus_per_worker=1, gpu_resource=MIG),
}


@pytest.mark.parametrize(
    ("job", "queue"), [("cpu", "fmnist-cpu"), ("gpu", "fmnist-gpu"), ("mig", "fmnist-mig")]
)
def test_the_pipelines_default_queue_exists_and_covers_the_job(kueue, job, queue):
    assert JOBS[job].queue == queue
    local_queue = by_kind(kueue, "LocalQueue")[queue]
    cluster_queue = by_kind(kueue, "ClusterQueue")[local_queue["spec"]["clusterQueue"]]
    covered = {r for g in cluster_queue["spec"]["resourceGroups"] for r in g["coveredResources"]}
    assert set(job_resources(JOBS[job])["limits"]) <= covered


@pytest.mark.parametrize("job", sorted(JOBS))
def test_the_default_job_fits_its_queues_quota(kueue, job):
    """A quota smaller than one job would leave it queued forever (Kueue never admits it)."""
    training = JOBS[job]
    cluster_queue = by_kind(kueue, "ClusterQueue")[training.queue]
    ((_, quota),) = flavor_quotas(cluster_queue).items()
    for resource, amount in job_resources(training)["limits"].items():
        assert training.workers * quantity(amount) <= quota[resource], resource


def test_priority_classes_are_usable_pipeline_parameters(kueue):
    classes = by_kind(kueue, "WorkloadPriorityClass")
    assert classes["fmnist-production"]["value"] > classes["fmnist-experiment"]["value"]
    for name in classes:
        assert TrainingJob(priority_class=name).priority_class == name


def test_kueue_config_enables_both_job_integrations(render_kustomization):
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
    assert {"kubeflow.org/pytorchjob", "trainer.kubeflow.org/trainjob"} <= set(frameworks)
    assert len(frameworks) == len(set(frameworks))


# --- Kueue's flavor assignment, replayed over the rendered ClusterQueues -----------------


def assign_flavor(
    objects: list[dict], local_queue: str, requests: dict[str, float], usage: dict
) -> str | None:
    """The flavor Kueue admits a workload to, or None while it cannot (it waits).

    ``usage`` is (ClusterQueue, flavor) -> {resource: what its admitted workloads hold}.
    """
    cluster_queues = by_kind(objects, "ClusterQueue")
    name = by_kind(objects, "LocalQueue")[local_queue]["spec"]["clusterQueue"]
    assigned = set()
    for resource in requests:
        groups = [
            group
            for group in cluster_queues[name]["spec"]["resourceGroups"]
            if resource in group["coveredResources"]
        ]
        if not groups:
            return None  # "resource ... unavailable in ClusterQueue": inadmissible
        (group,) = groups
        wanted = {r: v for r, v in requests.items() if r in group["coveredResources"]}
        fitting = (
            flavor["name"]
            for flavor in group["flavors"]
            if all(
                usage.get((name, flavor["name"]), {}).get(r, 0) + v
                <= available(cluster_queues, name, flavor["name"], r, usage)
                for r, v in wanted.items()
            )
        )
        flavor = next(fitting, None)
        if flavor is None:
            return None
        assigned.add(flavor)
    (flavor,) = assigned
    return flavor


def available(cluster_queues: dict, name: str, flavor: str, resource: str, usage: dict) -> float:
    """This queue's nominal quota plus what its cohort lends of the same flavor and resource."""

    def nominal(queue: dict) -> float:
        return flavor_quotas(queue).get(flavor, {}).get(resource, 0)

    cohort = cluster_queues[name]["spec"].get("cohortName")
    lent = sum(
        max(0.0, nominal(queue) - usage.get((other, flavor), {}).get(resource, 0))
        for other, queue in cluster_queues.items()
        if other != name and cohort and queue["spec"].get("cohortName") == cohort
    )
    return nominal(cluster_queues[name]) + lent


def filled(objects: list[dict], flavor: str) -> dict:
    """Usage that holds all of ``flavor``'s quota, in every ClusterQueue that lists it."""
    usage = {}
    for name, queue in by_kind(objects, "ClusterQueue").items():
        quotas = flavor_quotas(queue)
        if flavor in quotas:
            usage[(name, flavor)] = quotas[flavor]
    return usage


def job_requests(job: TrainingJob) -> dict[str, float]:
    """What Kueue counts for the job: each resource times the nodes."""
    limits = job_resources(job)["limits"]
    return {name: job.workers * quantity(value) for name, value in limits.items()}


@pytest.mark.parametrize(
    ("job", "full", "expected"),
    [
        ("cpu", None, "fmnist-cpu"),
        ("cpu", "fmnist-gpu", "fmnist-cpu"),
        ("cpu", "fmnist-cpu", None),  # waits; never spills onto the GPU flavor
        ("gpu", None, "fmnist-gpu"),
        ("gpu", "fmnist-cpu", "fmnist-gpu"),
        ("gpu", "fmnist-gpu", None),  # waits; never falls back to the CPU flavor
        ("mig", None, "fmnist-mig"),
        ("mig", "fmnist-gpu", "fmnist-mig"),
    ],
)
def test_kueue_gives_a_job_only_the_flavor_of_its_queue(kueue, job, full, expected):
    usage = filled(kueue, full) if full else {}
    assert assign_flavor(kueue, JOBS[job].queue, job_requests(JOBS[job]), usage) == expected


def test_a_gpu_job_in_the_cpu_queue_is_never_admitted(kueue):
    assert assign_flavor(kueue, "fmnist-cpu", job_requests(JOBS["gpu"]), {}) is None


def test_the_replay_finds_the_bug_of_one_group_with_both_flavors(kueue):
    """The layout this replaced: [fmnist-cpu, fmnist-gpu] in one group of one ClusterQueue."""
    merged = copy.deepcopy(by_kind(kueue, "ClusterQueue")["fmnist-gpu"])
    merged["metadata"]["name"] = "fmnist"
    cpu_flavor = {
        "name": "fmnist-cpu",
        "resources": [
            {"name": "cpu", "nominalQuota": 8},
            {"name": "memory", "nominalQuota": "32Gi"},
            {"name": GPU, "nominalQuota": 0},
        ],
    }
    merged["spec"]["resourceGroups"][0]["flavors"].insert(0, cpu_flavor)
    local = {
        "kind": "LocalQueue",
        "metadata": {"name": "fmnist"},
        "spec": {"clusterQueue": "fmnist"},
    }
    objects = [merged, local]
    requests = job_requests(JOBS["cpu"])
    assert assign_flavor(objects, "fmnist", requests, {}) == "fmnist-cpu"
    assert assign_flavor(objects, "fmnist", requests, filled(objects, "fmnist-cpu")) == "fmnist-gpu"


# --- GPUs, Karmada, RBAC binding, storage ------------------------------------------------


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
    assert sharing["resources"] == [{"name": TrainingJob().gpu_resource, "replicas": 4}]
    assert sharing["renameByDefault"] is False
    assert sharing["failRequestsGreaterThanOne"] is True


def test_mig_queue_covers_a_mig_profile(kueue):
    (resource,) = [
        name
        for name in by_kind(kueue, "ClusterQueue")["fmnist-mig"]["spec"]["resourceGroups"][0][
            "coveredResources"
        ]
        if name.startswith("nvidia.com/")
    ]
    assert is_mig_profile(resource) and resource == JOBS["mig"].gpu_resource
    assert job_resources(JOBS["mig"])["limits"][resource] == "1"


def test_karmada_policy_is_what_the_builder_makes(render_kustomization):
    policies = by_kind(render_kustomization(K8S / "karmada"), "PropagationPolicy")
    assert list(policies.values()) == [
        propagation_policy(
            name="fmnist-training-jobs",
            namespace="kubeflow",
            queue_name=JOBS["gpu"].queue,
            clusters=["member1", "member2"],
        )
    ]


def test_volumes_are_the_ones_the_pipeline_and_the_sweep_command_use(render_kustomization):
    from components.specs.params import Serving

    commands = argparse.ArgumentParser().add_subparsers()
    sweep.register(commands)
    sweep_workspace = commands.choices["sweep"].get_default("workspace_pvc")
    pvcs = by_kind(render_kustomization(K8S / "storage"), "PersistentVolumeClaim")
    assert set(pvcs) == {Serving().model_pvc, sweep_workspace}
    for pvc in pvcs.values():
        assert pvc["metadata"]["namespace"] == "kubeflow"
        assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
