"""k8s/kueue/multikueue: the manager's objects name each other, and a worker's match them.

What Kueue v0.19.2 requires of them (sigs.k8s.io/kueue at v0.19.2):
- the MultiKueue check is an AdmissionCheck with controllerName kueue.x-k8s.io/multikueue whose
  parameters name a MultiKueueConfig (apis/kueue/v1beta2/multikueue_types.go), listed by the
  ClusterQueue's admissionChecksStrategy, once and without onFlavors (clusterqueue_types.go);
- each MultiKueueCluster reads key `kubeconfig` of a Secret in Kueue's namespace
  (pkg/controller/admissionchecks/multikueue/multikueuecluster.go);
- a worker has a LocalQueue of the same name in the same namespace, leading to a ClusterQueue
  without a MultiKueue check (workload.go cloneForCreate; jobframework ApplyDefaultForManagedBy
  would otherwise mark the copy for MultiKueue again).
The cluster tier runs the kit on a manager and two workers (tests/cluster/test_multikueue.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from components.runtime.watchers.multikueue import MULTIKUEUE

K8S = Path(__file__).resolve().parents[2] / "k8s"


def by_kind(objects: list[dict], kind: str) -> dict[str, dict]:
    return {obj["metadata"]["name"]: obj for obj in objects if obj["kind"] == kind}


@pytest.fixture(scope="module")
def manager(render_kustomization) -> list[dict]:
    return render_kustomization(K8S / "kueue" / "multikueue")


@pytest.fixture(scope="module")
def worker(render_kustomization) -> list[dict]:
    """What a worker has: k8s/kueue, then k8s/kueue/multikueue/worker."""
    return render_kustomization(K8S / "kueue") + render_kustomization(
        K8S / "kueue" / "multikueue" / "worker"
    )


def test_the_managers_queue_sends_its_jobs_through_the_multikueue_check(manager):
    (queue,) = by_kind(manager, "ClusterQueue").values()
    (check,) = queue["spec"]["admissionChecksStrategy"]["admissionChecks"]
    assert "onFlavors" not in check
    admission_check = by_kind(manager, "AdmissionCheck")[check["name"]]
    assert admission_check["spec"]["controllerName"] == MULTIKUEUE
    parameters = admission_check["spec"]["parameters"]
    assert (parameters["apiGroup"], parameters["kind"]) == ("kueue.x-k8s.io", "MultiKueueConfig")
    config = by_kind(manager, "MultiKueueConfig")[parameters["name"]]
    assert set(config["spec"]["clusters"]) == set(by_kind(manager, "MultiKueueCluster"))


def test_each_worker_cluster_reads_its_own_secret(manager):
    sources = [
        cluster["spec"]["clusterSource"]["kubeConfig"]
        for cluster in by_kind(manager, "MultiKueueCluster").values()
    ]
    assert {source["locationType"] for source in sources} == {"Secret"}
    assert len({source["location"] for source in sources}) == len(sources)


def test_the_managers_flavors_are_its_own(manager):
    (queue,) = by_kind(manager, "ClusterQueue").values()
    flavors = {f["name"] for g in queue["spec"]["resourceGroups"] for f in g["flavors"]}
    assert flavors <= set(by_kind(manager, "ResourceFlavor"))
    for flavor in flavors:  # no pod of these jobs runs on the manager
        assert "nodeLabels" not in by_kind(manager, "ResourceFlavor")[flavor].get("spec", {})


def test_a_worker_has_the_managers_local_queue_leading_to_its_gpu_quota(manager, worker):
    (local,) = by_kind(manager, "LocalQueue").values()
    there = [
        q
        for q in worker
        if q["kind"] == "LocalQueue"
        and (q["metadata"]["name"], q["metadata"]["namespace"])
        == (local["metadata"]["name"], local["metadata"]["namespace"])
    ]
    (worker_local,) = there
    worker_queue = by_kind(worker, "ClusterQueue")[worker_local["spec"]["clusterQueue"]]
    assert "admissionChecksStrategy" not in worker_queue["spec"]
    covered = {r for g in worker_queue["spec"]["resourceGroups"] for r in g["coveredResources"]}
    assert "nvidia.com/gpu" in covered


def test_a_worker_lets_the_step_read_the_training_log_in_its_namespace_only(manager, worker):
    """tests/k8s/test_rbac.py compares the grants with the code; here: where they apply."""
    (local,) = by_kind(manager, "LocalQueue").values()
    namespace = local["metadata"]["namespace"]
    role = by_kind(worker, "Role")["fmnist-training-log-reader"]
    binding = by_kind(worker, "RoleBinding")["fmnist-training-log-reader"]
    account = by_kind(worker, "ServiceAccount")["fmnist-log-reader"]
    assert not by_kind(worker, "ClusterRole")
    assert {o["metadata"]["namespace"] for o in (role, binding, account)} == {namespace}
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "fmnist-log-reader", "namespace": namespace}
    ]


def _config(render_kustomization, folder: str) -> dict:
    (config_map,) = render_kustomization(K8S / folder)
    return yaml.safe_load(config_map["data"]["controller_manager_config.yaml"])


# The integrations with a MultiKueue adapter, whose kind the manager watches on every worker
# (kueue v0.19.2: the controllers under pkg/controller/jobs that set MultiKueueAdapter).
WATCHED_ON_WORKERS = {
    "batch/job",
    "jobset.x-k8s.io/jobset",
    "kubeflow.org/mpijob",
    "kubeflow.org/pytorchjob",
    "kubeflow.org/tfjob",
    "kubeflow.org/paddlejob",
    "kubeflow.org/xgboostjob",
    "kubeflow.org/jaxjob",
    "leaderworkerset.x-k8s.io/leaderworkerset",
    "pod",
    "ray.io/raycluster",
    "ray.io/rayjob",
    "ray.io/rayservice",
    "statefulset",
    "trainer.kubeflow.org/trainjob",
    "workload.codeflare.dev/appwrapper",
}
# What a worker of this pipeline serves: Kubernetes' own kinds, and the CRDs of JobSet, the
# Training Operator and Trainer (k8s/kueue/multikueue/worker's kustomization.yaml).
SERVED_ON_WORKERS = {
    "batch/job",
    "pod",
    "statefulset",
    "jobset.x-k8s.io/jobset",
    "kubeflow.org/pytorchjob",
    "trainer.kubeflow.org/trainjob",
}


def test_the_managers_kueue_watches_only_kinds_every_worker_serves(render_kustomization):
    frameworks = set(
        _config(render_kustomization, "kueue/multikueue/config")["integrations"]["frameworks"]
    )
    assert frameworks & WATCHED_ON_WORKERS <= SERVED_ON_WORKERS
    assert {"kubeflow.org/pytorchjob", "trainer.kubeflow.org/trainjob"} <= frameworks
    # the single-cluster config would keep every worker out
    single = set(_config(render_kustomization, "kueue/config")["integrations"]["frameworks"])
    assert single & WATCHED_ON_WORKERS - SERVED_ON_WORKERS


def test_the_managers_config_is_the_single_cluster_one_but_for_integrations(
    render_kustomization,
):
    manager = _config(render_kustomization, "kueue/multikueue/config")
    single = _config(render_kustomization, "kueue/config")
    assert manager.pop("multiKueue")["origin"] == "multikueue"
    del manager["integrations"], single["integrations"]
    assert manager == single
