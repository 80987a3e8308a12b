"""The pipeline's parameters: defaults, one-line help, and the checks every entry point runs.

``PipelineParams`` is the single source of the defaults the pipeline signature uses and
of the rules a value must follow. ``fmnist run``/``render``/``compile`` build one from
their flags before doing anything, and the pipeline's first step, ``validate-params``,
builds one from the run's arguments, so a bad value fails early with a message that
names the parameter and its allowed range.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from components.images import SERVING_IMAGE, TRAINER_IMAGE
from trainer.config import OPTIMIZERS, TrainConfig

BACKENDS = ("pytorchjob", "local")
DEPLOYMENT_MODES = ("Standard", "Knative")
_TRAIN = TrainConfig()

# An extended resource name: a DNS-subdomain prefix, "/", and a name (e.g. nvidia.com/gpu).
_RESOURCE_NAME = re.compile(
    r"^(?=.{1,253}/)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+"
    r"/[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
_MIG_PROFILE = re.compile(r"^nvidia\.com/mig-\d+g\.\d+gb$")
_QUANTITY = re.compile(r"^(\d+(\.\d+)?|\.\d+)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(
    r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
# The InferenceService name becomes part of Deployment and Service names (<= 63 chars).
MAX_MODEL_NAME = 45


class ParamError(ValueError):
    """A pipeline parameter outside its allowed range; ``name`` is the parameter."""

    def __init__(self, name: str, allowed: str, value: object):
        super().__init__(f"{name} must be {allowed}, got {value!r}")
        self.name, self.allowed, self.value = name, allowed, value


def _param(default, help_text: str):
    return field(default=default, metadata={"help": help_text})


@dataclass(frozen=True)
class PipelineParams:
    """Every parameter of the fashion-mnist pipeline; validated on construction."""

    backend: str = _param(
        "pytorchjob", "pytorchjob: PyTorchJob + KServe on the cluster; local: torchrun here"
    )
    epochs: int = _param(_TRAIN.epochs, "passes over the training set")
    batch_size: int = _param(_TRAIN.batch_size, "global batch size, split over all processes")
    lr: float = _param(_TRAIN.lr, "(peak) learning rate")
    momentum: float = _param(_TRAIN.momentum, "SGD momentum or AdamW beta1")
    optimizer: str = _param(_TRAIN.optimizer, f"one of {', '.join(OPTIMIZERS)}")
    train_limit: int = _param(60_000, "train on at most this many (the first) examples")
    test_limit: int = _param(10_000, "evaluate on at most this many (the first) examples")
    workers: int = _param(
        2, "PyTorchJob replicas: 1 Master + workers-1 Workers (locally: processes)"
    )
    nproc_per_node: int = _param(1, "processes per replica (one per GPU)")
    gpus_per_worker: int = _param(0, "GPUs (or MIG slices) per replica; 0: CPU only")
    gpu_resource: str = _param("nvidia.com/gpu", "GPU resource name, e.g. nvidia.com/mig-1g.10gb")
    cpu: str = _param("2", "CPU request and limit per replica (Kubernetes quantity)")
    memory: str = _param("4Gi", "memory request and limit per replica (Kubernetes quantity)")
    queue_name: str = _param("fmnist", "Kueue LocalQueue that admits the PyTorchJob")
    priority_class: str = _param("", "Kueue WorkloadPriorityClass; empty: none")
    namespace: str = _param(
        "", "namespace of the PyTorchJob and InferenceService; empty: the run's"
    )
    timeout_seconds: int = _param(7200, "fail the training step after this many seconds")
    min_accuracy: float = _param(0.85, "deploy only if the test accuracy reaches this, in [0, 1]")
    model_name: str = _param("fashion-mnist", "name of the InferenceService and the served model")
    model_pvc: str = _param("fmnist-models", "existing PVC the served models are copied to")
    serving_min_replicas: int = _param(1, "minimum predictor replicas (0 needs Knative)")
    serving_max_replicas: int = _param(1, "maximum predictor replicas")
    serving_gpus: int = _param(0, "GPUs per predictor replica")
    serving_timeout_seconds: int = _param(900, "fail the deploy step if not Ready after this")
    deployment_mode: str = _param("Standard", f"KServe mode: {' or '.join(DEPLOYMENT_MODES)}")
    trainer_image: str = _param(TRAINER_IMAGE, "image of the PyTorchJob pods")
    serving_image: str = _param(SERVING_IMAGE, "image of the KServe predictor")

    def __post_init__(self):
        self._check_training()
        self._check_cluster()
        self._check_serving()

    def _check_training(self) -> None:
        _require(self.backend in BACKENDS, "backend", f"one of {', '.join(BACKENDS)}", self.backend)
        for name in (
            "epochs",
            "batch_size",
            "train_limit",
            "test_limit",
            "workers",
            "nproc_per_node",
            "timeout_seconds",
            "serving_timeout_seconds",
        ):
            _require(getattr(self, name) >= 1, name, "an integer >= 1", getattr(self, name))
        _require(self.lr > 0, "lr", "a number > 0", self.lr)
        _require(0 <= self.momentum < 1, "momentum", "in [0, 1)", self.momentum)
        _require(
            self.optimizer in OPTIMIZERS,
            "optimizer",
            f"one of {', '.join(OPTIMIZERS)}",
            self.optimizer,
        )

    def _check_cluster(self) -> None:
        _require(
            self.gpus_per_worker >= 0, "gpus_per_worker", "an integer >= 0", self.gpus_per_worker
        )
        _require(
            bool(_RESOURCE_NAME.match(self.gpu_resource)),
            "gpu_resource",
            "an extended resource name such as nvidia.com/gpu",
            self.gpu_resource,
        )
        if self.gpus_per_worker and is_mig_profile(self.gpu_resource):
            _require(
                self.gpus_per_worker == 1,
                "gpus_per_worker",
                "1 with a MIG profile (one slice per replica)",
                self.gpus_per_worker,
            )
        if self.gpus_per_worker:
            _require(
                self.nproc_per_node == self.gpus_per_worker,
                "nproc_per_node",
                f"equal to gpus_per_worker ({self.gpus_per_worker}): one process per GPU",
                self.nproc_per_node,
            )
        for name in ("cpu", "memory"):
            _require(
                bool(_QUANTITY.match(getattr(self, name))),
                name,
                "a Kubernetes quantity such as 2, 500m or 4Gi",
                getattr(self, name),
            )
        _require(
            bool(_DNS_LABEL.match(self.queue_name)),
            "queue_name",
            "a LocalQueue name (lowercase DNS label)",
            self.queue_name,
        )
        _require(
            not self.priority_class or bool(_DNS_SUBDOMAIN.match(self.priority_class)),
            "priority_class",
            "empty or a lowercase DNS subdomain",
            self.priority_class,
        )
        _require(
            not self.namespace or bool(_DNS_LABEL.match(self.namespace)),
            "namespace",
            "empty or a lowercase DNS label",
            self.namespace,
        )
        for name in ("trainer_image", "serving_image"):
            _require(
                bool(getattr(self, name).strip()), name, "an image reference", getattr(self, name)
            )

    def _check_serving(self) -> None:
        _require(0 <= self.min_accuracy <= 1, "min_accuracy", "in [0, 1]", self.min_accuracy)
        _require(
            len(self.model_name) <= MAX_MODEL_NAME and bool(_DNS_LABEL.match(self.model_name)),
            "model_name",
            f"a lowercase DNS label of at most {MAX_MODEL_NAME} characters",
            self.model_name,
        )
        _require(
            bool(_DNS_SUBDOMAIN.match(self.model_pvc)),
            "model_pvc",
            "a PVC name (lowercase DNS subdomain)",
            self.model_pvc,
        )
        _require(
            self.deployment_mode in DEPLOYMENT_MODES,
            "deployment_mode",
            f"one of {', '.join(DEPLOYMENT_MODES)}",
            self.deployment_mode,
        )
        minimum = 0 if self.deployment_mode == "Knative" else 1
        _require(
            self.serving_min_replicas >= minimum,
            "serving_min_replicas",
            f"an integer >= {minimum} ({self.deployment_mode} mode)",
            self.serving_min_replicas,
        )
        _require(
            self.serving_max_replicas >= max(1, self.serving_min_replicas),
            "serving_max_replicas",
            "an integer >= max(1, serving_min_replicas)",
            self.serving_max_replicas,
        )
        _require(self.serving_gpus >= 0, "serving_gpus", "an integer >= 0", self.serving_gpus)

    @property
    def processes(self) -> int:
        """Training processes in all: replicas times processes per replica."""
        return self.workers * self.nproc_per_node


def _require(ok: bool, name: str, allowed: str, value: object) -> None:
    if not ok:
        raise ParamError(name, allowed, value)


def is_mig_profile(resource: str) -> bool:
    """Whether a GPU resource name is a MIG slice (e.g. nvidia.com/mig-1g.10gb)."""
    return bool(_MIG_PROFILE.match(resource))


DEFAULTS = PipelineParams()
