"""The pipeline's parameter sets: one small frozen dataclass per concern, checked on construction.

- ``DataSlice``: how much of FashionMNIST the pack step keeps.
- ``TrainingJob``: how the network trains and where: the recipe, the job's size, its queue.
- ``Serving``: the gate (accuracy, and against the serving model) and the InferenceService.
- ``SweepSpace`` (``components.specs.sweep``): the Katib search space and budget.

Each field carries a one-line help text (``field.metadata["help"]``). The pipeline
signatures, their docstrings and the CLI flags are derived from these classes, so a
parameter's name, default, range and help are written once, here. A bad value raises
``ParamError`` naming the field and its allowed range.

A hyperparameter is declared once, as a field of the trainer's ``TrainConfig`` (its flag,
default, help and range). ``TrainingJob`` names it with ``trainer_flag``: the pipeline
parameter, its check and the job's ``--<name>`` flag follow from that one line, and a
``Sweep`` range (``<name>_min``/``_max``/``_step``) makes it searchable by Katib.
"""

from __future__ import annotations

import math
import re
import typing
from dataclasses import asdict, dataclass, field, fields

from components.images import default_image
from components.specs.compat import (
    DEPLOYMENT_MODES,
    LEGACY_DEPLOYMENT_MODES,
    canonical_deployment_mode,
)
from components.specs.names import (
    is_dns1035_label,
    is_dns_label,
    is_dns_subdomain,
    is_image,
    is_quantity,
    is_resource_name,
    is_service_address,
)
from serving.defaults import MODEL_NAME
from trainer.config import ConfigError, TrainConfig

TARGETS = ("cluster", "local")
JOB_APIS = ("auto", "pytorchjob", "trainjob")
# The LocalQueues of k8s/kueue: CPU and GPU work never share a ClusterQueue.
CPU_QUEUE, GPU_QUEUE, MIG_QUEUE = "fmnist-cpu", "fmnist-gpu", "fmnist-mig"
# The InferenceService name becomes part of Deployment and Service names (<= 63 chars).
MAX_MODEL_NAME = 45
_TRAIN = TrainConfig()

_MIG_PROFILE = re.compile(r"^nvidia\.com/mig-\d+g\.\d+gb$")
QUANTITY = "a Kubernetes quantity > 0 such as 2, 500m or 4Gi"
IMAGE = "an image reference such as ghcr.io/org/name:tag"


class ParamError(ValueError):
    """A parameter outside its allowed range; ``name`` is the parameter."""

    def __init__(self, name: str, allowed: str, value: object):
        super().__init__(f"{name} must be {allowed}, got {value!r}")
        self.name, self.allowed, self.value = name, allowed, value


def param(default, help_text: str):
    """A dataclass field with its one-line help."""
    return field(default=default, metadata={"help": help_text})


def trainer_flag(name: str):
    """A field that is the trainer's ``--<name>``: its default, help and range are the trainer's."""
    declared = {item.name: item for item in fields(TrainConfig)}[name]
    return field(
        default=getattr(_TRAIN, name),
        metadata={"help": declared.metadata["help"], "trainer_flag": True},
    )


def trainer_flag_names(parameter_set) -> tuple[str, ...]:
    """The fields of a set that the trainer receives as flags of the same name, in order."""
    return tuple(item.name for item in fields(parameter_set) if item.metadata.get("trainer_flag"))


_KINDS = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}


def require_kind(value: object, name: str, hint: type) -> None:
    """Raise ``ParamError`` unless ``value`` is of the field's type (an int passes as a float)."""
    kinds = (int, float) if hint is float else (hint,)
    ok = isinstance(value, kinds) and (hint is bool or not isinstance(value, bool))
    require(ok, name, _KINDS[hint], value)


def require(ok: bool, name: str, allowed: str, value: object) -> None:
    """Raise ``ParamError`` unless ``ok``."""
    if not ok:
        raise ParamError(name, allowed, value)


def require_number(value: object, name: str, allowed: str, ok) -> None:
    """Raise ``ParamError`` unless ``value`` is a finite number for which ``ok(value)`` holds."""
    finite = (
        isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    )
    require(finite and ok(value), name, allowed, value)


def is_mig_profile(resource: str) -> bool:
    """Whether a GPU resource name is a MIG slice (e.g. nvidia.com/mig-1g.10gb)."""
    return bool(_MIG_PROFILE.match(resource))


class ParameterSet:
    """What every parameter set shares: conversion to and from plain data."""

    def to_dict(self) -> dict:
        """The fields as a plain dict (what a step passes on as a STRUCT)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict):
        """Rebuild (and check) a set from plain data; JSON numbers become the fields' types.

        A KFP STRUCT carries every number as a float, so ints are restored here.
        """
        hints = typing.get_type_hints(cls)
        known = {item.name for item in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ParamError(cls.__name__, f"made of {', '.join(sorted(known))}", unknown)
        return cls(**{name: _coerce(value, hints[name]) for name, value in values.items()})

    @classmethod
    def help(cls) -> dict[str, str]:
        """Each field's one-line help, by name."""
        return {item.name: item.metadata["help"] for item in fields(cls)}


def _coerce(value, hint):
    if value is None:
        return None
    base = next((arg for arg in typing.get_args(hint) if arg is not type(None)), hint)
    if base is int and isinstance(value, float) and value.is_integer():
        return int(value)
    return value


@dataclass(frozen=True)
class DataSlice(ParameterSet):
    """How much of FashionMNIST to use (the first examples of each split)."""

    train_limit: int = param(60_000, "train on at most this many (the first) examples")
    test_limit: int = param(10_000, "evaluate on at most this many (the first) examples")

    def __post_init__(self):
        for name in ("train_limit", "test_limit"):
            value = getattr(self, name)
            require(isinstance(value, int) and value >= 1, name, "an integer >= 1", value)


@dataclass(frozen=True)
class TrainingJob(ParameterSet):
    """How the network trains and where: the recipe, the job's size and placement, its queue."""

    epochs: int = trainer_flag("epochs")
    batch_size: int = trainer_flag("batch_size")
    lr: float = trainer_flag("lr")
    momentum: float = trainer_flag("momentum")
    optimizer: str = trainer_flag("optimizer")
    workers: int = param(2, "nodes (PyTorchJob replicas, TrainJob numNodes); locally: processes")
    nproc_per_node: int = param(1, "processes per node (one per GPU)")
    gpus_per_worker: int = param(0, "GPUs (or MIG slices) per node; 0: CPU only")
    gpu_resource: str = param("nvidia.com/gpu", "GPU resource name, e.g. nvidia.com/mig-1g.10gb")
    cpu: str = param("2", "CPU request and limit per node (Kubernetes quantity)")
    memory: str = param("4Gi", "memory request and limit per node (Kubernetes quantity)")
    shm_size: str = param("1Gi", "memory-backed /dev/shm per node when it runs GPUs or >1 process")
    queue_name: str = param("", "Kueue LocalQueue; empty: fmnist-cpu, fmnist-gpu or fmnist-mig")
    priority_class: str = param("", "Kueue WorkloadPriorityClass; empty: none")
    timeout_seconds: int = param(7200, "fail the training (and delete its job) after this long")
    job_api: str = param(
        "auto", f"training job kind: {', '.join(JOB_APIS)} (auto asks the cluster)"
    )
    trainjob_runtime: str = param("torch-distributed", "the TrainJob's ClusterTrainingRuntime")
    trainer_image: str = param(default_image("trainer"), "image of training pods with GPUs (CUDA)")
    trainer_cpu_image: str = param(
        default_image("trainer_cpu"), "image of training pods without GPUs (CPU torch)"
    )

    def __post_init__(self):
        self._check_recipe()
        self._check_size()
        self._check_placement()

    def _check_recipe(self) -> None:
        """The trainer's flags are checked as the trainer checks them (``TrainConfig``)."""
        hints = typing.get_type_hints(type(self))
        for name in trainer_flag_names(type(self)):
            require_kind(getattr(self, name), name, hints[name])
        try:
            TrainConfig(**self.recipe)
        except ConfigError as exc:
            raise ParamError(exc.name, exc.allowed, getattr(self, exc.name)) from None
        for name in ("workers", "nproc_per_node", "timeout_seconds"):
            value = getattr(self, name)
            require(isinstance(value, int) and value >= 1, name, "an integer >= 1", value)

    def _check_size(self) -> None:
        gpus = self.gpus_per_worker
        require(isinstance(gpus, int) and gpus >= 0, "gpus_per_worker", "an integer >= 0", gpus)
        resource_name = "an extended resource name such as nvidia.com/gpu"
        require(
            is_resource_name(self.gpu_resource), "gpu_resource", resource_name, self.gpu_resource
        )
        if gpus and is_mig_profile(self.gpu_resource):
            require(gpus == 1, "gpus_per_worker", "1 with a MIG profile (one slice per node)", gpus)
        if gpus:
            per_gpu = f"equal to gpus_per_worker ({gpus}): one process per GPU"
            require(self.nproc_per_node == gpus, "nproc_per_node", per_gpu, self.nproc_per_node)
        for name in ("cpu", "memory", "shm_size"):
            require(is_quantity(getattr(self, name)), name, QUANTITY, getattr(self, name))

    def _check_placement(self) -> None:
        queue = self.queue_name
        label = "empty or a lowercase DNS label"
        require(not queue or is_dns_label(queue), "queue_name", label, queue)
        # Both become label values on the job (kueue.x-k8s.io/...): at most 63 characters.
        priority = self.priority_class
        allowed = "empty or a lowercase DNS subdomain of at most 63 characters"
        require(not priority or is_dns_subdomain(priority, 63), "priority_class", allowed, priority)
        require(self.job_api in JOB_APIS, "job_api", _one_of(JOB_APIS), self.job_api)
        runtime = "a ClusterTrainingRuntime name (DNS subdomain)"
        require(
            is_dns_subdomain(self.trainjob_runtime),
            "trainjob_runtime",
            runtime,
            self.trainjob_runtime,
        )
        for name in ("trainer_image", "trainer_cpu_image"):
            require(is_image(getattr(self, name)), name, IMAGE, getattr(self, name))

    @property
    def recipe(self) -> dict:
        """The fields the trainer receives as ``--<name>`` flags, by name."""
        return {name: getattr(self, name) for name in trainer_flag_names(type(self))}

    @property
    def image(self) -> str:
        """The training pods' image: the CUDA one when they request GPUs, else the CPU one."""
        return self.trainer_image if self.gpus_per_worker else self.trainer_cpu_image

    @property
    def processes(self) -> int:
        """Training processes in all: nodes times processes per node."""
        return self.workers * self.nproc_per_node

    @property
    def queue(self) -> str:
        """The LocalQueue: the one given, else the CPU, GPU or MIG queue of k8s/kueue."""
        if self.queue_name:
            return self.queue_name
        if not self.gpus_per_worker:
            return CPU_QUEUE
        return MIG_QUEUE if is_mig_profile(self.gpu_resource) else GPU_QUEUE

    @property
    def needs_shm(self) -> bool:
        """Several processes or GPUs on a node need more than the default 64 MiB /dev/shm."""
        return self.nproc_per_node > 1 or self.gpus_per_worker > 0


@dataclass(frozen=True)
class Serving(ParameterSet):
    """The gate and the KServe InferenceService that serves a model that passes it."""

    min_accuracy: float = param(0.85, "deploy only if the test accuracy reaches this, in [0, 1]")
    min_improvement: float = param(
        0.0,
        "deploy only if the test accuracy is also at least the serving model's plus this, "
        "in [0, 1]; 0: not worse",
    )
    model_name: str = param(MODEL_NAME, "name of the InferenceService and the served model")
    model_pvc: str = param("fmnist-models", "existing PVC the served models are copied to")
    serving_min_replicas: int = param(1, "minimum predictor replicas (0 needs Knative)")
    serving_max_replicas: int = param(1, "maximum predictor replicas")
    serving_cpu: str = param("1", "CPU request and limit per predictor replica (quantity)")
    serving_memory: str = param("2Gi", "memory request and limit per predictor replica")
    serving_gpus: int = param(0, "GPUs per predictor replica")
    serving_gpu_resource: str = param("nvidia.com/gpu", "GPU resource name of the predictor")
    serving_timeout_seconds: int = param(900, "fail the deploy step if not serving after this")
    deployment_mode: str = param(
        "Standard", "KServe mode: Standard (=RawDeployment) or Knative (=Serverless)"
    )
    serving_image: str = param(default_image("serving"), "image of the KServe predictor")
    model_registry: str = param(
        "",
        "Kubeflow Model Registry address (http://host:port): register each model that passes "
        "the gate and serve it from there; empty: no registration",
    )
    model_registry_secret: str = param(
        "fmnist-model-registry",
        "Secret (keys token, ca.crt) the registry steps mount, if it exists: the only token "
        "sent to model_registry; none: no token",
    )
    model_registry_insecure: bool = param(
        False, "allow the model_registry_secret token over plain http:// (with a warning)"
    )
    serving_service_account: str = param(
        "fmnist-predictor",
        "ServiceAccount of the predictor's pods (k8s/rbac makes fmnist-predictor: no "
        "permissions, no token)",
    )
    take_over_service: bool = param(
        False,
        "replace an InferenceService named model_name that this project did not create "
        "(without it such a service is left alone and the deploy fails)",
    )

    def __post_init__(self):
        require_number(self.min_accuracy, "min_accuracy", "in [0, 1]", lambda gate: 0 <= gate <= 1)
        margin = self.min_improvement
        require_number(margin, "min_improvement", "in [0, 1]", lambda gap: 0 <= gap <= 1)
        name = (
            f"a lowercase DNS label of at most {MAX_MODEL_NAME} characters, starting with a letter"
        )
        model_name = self.model_name
        require(is_dns1035_label(model_name, MAX_MODEL_NAME), "model_name", name, model_name)
        pvc = "a PVC name (lowercase DNS subdomain)"
        require(is_dns_subdomain(self.model_pvc), "model_pvc", pvc, self.model_pvc)
        # KServe >= 0.16 names, or <= 0.15's (components/specs/compat.py): either is accepted.
        modes = (*DEPLOYMENT_MODES, *LEGACY_DEPLOYMENT_MODES)
        mode = self.deployment_mode
        require(mode in modes, "deployment_mode", _one_of(modes), mode)
        self._check_replicas()
        resource = self.serving_gpu_resource
        allowed = "an extended resource name such as nvidia.com/gpu"
        require(is_resource_name(resource), "serving_gpu_resource", allowed, resource)
        require(is_image(self.serving_image), "serving_image", IMAGE, self.serving_image)
        for name in ("serving_cpu", "serving_memory"):
            require(is_quantity(getattr(self, name)), name, QUANTITY, getattr(self, name))
        registry = self.model_registry
        address = "empty, or a server address such as http://model-registry-service.kubeflow:8080"
        require(not registry or is_service_address(registry), "model_registry", address, registry)
        secret = self.model_registry_secret
        allowed = "a Secret name (lowercase DNS subdomain)"
        require(is_dns_subdomain(secret), "model_registry_secret", allowed, secret)
        require_kind(self.model_registry_insecure, "model_registry_insecure", bool)
        account = self.serving_service_account
        allowed = "a ServiceAccount name (lowercase DNS subdomain)"
        require(is_dns_subdomain(account), "serving_service_account", allowed, account)
        require_kind(self.take_over_service, "take_over_service", bool)

    def _check_replicas(self) -> None:
        low, high = self.serving_min_replicas, self.serving_max_replicas
        minimum = 0 if self.mode == "Knative" else 1
        allowed = f"an integer >= {minimum} ({self.mode} mode)"
        require(isinstance(low, int) and low >= minimum, "serving_min_replicas", allowed, low)
        at_least = "an integer >= max(1, serving_min_replicas)"
        require(
            isinstance(high, int) and high >= max(1, low), "serving_max_replicas", at_least, high
        )
        gpus = self.serving_gpus
        require(isinstance(gpus, int) and gpus >= 0, "serving_gpus", "an integer >= 0", gpus)
        cpu_only = (
            f"0 with the default serving image {default_image('serving')}, which has CPU torch "
            "only; to serve on GPUs, pass a build of images/serving.Dockerfile on a CUDA "
            "TORCH_INDEX as the serving image"
        )
        require(
            not gpus or self.serving_image != default_image("serving"),
            "serving_gpus",
            cpu_only,
            gpus,
        )
        timeout = self.serving_timeout_seconds
        require(timeout >= 1, "serving_timeout_seconds", "an integer >= 1", timeout)

    @property
    def mode(self) -> str:
        """The deployment mode in KServe >= 0.16's names: Standard or Knative."""
        return canonical_deployment_mode(self.deployment_mode)


def check_target(target: str) -> str:
    """``cluster`` (PyTorchJob/TrainJob + KServe) or ``local`` (torchrun here); else ParamError."""
    require(target in TARGETS, "target", _one_of(TARGETS), target)
    return target


def _one_of(choices) -> str:
    return f"one of {', '.join(choices)}"
