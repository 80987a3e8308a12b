"""Karmada for real: k8s/karmada places the pipeline's jobs in one member and reads them back.

Karmada v1.18.1 (karmada-apiserver, -aggregated-apiserver, -controller-manager, -scheduler,
-webhook, built from github.com/karmada-io/karmada at that tag) runs over the tier's two
worker clusters, joined in push mode as member1 and member2 by `cluster.py karmada`
(tools/controlplane/harness/karmada.py); `make test-cluster` runs these tests after the
rest of the tier, `make test-karmada` alone on a running cluster.
Each member is a real control plane with Kueue, the Training Operator, Trainer and JobSet;
kwok plays the pods. The kit is applied as docs/multicluster.md says: k8s/kueue on each member,
k8s/karmada on Karmada, the jobs in namespace kubeflow there.

What is relied on (Karmada v1.18.1):
- a spread constraint of exactly one cluster makes the scheduler size a job by its
  components and keep clusters without room for one whole set out
  (pkg/scheduler/core/estimation.go isMultiTemplateSchedulingApplicable,
  pkg/estimator/client/general.go maxAvailableComponentSets, from the cluster's
  resourceSummary); without it, a job with no replica count goes to every candidate
  (pkg/scheduler/core/common.go AssignReplicas);
- PyTorchJob's components, status and health come from Karmada's own interpreter
  (pkg/resourceinterpreter/default/thirdparty/resourcecustomizations/kubeflow.org/v1/
  PyTorchJob/customizations.yaml); TrainJob's from k8s/karmada/resource-interpreters.yaml;
  a ResourceInterpreterCustomization's operation comes first, per operation
  (pkg/resourceinterpreter/interpreter.go);
- on an update, the member's object is rewritten from the template with only metadata
  and a Retain hook's fields kept (pkg/util/objectwatcher/objectwatcher.go Update);
- a NoExecute taint on a Cluster evicts its workloads (pkg/controllers/cluster/
  taint_manager.go), with the purge mode of the policy's failover.cluster.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from pathlib import Path

import kubernetes
import pytest
import yaml
from cluster_helpers import condition, remote_job, wait_for
from kubernetes.client.exceptions import ApiException

from components.specs.params import TrainingJob
from components.specs.pods import GPU_TOLERATION, Placement
from components.specs.pytorchjob import pytorchjob
from components.specs.trainjob import trainjob

pytestmark = [pytest.mark.cluster, pytest.mark.karmada]
REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "build" / "cluster"
KARMADA_KUBECONFIG = BUILD / "kubeconfig-karmada"
MEMBERS = {"member1": "worker-1", "member2": "worker-2"}
NAMESPACE = "kubeflow"
GPU = "nvidia.com/gpu"
GPU_NODES = ("gpu-node-1", "gpu-node-2")  # of every member (tools/controlplane/config/nodes.yaml)
GPUS_PER_NODE = 8
CLUSTERS = ("cluster.karmada.io", "v1alpha1", "clusters")
BINDINGS = ("work.karmada.io", "v1alpha2", "resourcebindings")
PYTORCHJOBS = ("kubeflow.org", "v1", "pytorchjobs")
TRAINJOBS = ("trainer.kubeflow.org", "v1alpha1", "trainjobs")
CLUSTER_QUEUES = ("kueue.x-k8s.io", "v1beta2", "clusterqueues")


@pytest.fixture(scope="session")
def karmada() -> kubernetes.client.CustomObjectsApi:
    """Karmada's API as admin; fails (not skips) when no Karmada is attached."""
    if not KARMADA_KUBECONFIG.exists():
        pytest.fail(
            f"no Karmada attached ({KARMADA_KUBECONFIG} is missing): "
            "`python tools/controlplane/cluster.py karmada` on a running cluster",
            pytrace=False,
        )
    client = kubernetes.config.new_client_from_config(str(KARMADA_KUBECONFIG))
    return kubernetes.client.CustomObjectsApi(client)


@pytest.fixture(scope="session")
def members() -> dict[str, kubernetes.client.ApiClient]:
    """An admin client of each member cluster, by its Karmada name."""
    return {
        member: kubernetes.config.new_client_from_config(str(BUILD / f"kubeconfig-{worker}"))
        for member, worker in MEMBERS.items()
    }


@pytest.fixture(scope="session")
def kit(karmada, members, kubectl) -> None:
    """k8s/kueue on each member, k8s/karmada and namespace kubeflow on Karmada."""
    for worker in MEMBERS.values():
        kubectl(
            f"--kubeconfig={BUILD / f'kubeconfig-{worker}'}",
            "apply",
            "--server-side",
            "-k",
            str(REPO / "k8s" / "kueue"),
        )
    on_karmada = [f"--kubeconfig={KARMADA_KUBECONFIG}"]
    namespace = yaml.safe_dump(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    )
    kubectl(*on_karmada, "apply", "-f", "-", stdin=namespace)
    kubectl(*on_karmada, "apply", "--server-side", "-k", str(REPO / "k8s" / "karmada"))
    for member in MEMBERS:
        wait_for(lambda m=member: _ready(karmada, m), 60, f"Cluster {member} Ready")


def _ready(karmada, member: str) -> bool:
    return condition(karmada.get_cluster_custom_object(*CLUSTERS, member), "Ready") == "True"


def _binding(karmada, kind: str, name: str) -> dict | None:
    """The job's ResourceBinding on Karmada, or None."""
    bindings = karmada.list_namespaced_custom_object(*BINDINGS[:2], NAMESPACE, BINDINGS[2])
    for binding in bindings["items"]:
        resource = binding["spec"]["resource"]
        if (resource["kind"], resource["name"]) == (kind, name):
            return binding
    return None


def _placed_in(karmada, kind: str, name: str) -> list[str]:
    """The clusters the job's ResourceBinding names (empty until it is scheduled)."""
    binding = _binding(karmada, kind, name) or {"spec": {}}
    return [target["name"] for target in binding["spec"].get("clusters") or []]


def _gpus_allocated(karmada, member: str) -> int:
    summary = karmada.get_cluster_custom_object(*CLUSTERS, member)["status"]["resourceSummary"]
    return int((summary.get("allocated") or {}).get(GPU, "0"))


@contextlib.contextmanager
def gpus_taken(karmada, members, member: str):
    """Every GPU of ``member`` held by pods that run there (not through Karmada), until exit.

    Karmada sees them in the member's resourceSummary: the member has no room for a job
    that asks for a GPU.
    """
    core = kubernetes.client.CoreV1Api(members[member])
    names = []
    for node in GPU_NODES:
        name = f"gpu-holder-{node}-{uuid.uuid4().hex[:6]}"
        core.create_namespaced_pod(
            "default",
            {
                "metadata": {"name": name},
                "spec": {
                    "nodeName": node,
                    "tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}],
                    "containers": [
                        {
                            "name": "hold",
                            "image": "holder",
                            "resources": {"limits": {GPU: str(GPUS_PER_NODE)}},
                        }
                    ],
                },
            },
        )
        names.append(name)
    try:
        everything = GPUS_PER_NODE * len(GPU_NODES)
        wait_for(
            lambda: _gpus_allocated(karmada, member) == everything, 60, f"{member}'s GPUs taken"
        )
        yield
    finally:
        for name in names:
            core.delete_namespaced_pod(name, "default", grace_period_seconds=0)
        wait_for(lambda: _gpus_allocated(karmada, member) == 0, 60, f"{member}'s GPUs free")


def _training() -> TrainingJob:
    """Two nodes of one GPU each, as the pipeline's default GPU job asks."""
    return TrainingJob(workers=2, gpus_per_worker=1, nproc_per_node=1, timeout_seconds=600)


def _placement(settings: str = "") -> Placement:
    """The GPU toleration the step passes on, and a ConfigMap mounted when one is named.

    Not the workspace PVC: the members have no storage for it, and their kube-scheduler
    holds pods whose claim is unbound.
    """
    if not settings:
        return Placement(tolerations=[dict(GPU_TOLERATION)])
    return Placement(
        tolerations=[dict(GPU_TOLERATION)],
        volumes=[{"name": "settings", "configMap": {"name": settings}}],
        volume_mounts=[{"name": "settings", "mountPath": "/etc/fmnist"}],
    )


def a_pytorchjob(name: str, annotations: dict[str, str], settings: str = "") -> dict:
    """The PyTorchJob the train step builds for a 2-node, 1-GPU-each job, named ``name``."""
    job = pytorchjob(
        name=name,
        namespace=NAMESPACE,
        job=_training(),
        args=["--epochs", "1"],
        placement=_placement(settings),
    )
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        replica["template"]["metadata"].setdefault("annotations", {}).update(annotations)
    return job


def a_trainjob(name: str, run_duration: str) -> dict:
    """The TrainJob the train step builds (Trainer v2.3) for a 2-node, 1-GPU-each job."""
    job = trainjob(
        name=name,
        namespace=NAMESPACE,
        job=_training(),
        args=["--epochs", "1"],
        placement=_placement(),
        generation="v2.2",  # Trainer v2.2 and later: runtimePatches
    )
    job["spec"]["trainer"]["env"] = [{"name": "FMNIST_TEST_RUN_DURATION", "value": run_duration}]
    return job


def _config_map(name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "data": {"note": "follows the job"},
    }


def _run_name() -> str:
    return f"karmada-{uuid.uuid4().hex[:8]}"


def _delete(karmada, plural, name: str) -> None:
    with contextlib.suppress(ApiException):
        karmada.delete_namespaced_custom_object(*plural[:2], NAMESPACE, plural[2], name)


def _pods(api, selector: str) -> list:
    return (
        kubernetes.client.CoreV1Api(api)
        .list_namespaced_pod(NAMESPACE, label_selector=selector)
        .items
    )


def test_a_pytorchjob_goes_whole_to_the_member_with_free_gpus_and_reports_back(
    kit, karmada, members
):
    """member1's GPUs are all taken: the job, and the ConfigMap its pods mount, go to member2
    only (the committed policy of earlier releases sent the job to both); Kueue there admits
    it, its Master and Worker run there on GPU nodes; Karmada's interpreter brings Succeeded
    and the replica counts back to the template; deleting it on Karmada deletes it there."""
    name = _run_name()
    settings = f"{name}-settings"
    core = kubernetes.client.CoreV1Api(karmada.api_client)
    with gpus_taken(karmada, members, "member1"):
        core.create_namespaced_config_map(NAMESPACE, _config_map(settings))
        job = a_pytorchjob(name, {"fmnist.test/run-duration": "5s"}, settings)
        # the worker finishes first: once the master has, the job is Succeeded and the
        # Training Operator stops a worker still running, which then never counts as succeeded
        worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]
        worker["annotations"]["fmnist.test/run-duration"] = "2s"
        karmada.create_namespaced_custom_object(*PYTORCHJOBS[:2], NAMESPACE, PYTORCHJOBS[2], job)
        try:
            placed = wait_for(lambda: _placed_in(karmada, "PyTorchJob", name), 60, "placement")
            assert placed == ["member2"]
            there = wait_for(
                lambda: remote_job(members["member2"], PYTORCHJOBS, NAMESPACE, name), 60, "the job"
            )
            assert there["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "fmnist-gpu"
            done = _wait_condition(karmada.api_client, PYTORCHJOBS, name, "Succeeded", 120)
            statuses = done["status"]["replicaStatuses"]
            assert (statuses["Master"]["succeeded"], statuses["Worker"]["succeeded"]) == (1, 1)
            # the Training Operator removes the worker's pod once the job is done
            # (cleanPodPolicy Running), sometimes before this looks: the master's stays
            pods = _pods(members["member2"], f"training.kubeflow.org/job-name={name}")
            replica_types = {p.metadata.labels["training.kubeflow.org/replica-type"] for p in pods}
            assert "master" in replica_types
            assert replica_types <= {"master", "worker"}
            assert {p.spec.node_name for p in pods} <= set(GPU_NODES)
            assert not _pods(members["member1"], f"training.kubeflow.org/job-name={name}")
            assert remote_job(members["member1"], PYTORCHJOBS, NAMESPACE, name) is None
            assert _config_maps(members["member2"]) >= {settings}
            assert settings not in _config_maps(members["member1"])
        finally:
            _delete(karmada, PYTORCHJOBS, name)
            with contextlib.suppress(ApiException):
                core.delete_namespaced_config_map(settings, NAMESPACE)
        wait_for(
            lambda: remote_job(members["member2"], PYTORCHJOBS, NAMESPACE, name) is None,
            60,
            "gone there",
        )


def _config_maps(api) -> set[str]:
    items = kubernetes.client.CoreV1Api(api).list_namespaced_config_map(NAMESPACE).items
    return {item.metadata.name for item in items}


def _wait_condition(api, plural, name: str, kind: str, timeout: float) -> dict:
    """The job on ``api`` once its condition ``kind`` is True."""

    def reached():
        job = remote_job(api, plural, NAMESPACE, name)
        return job if job and condition(job, kind) == "True" else None

    return wait_for(reached, timeout, f"{kind} on {name}")


def test_with_no_member_free_the_job_waits_in_karmada_for_the_first_that_frees_up(
    kit, karmada, members
):
    """Both members' GPUs are taken: the job is placed nowhere (not queued blindly on a
    full member) and goes to member2 as soon as member2's GPUs are free. Divided/Aggregated
    is what makes the scheduler count free capacity at all (spreadconstraint/
    select_clusters.go shouldIgnoreAvailableResource)."""
    name = _run_name()
    with gpus_taken(karmada, members, "member1"):
        with gpus_taken(karmada, members, "member2"):
            job = a_pytorchjob(name, {"fmnist.test/run-duration": "5s"})
            karmada.create_namespaced_custom_object(
                *PYTORCHJOBS[:2], NAMESPACE, PYTORCHJOBS[2], job
            )
            try:
                unplaced = wait_for(lambda: _binding_scheduled(karmada, name), 60, "a verdict")
                assert unplaced["clusters"] == []
                # Karmada v1.18.1's words (spreadconstraint/select_clusters_by_cluster.go)
                assert "no enough resource when selecting 1 clusters" in unplaced["message"]
            except BaseException:
                _delete(karmada, PYTORCHJOBS, name)
                raise
        try:
            placed = wait_for(lambda: _placed_in(karmada, "PyTorchJob", name), 90, "placement")
            assert placed == ["member2"]
        finally:
            _delete(karmada, PYTORCHJOBS, name)


def _binding_scheduled(karmada, name: str) -> dict | None:
    """The job's binding's clusters and its Scheduled condition's message, once it has one."""
    binding = _binding(karmada, "PyTorchJob", name) or {}
    for found in binding.get("status", {}).get("conditions") or []:
        if found["type"] == "Scheduled":
            clusters = [c["name"] for c in binding["spec"].get("clusters") or []]
            return {"clusters": clusters, "message": found["message"]}
    return None


def test_a_trainjob_is_sized_by_its_nodes_and_its_status_comes_back(kit, karmada, members):
    """With k8s/karmada's TrainJob interpreter: member1 has no GPU free, so the TrainJob
    (numNodes 2 x 1 GPU) goes to member2 alone (unsized, it would go to member1: equal
    scores fall to the first name), runs there as a JobSet, and its Complete condition
    reaches the template on Karmada."""
    name = _run_name()
    with gpus_taken(karmada, members, "member1"):
        karmada.create_namespaced_custom_object(
            *TRAINJOBS[:2], NAMESPACE, TRAINJOBS[2], a_trainjob(name, "5s")
        )
        try:
            placed = wait_for(lambda: _placed_in(karmada, "TrainJob", name), 60, "placement")
            assert placed == ["member2"]
            done = _wait_condition(karmada.api_client, TRAINJOBS, name, "Complete", 180)
            assert condition(done, "Failed") != "True"
            assert remote_job(members["member1"], TRAINJOBS, NAMESPACE, name) is None
            there = remote_job(members["member2"], TRAINJOBS, NAMESPACE, name)
            assert condition(there, "Complete") == "True"
            # Kueue's own patch survived Karmada's writes: without it Kueue never unsuspends
            managers = [patch["manager"] for patch in there["spec"]["runtimePatches"]]
            assert managers == ["fmnist.dev/pipeline", "kueue.x-k8s.io/manager"]
        finally:
            _delete(karmada, TRAINJOBS, name)
        wait_for(
            lambda: remote_job(members["member2"], TRAINJOBS, NAMESPACE, name) is None,
            60,
            "gone there",
        )


def test_a_failure_on_the_member_is_the_template_s_failure(kit, karmada, members):
    """A PyTorchJob whose pods fail on the member is Failed on Karmada, naming the member."""
    name = _run_name()
    job = a_pytorchjob(name, {"fmnist.test/fail": "true", "fmnist.test/run-duration": "1s"})
    job["spec"]["runPolicy"]["backoffLimit"] = 0
    karmada.create_namespaced_custom_object(*PYTORCHJOBS[:2], NAMESPACE, PYTORCHJOBS[2], job)
    try:
        (member,) = wait_for(lambda: _placed_in(karmada, "PyTorchJob", name), 60, "placement")
        failed = _wait_condition(karmada.api_client, PYTORCHJOBS, name, "Failed", 120)
        (reason,) = [c for c in failed["status"]["conditions"] if c["type"] == "Failed"]
        assert reason["message"].endswith(f"failed in member clusters: {member}")
        assert condition(failed, "Succeeded") != "True"
    finally:
        _delete(karmada, PYTORCHJOBS, name)


def test_a_noexecute_taint_moves_a_running_job_to_the_other_member(kit, karmada, members):
    """A job running on one member moves when that member is tainted NoExecute: it is
    deleted there before it exists on the other member (the policy's purgeMode Directly:
    never two copies training), and runs on the other."""
    name = _run_name()
    job = a_pytorchjob(name, {"fmnist.test/run-duration": "300s"})
    karmada.create_namespaced_custom_object(*PYTORCHJOBS[:2], NAMESPACE, PYTORCHJOBS[2], job)
    tainted = None
    try:
        (tainted,) = wait_for(lambda: _placed_in(karmada, "PyTorchJob", name), 60, "placement")
        (other,) = set(MEMBERS) - {tainted}
        _wait_condition(members[tainted], PYTORCHJOBS, name, "Running", 90)
        copies = []
        stop = threading.Event()

        def count_copies():  # how many members hold the job at once, while it moves
            while not stop.is_set():
                copies.append(
                    sum(
                        remote_job(api, PYTORCHJOBS, NAMESPACE, name) is not None
                        for api in members.values()
                    )
                )
                stop.wait(0.2)

        counter = threading.Thread(target=count_copies, daemon=True)
        counter.start()
        _taint(karmada, tainted, [{"key": "fmnist.test/drain", "effect": "NoExecute"}])
        assert wait_for(
            lambda: _placed_in(karmada, "PyTorchJob", name) == [other] and [other], 90, "moved"
        ) == [other]
        _wait_condition(members[other], PYTORCHJOBS, name, "Running", 90)
        wait_for(
            lambda: remote_job(members[tainted], PYTORCHJOBS, NAMESPACE, name) is None,
            60,
            "gone there",
        )
        stop.set()
        counter.join()
        assert max(copies) == 1, "the job was on both members at once"
    finally:
        if tainted:
            _taint(karmada, tainted, [])
        _delete(karmada, PYTORCHJOBS, name)


def _taint(karmada, member: str, taints: list[dict]) -> None:
    karmada.patch_cluster_custom_object(*CLUSTERS, member, {"spec": {"taints": taints}})


@contextlib.contextmanager
def queues_held(members):
    """Kueue on every member admits nothing (ClusterQueue fmnist-gpu stopPolicy Hold)."""

    def hold(policy: str) -> None:
        for api in members.values():
            kubernetes.client.CustomObjectsApi(api).patch_cluster_custom_object(
                *CLUSTER_QUEUES, "fmnist-gpu", {"spec": {"stopPolicy": policy}}
            )

    hold("Hold")
    try:
        yield
    finally:
        hold("None")


def test_karmada_leaves_kueue_s_suspend_and_placement_to_the_member(kit, karmada, members):
    """Karmada rewrites a member's copy from the template whenever the template changes;
    k8s/karmada's Retain hook keeps what the member's Kueue owns. A queued job annotated on
    Karmada stays suspended on the member in every version the member stores; admitted,
    it keeps the node selector Kueue's GPU flavor gave its pods."""
    name = _run_name()
    job = a_pytorchjob(name, {"fmnist.test/run-duration": "300s"})
    try:
        with queues_held(members):
            karmada.create_namespaced_custom_object(
                *PYTORCHJOBS[:2], NAMESPACE, PYTORCHJOBS[2], job
            )
            (member,) = wait_for(lambda: _placed_in(karmada, "PyTorchJob", name), 60, "placement")
            there = wait_for(
                lambda: remote_job(members[member], PYTORCHJOBS, NAMESPACE, name),
                60,
                "the job there",
            )
            assert there["spec"]["runPolicy"]["suspend"] is True  # Kueue's webhook, on create
            versions = _versions_while(
                members[member], name, lambda: _annotate(karmada, name, "queued")
            )
            assert [v["spec"]["runPolicy"].get("suspend") for v in versions] == [True] * len(
                versions
            )
        running = _wait_condition(members[member], PYTORCHJOBS, name, "Running", 90)
        selector = running["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"][
            "nodeSelector"
        ]
        assert selector["nvidia.com/gpu.present"] == "true"  # k8s/kueue/resource-flavors.yaml
        versions = _versions_while(
            members[member], name, lambda: _annotate(karmada, name, "running")
        )
        for version in versions:
            assert version["spec"]["runPolicy"].get("suspend") is False
            master = version["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
            assert master.get("nodeSelector") == selector
    finally:
        _delete(karmada, PYTORCHJOBS, name)


def _annotate(karmada, name: str, value: str) -> None:
    patch = {"metadata": {"annotations": {"fmnist.test/note": value}}}
    karmada.patch_namespaced_custom_object(*PYTORCHJOBS[:2], NAMESPACE, PYTORCHJOBS[2], name, patch)


def _versions_while(api, name: str, change) -> list[dict]:
    """Every version of the member's job stored from ``change()`` until one carries the
    annotation it made (Karmada's write), that one included; fails if none does in 60 s."""
    custom = kubernetes.client.CustomObjectsApi(api)
    current = remote_job(api, PYTORCHJOBS, NAMESPACE, name)
    before = current["metadata"].get("annotations", {}).get("fmnist.test/note")
    watch = kubernetes.watch.Watch()
    versions = []
    change()
    for event in watch.stream(
        custom.list_namespaced_custom_object,
        *PYTORCHJOBS[:2],
        NAMESPACE,
        PYTORCHJOBS[2],
        field_selector=f"metadata.name={name}",
        resource_version=current["metadata"]["resourceVersion"],
        timeout_seconds=60,
    ):
        versions.append(event["object"])
        if event["object"]["metadata"].get("annotations", {}).get("fmnist.test/note") != before:
            watch.stop()
            return versions
    pytest.fail(f"Karmada did not write the annotation to the member's copy: {versions}")
