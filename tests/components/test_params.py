"""The parameter sets: defaults, every range check, and the validate steps that apply them."""

import ast
import inspect
import textwrap
import typing
from dataclasses import fields

import pytest

from components.specs.names import (
    is_dns1035_label,
    is_dns_label,
    is_dns_subdomain,
    is_image,
    is_quantity,
    is_resource_name,
    is_service_address,
)
from components.specs.params import (
    DataSlice,
    ParamError,
    Serving,
    TrainingJob,
    check_target,
    is_mig_profile,
    trainer_flag_names,
)
from components.specs.pods import Placement, TrainerFlags, WorkPaths
from components.specs.sweep import (
    MAX_GRID_POINTS,
    SEARCHABLE,
    SEEDED_ALGORITHMS,
    Sweep,
    grid_points,
    grid_size,
)
from components.specs.training_job import training_job
from components.steps.validate import validate_serving, validate_sweep, validate_training
from trainer.config import CHOICES, TrainConfig, parse_args

# The trainer's recipe as docs/pipeline.md states it: the job's defaults must be the same.
RECIPE = {"epochs": 10, "batch_size": 128, "lr": 0.004, "momentum": 0.9, "optimizer": "adamw"}


def test_training_defaults_follow_the_trainer():
    train, job = TrainConfig(), TrainingJob()
    assert {name: getattr(train, name) for name in RECIPE} == RECIPE
    assert {name: getattr(job, name) for name in RECIPE} == RECIPE
    assert (job.workers, job.processes, job.job_api, job.queue) == (2, 2, "auto", "fmnist-cpu")


@pytest.mark.parametrize(
    ("changes", "queue", "shm"),
    [
        ({}, "fmnist-cpu", False),
        ({"nproc_per_node": 2}, "fmnist-cpu", True),
        ({"gpus_per_worker": 1}, "fmnist-gpu", True),
        ({"gpus_per_worker": 1, "gpu_resource": "nvidia.com/mig-1g.10gb"}, "fmnist-mig", True),
        ({"gpus_per_worker": 1, "queue_name": "team-a"}, "team-a", True),
    ],
)
def test_queue_follows_the_gpus_and_shm_the_processes(changes, queue, shm):
    job = TrainingJob(**changes)
    assert (job.queue, job.needs_shm) == (queue, shm)


@pytest.mark.parametrize(
    ("cls", "changes", "name", "allowed"),
    [
        (TrainingJob, dict(epochs=0), "epochs", "an integer >= 1"),
        (TrainingJob, dict(batch_size=-8), "batch_size", "an integer >= 1"),
        (TrainingJob, dict(lr=0.0), "lr", "a finite number > 0"),
        (TrainingJob, dict(lr=float("inf")), "lr", "a finite number > 0"),
        (TrainingJob, dict(lr=float("nan")), "lr", "a finite number > 0"),
        (TrainingJob, dict(momentum=float("nan")), "momentum", "in [0, 1)"),
        (TrainingJob, dict(momentum=1.0), "momentum", "in [0, 1)"),
        (TrainingJob, dict(optimizer="lbfgs"), "optimizer", "one of sgd, adamw"),
        (TrainingJob, dict(workers=0), "workers", "an integer >= 1"),
        (TrainingJob, dict(nproc_per_node=0), "nproc_per_node", "an integer >= 1"),
        (TrainingJob, dict(gpus_per_worker=-1), "gpus_per_worker", "an integer >= 0"),
        (TrainingJob, dict(gpu_resource="gpu"), "gpu_resource", "an extended resource name"),
        (
            TrainingJob,
            dict(gpus_per_worker=2, nproc_per_node=2, gpu_resource="nvidia.com/mig-1g.10gb"),
            "gpus_per_worker",
            "1 with a MIG profile",
        ),
        (
            TrainingJob,
            dict(gpus_per_worker=4, nproc_per_node=2),
            "nproc_per_node",
            "equal to gpus_per_worker (4)",
        ),
        (TrainingJob, dict(cpu="two"), "cpu", "a Kubernetes quantity"),
        (TrainingJob, dict(memory="4 GB"), "memory", "a Kubernetes quantity"),
        (TrainingJob, dict(shm_size="lots"), "shm_size", "a Kubernetes quantity"),
        (TrainingJob, dict(memory="0"), "memory", "a Kubernetes quantity > 0"),
        (TrainingJob, dict(cpu="0m"), "cpu", "a Kubernetes quantity > 0"),
        (TrainingJob, dict(priority_class="p" * 64), "priority_class", "at most 63 characters"),
        (TrainingJob, dict(queue_name="Team_A"), "queue_name", "empty or a lowercase DNS label"),
        (TrainingJob, dict(priority_class="High!"), "priority_class", "empty or a lowercase"),
        (TrainingJob, dict(timeout_seconds=0), "timeout_seconds", "an integer >= 1"),
        (TrainingJob, dict(job_api="mpijob"), "job_api", "one of auto, pytorchjob, trainjob"),
        (TrainingJob, dict(trainjob_runtime="Torch"), "trainjob_runtime", "a ClusterTraining"),
        (TrainingJob, dict(trainer_image=" "), "trainer_image", "an image reference"),
        (TrainingJob, dict(trainer_image="bad image!!"), "trainer_image", "an image reference"),
        (TrainingJob, dict(trainer_cpu_image=""), "trainer_cpu_image", "an image reference"),
        (Serving, dict(serving_image="ghcr.io/Team/x:1"), "serving_image", "an image reference"),
        (Serving, dict(model_name="1model"), "model_name", "starting with a letter"),
        (Serving, dict(min_accuracy=1.5), "min_accuracy", "in [0, 1]"),
        (Serving, dict(min_accuracy=-0.1), "min_accuracy", "in [0, 1]"),
        (Serving, dict(min_improvement=-0.01), "min_improvement", "in [0, 1]"),
        (Serving, dict(min_improvement=float("nan")), "min_improvement", "in [0, 1]"),
        (Serving, dict(min_improvement=1.5), "min_improvement", "in [0, 1]"),
        (Serving, dict(min_improvement="0.01"), "min_improvement", "in [0, 1]"),
        (Serving, dict(model_name="Fashion_MNIST"), "model_name", "a lowercase DNS label"),
        (Serving, dict(model_name="m" * 46), "model_name", "at most 45 characters"),
        (Serving, dict(model_pvc="Models"), "model_pvc", "a PVC name"),
        (Serving, dict(deployment_mode="Raw"), "deployment_mode", "one of Standard, Knative"),
        (Serving, dict(serving_min_replicas=0), "serving_min_replicas", ">= 1 (Standard mode)"),
        (
            Serving,
            dict(serving_min_replicas=3, serving_max_replicas=2),
            "serving_max_replicas",
            ">= max(1, serving_min_replicas)",
        ),
        (Serving, dict(serving_gpus=-1), "serving_gpus", "an integer >= 0"),
        (Serving, dict(serving_gpu_resource="gpu"), "serving_gpu_resource", "an extended"),
        (Serving, dict(serving_timeout_seconds=0), "serving_timeout_seconds", "an integer >= 1"),
        (Serving, dict(model_registry="model-registry:8080"), "model_registry", "a server"),
        (Serving, dict(model_registry="http://mr:8080/api"), "model_registry", "a server"),
        (Serving, dict(model_registry_secret=""), "model_registry_secret", "a Secret name"),
        (Serving, dict(model_registry_secret="Bad_Name"), "model_registry_secret", "a Secret"),
        (Serving, dict(model_registry_insecure="true"), "model_registry_insecure", "true or"),
        (DataSlice, dict(train_limit=0), "train_limit", "an integer >= 1"),
        (DataSlice, dict(test_limit=2.5), "test_limit", "an integer >= 1"),
    ],
)
def test_bad_values_name_the_parameter_and_its_range(cls, changes, name, allowed):
    with pytest.raises(ParamError) as error:
        cls(**changes)
    assert error.value.name == name
    assert str(error.value).startswith(f"{name} must be ")
    assert allowed in str(error.value)


@pytest.mark.parametrize(
    ("cls", "changes"),
    [
        (TrainingJob, dict(gpus_per_worker=1, gpu_resource="nvidia.com/mig-1g.10gb")),
        (TrainingJob, dict(gpus_per_worker=8, nproc_per_node=8, gpu_resource="amd.com/gpu")),
        (TrainingJob, dict(cpu="500m", memory="512Mi", priority_class="batch-low")),
        (TrainingJob, dict(cpu="1.5", memory="0.5Gi", shm_size=".5Gi")),
        (TrainingJob, dict(trainer_image="localhost:5000/team/trainer@sha256:" + "a" * 64)),
        (TrainingJob, dict(trainer_image="registry.example.com:8443/a/b-c/d__e:v1.2_rc-3")),
        (TrainingJob, dict(job_api="trainjob", trainjob_runtime="fmnist-torch-distributed")),
        (Serving, dict(deployment_mode="Knative", serving_min_replicas=0)),
        (Serving, dict(deployment_mode="Serverless", serving_min_replicas=0)),
        (Serving, dict(min_accuracy=0.0)),
        (Serving, dict(min_accuracy=1.0)),
        (Serving, dict(min_improvement=0.0)),
        (Serving, dict(min_improvement=0.005)),
        (Serving, dict(model_registry="http://model-registry-service.kubeflow:8080")),
        (Serving, dict(model_registry="https://registry.example.com/")),
    ],
)
def test_good_values_pass(cls, changes):
    kept = cls(**changes)
    assert {name: getattr(kept, name) for name in changes} == changes
    assert type(kept).from_dict(kept.to_dict()) == kept


@pytest.mark.parametrize(
    ("given", "mode"),
    [
        ("Standard", "Standard"),
        ("RawDeployment", "Standard"),
        ("Knative", "Knative"),
        ("Serverless", "Knative"),
    ],
)
def test_both_kserve_namings_mean_the_same_mode(given, mode):
    assert Serving(deployment_mode=given, serving_min_replicas=1).mode == mode


def test_mig_profiles_are_recognised():
    assert is_mig_profile("nvidia.com/mig-1g.10gb")
    assert is_mig_profile("nvidia.com/mig-3g.40gb")
    assert not is_mig_profile("nvidia.com/gpu")


def test_target_is_cluster_or_local():
    assert check_target("local") == "local"
    with pytest.raises(ParamError, match="target must be one of cluster, local, got 'pytorchjob'"):
        check_target("pytorchjob")


def test_a_set_rebuilt_from_a_kfp_struct_has_its_types_back():
    """KFP passes a dict output as a protobuf Struct: every number arrives as a float."""
    job = TrainingJob(epochs=3, gpus_per_worker=1)
    struct = {k: float(v) if isinstance(v, int) else v for k, v in job.to_dict().items()}
    assert TrainingJob.from_dict(struct) == job
    assert isinstance(TrainingJob.from_dict(struct).epochs, int)
    with pytest.raises(ParamError, match="TrainingJob must be made of"):
        TrainingJob.from_dict({**job.to_dict(), "namespace": "team-a"})


def test_validate_training_step_returns_the_checked_set_locally():
    checked = validate_training.python_func(target="local", **TrainingJob().to_dict())
    assert checked == TrainingJob().to_dict()


def test_validate_steps_fail_naming_the_parameter_before_any_cluster_call(fake_k8s):
    with pytest.raises(ParamError, match="workers must be an integer >= 1, got 0"):
        validate_training.python_func(target="cluster", **{**TrainingJob().to_dict(), "workers": 0})
    with pytest.raises(ParamError, match="target must be one of cluster, local"):
        validate_serving.python_func(target="kubeflow", **Serving().to_dict())
    assert fake_k8s.custom.calls == []


def test_validate_training_on_a_cluster_without_a_job_api_names_both_crds(fake_k8s):
    from components.runtime.discovery import ClusterMismatch

    fake_k8s.served = {}
    with pytest.raises(ClusterMismatch) as error:
        validate_training.python_func(target="cluster", **TrainingJob().to_dict())
    message = str(error.value)
    assert "pytorchjobs.kubeflow.org (kubeflow.org/v1)" in message
    assert "trainjobs.trainer.kubeflow.org (trainer.kubeflow.org/v1alpha1)" in message
    assert "docs/install.md" in message


def test_validate_serving_refuses_a_control_plane_namespace(fake_k8s, monkeypatch):
    """KServe's pod mutator skips namespaces labelled control-plane.

    kserve v0.15.2 config/webhook/manifests.yaml: the pod-mutator webhook's
    namespaceSelector is ``control-plane DoesNotExist``.
    """
    from components.runtime import checks

    monkeypatch.setattr(checks, "current_namespace", lambda: "kubeflow")
    fake_k8s.core.namespace_labels["kubeflow"] = {"control-plane": "kubeflow"}
    with pytest.raises(checks.UnusableCluster, match="labelled control-plane=kubeflow"):
        validate_serving.python_func(target="cluster", **Serving().to_dict())
    fake_k8s.core.namespace_labels["kubeflow"] = {"kubernetes.io/metadata.name": "kubeflow"}
    assert validate_serving.python_func(target="cluster", **Serving().to_dict())["model_name"]


def test_validate_serving_refuses_a_namespace_without_the_predictors_account(fake_k8s, monkeypatch):
    """A predictor whose ServiceAccount is missing never gets a pod (its ReplicaSet cannot
    create one): the validate step says so in one line instead."""
    from components.runtime import checks

    monkeypatch.setattr(checks, "current_namespace", lambda: "team-a")
    fake_k8s.core.missing_service_accounts.add("fmnist-predictor")
    with pytest.raises(checks.UnusableCluster) as error:
        validate_serving.python_func(target="cluster", **Serving().to_dict())
    assert str(error.value) == (
        "namespace team-a has no ServiceAccount fmnist-predictor for the predictor; apply "
        "k8s/rbac (it makes fmnist-predictor), or set serving_service_account to one that exists"
    )
    mine = Serving(serving_service_account="team-a-predictor").to_dict()
    assert validate_serving.python_func(target="cluster", **mine)["serving_service_account"] == (
        "team-a-predictor"
    )


@pytest.mark.parametrize(
    ("check", "good", "bad"),
    [
        (is_dns_label, ["team-a", "0a", "a" * 63], ["Team_A", "-a", "a-", "a.b", "a" * 64, ""]),
        (is_dns1035_label, ["fmnist-train", "a" * 63], ["0a", "My_Job", "a" * 64, "a.b"]),
        (is_dns_subdomain, ["nfs-rwx", "a.b-c.d", "a" * 253], ["Fast_SSD", "a..b", "a" * 254]),
        (is_quantity, ["2", "500m", "1.5", ".5", "4Gi"], ["0", "0m", "-1", "1e3", "4 G"]),
        (is_resource_name, ["nvidia.com/gpu", "amd.com/gpu"], ["gpu", "nvidia.com/", "Nvidia/x"]),
        (
            is_image,
            ["python", "ghcr.io/fmnist-pipeline/trainer:0.1.0", "localhost:5000/a_b/c.d:t"],
            ["bad image!!", "Upper/x", "x:", "x@sha256:abc", ":tag", "a" * 256, ""],
        ),
        (
            is_service_address,
            ["http://127.0.0.1:8080", "https://mr.kubeflow.svc.cluster.local", "http://a:1/"],
            ["mr:8080", "ftp://mr", "http://mr/v1", "http://", "http://a b", ""],
        ),
    ],
)
def test_kubernetes_names_quantities_and_images_follow_kubernetes_rules(check, good, bad):
    assert [text for text in good if not check(text)] == []
    assert [text for text in bad if check(text)] == []


@pytest.mark.parametrize(
    ("lr", "epochs", "momentum"),
    [
        ((0.001, 0.003, 0.002), (1, 2, None), None),
        ((0.1, 0.3, 0.1), (2, 8, 3), None),  # 0.1 + 2 * 0.1 overshoots 0.3 in floating point
        ((0.0005, 0.005, 0.0005), (2, 8, None), (0.5, 0.95, 0.15)),
        ((0.01, 0.01, 1.0), (5, 5, None), (0.9, 0.9, 0.1)),
    ],
)
def test_grid_size_counts_the_points_katib_lists(lr, epochs, momentum):
    bounds = dict(lr_min=lr[0], lr_max=lr[1], lr_step=lr[2])
    bounds.update(epochs_min=epochs[0], epochs_max=epochs[1], epochs_step=epochs[2])
    if momentum:
        bounds.update(momentum_min=momentum[0], momentum_max=momentum[1], momentum_step=momentum[2])
    sweep = Sweep(algorithm="grid", **bounds)
    assert grid_size(sweep) == len(grid_points(sweep)) == sweep.max_trials


def test_a_grid_of_millions_of_trials_is_refused_at_once():
    with pytest.raises(ParamError) as error:
        Sweep(algorithm="grid", lr_min=0.00001, lr_max=1, lr_step=0.0000001)
    assert error.value.name == "/".join(f"{name}_step" for name in SEARCHABLE)
    assert error.value.name.startswith("lr_step/epochs_step/")
    assert f"at most {MAX_GRID_POINTS} points (the steps make 69999307)" in str(error.value)


@pytest.mark.parametrize(
    ("changes", "name", "allowed"),
    [
        (dict(algorithm="sobol", seed=1), "seed", "unset with algorithm sobol"),
        (dict(lr_max=float("inf")), "lr_min/lr_max", "a finite number > 0"),
        (dict(lr_min=float("nan")), "lr_min/lr_max", "a finite number > 0"),
        (dict(algorithm="grid", lr_step=float("inf")), "lr_step", "a finite number > 0"),
    ],
)
def test_bad_sweeps_name_the_field(changes, name, allowed):
    with pytest.raises(ParamError) as error:
        Sweep(**changes)
    assert (error.value.name, error.value.allowed[: len(allowed)]) == (name, allowed)


@pytest.mark.parametrize("algorithm", SEEDED_ALGORITHMS)
def test_every_seeded_algorithm_keeps_its_seed(algorithm):
    extra = dict(lr_step=0.0005) if algorithm == "grid" else {}
    assert Sweep(algorithm=algorithm, seed=7, **extra).seed == 7


# A value other than the default for each TrainingJob field that is no trainer flag, with
# the fields it needs beside it (a GPU resource is used only with GPUs). A field added to
# TrainingJob needs an entry here, and must then change the job it builds.
JOB_VARIANTS = {
    "workers": ({}, 3),
    "nproc_per_node": ({}, 2),
    "gpus_per_worker": ({}, 1),
    "gpu_resource": ({"gpus_per_worker": 1}, "example.com/gpu"),
    "cpu": ({}, "3"),
    "memory": ({}, "5Gi"),
    "shm_size": ({"nproc_per_node": 2}, "2Gi"),
    "queue_name": ({}, "team-queue"),
    "priority_class": ({}, "high"),
    "timeout_seconds": ({}, 60),
    "trainjob_runtime": ({}, "other-runtime"),
    "trainer_image": ({"gpus_per_worker": 1}, "registry.local/trainer:9"),
    "trainer_cpu_image": ({}, "registry.local/trainer:9-cpu"),
}
# Fields the train step itself consumes, and where.
STEP_FIELDS = {"job_api": "components/runtime/discovery.py find_target picks the job kind"}


def other_recipe_value(name: str):
    """A valid trainer value of ``name`` other than the trainer's default."""
    default = getattr(TrainConfig(), name)
    if isinstance(default, bool):
        return not default
    if isinstance(default, (int, float)):
        return default + 1 if isinstance(default, int) else default / 2
    return next(choice for choice in CHOICES[name] if choice != default)


def built_jobs(job: TrainingJob) -> list[dict]:
    """The PyTorchJob and the TrainJob the train step would create for ``job``."""
    flags = TrainerFlags.for_job(job, WorkPaths.under("/kfp-workspace"))
    common = dict(name="fmnist-1", namespace="team", job=job, flags=flags, placement=Placement())
    return [training_job(api, **common) for api in ("pytorchjob", "trainjob")]


def test_every_recipe_field_reaches_the_trainer_as_its_own_flag():
    """The job's argv, parsed by the trainer's own parser, gives back every recipe value."""
    names = trainer_flag_names(TrainingJob)
    assert {"epochs", "batch_size", "lr", "momentum", "optimizer"} <= set(names)
    job = TrainingJob(**{name: other_recipe_value(name) for name in names})
    config = parse_args(TrainerFlags.for_job(job, WorkPaths.under("/ws")).args())
    assert {name: getattr(config, name) for name in names} == job.recipe
    assert all(getattr(config, name) != getattr(TrainConfig(), name) for name in names)


@pytest.mark.parametrize("name", [item.name for item in fields(TrainingJob)])
def test_every_training_job_field_reaches_the_job_it_builds(name):
    """A field that changes neither job (nor is the step's own) would be dropped silently."""
    if name in STEP_FIELDS:
        return
    if name in trainer_flag_names(TrainingJob):
        base, value = {}, other_recipe_value(name)
    else:
        assert name in JOB_VARIANTS, f"TrainingJob.{name}: add a value to JOB_VARIANTS"
        base, value = JOB_VARIANTS[name]
    before, after = TrainingJob(**base), TrainingJob(**{**base, name: value})
    changed = [old != new for old, new in zip(built_jobs(before), built_jobs(after), strict=True)]
    assert any(changed), f"TrainingJob.{name}={value!r} changes neither job"


@pytest.mark.parametrize(
    ("step", "parameter_set"),
    [(validate_training, TrainingJob), (validate_serving, Serving), (validate_sweep, Sweep)],
)
def test_each_validate_step_takes_exactly_its_sets_fields(step, parameter_set):
    """The one place a set's fields are written out again: the KFP signature of its step."""
    parameters = inspect.signature(step.python_func).parameters
    hints = typing.get_type_hints(parameter_set)
    taken = {name: item.annotation for name, item in parameters.items() if name != "target"}
    assert sorted(taken) == sorted(item.name for item in fields(parameter_set))
    # Optional exactly where the set's field is: a pipeline parameter left unset reaches the
    # step as null, which KFP's driver refuses for an input not declared optional.
    assert taken == {name: hints[name] for name in taken}


@pytest.mark.parametrize(
    ("step", "parameter_set"),
    [(validate_training, TrainingJob), (validate_serving, Serving), (validate_sweep, Sweep)],
)
def test_each_validate_step_hands_every_parameter_to_its_field(step, parameter_set):
    """The body builds the set with ``name=name`` for every field: none dropped or crossed."""
    body = ast.parse(textwrap.dedent(inspect.getsource(step.python_func)))
    (built,) = [
        node
        for node in ast.walk(body)
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == parameter_set.__name__
    ]
    handed = {keyword.arg: getattr(keyword.value, "id", None) for keyword in built.keywords}
    assert handed == {item.name: item.name for item in fields(parameter_set)}
