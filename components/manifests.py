"""Pure builders of the Kubernetes objects the steps create: plain dicts, no I/O.

Small pieces compose into the two objects: ``trainer_args`` + ``resources`` +
``Placement`` -> ``pytorchjob`` (``kubeflow.org/v1``), and ``resources`` ->
``inference_service`` (``serving.kserve.io/v1beta1``). Names and namespaces are
arguments: the steps compute them at run time. Trainer argument values may be
placeholder strings (Katib's ``${trialParameters.lr}``), so every value is rendered
with ``str``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, fields, replace

from components.sweep import SEEDED_ALGORITHMS, TRIAL_PARAMETER_NAMES, SweepConfig
from trainer.metrics import KATIB_METRICS_FILTER

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
ISTIO_INJECT_LABEL = "sidecar.istio.io/inject"
DEPLOYMENT_MODE_ANNOTATION = "serving.kserve.io/deploymentMode"
CONTAINER_NAME = "pytorch"  # the training operator finds the main container by this name
MASTER_PORT = 23456  # the training operator's default PyTorchJob port
SERVING_PORT = 8080  # KServe's default predictor port
KSERVE_MODEL_DIR = "/mnt/models"  # where KServe puts the STORAGE_URI contents
# What the KFP driver mounts for dsl.WORKSPACE_PATH_PLACEHOLDER (kfp >= 2.14).
WORKSPACE_VOLUME = "kfp-workspace"
WORKSPACE_MOUNT_PATH = "/kfp-workspace"
# Tolerate the taint GPU nodes usually carry (GPU operator / cloud node pools).
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


@dataclass(frozen=True)
class CustomResource:
    """Where a custom resource lives in the API: what CustomObjectsApi calls need."""

    group: str
    version: str
    plural: str
    kind: str

    @property
    def api_version(self) -> str:
        """``group/version``, as written in the object."""
        return f"{self.group}/{self.version}"


PYTORCHJOB = CustomResource("kubeflow.org", "v1", "pytorchjobs", "PyTorchJob")
INFERENCESERVICE = CustomResource(
    "serving.kserve.io", "v1beta1", "inferenceservices", "InferenceService"
)


@dataclass(frozen=True)
class TrainerFlags:
    """``python -m trainer`` flags set from pipeline parameters (values may be placeholders)."""

    data_dir: str  # packed dataset directory
    model_dir: str  # where rank 0 writes model.pt + model.json
    checkpoint_dir: str  # per-epoch checkpoint.pt: a restarted pod resumes from it
    epochs: int | str
    batch_size: int | str
    lr: float | str
    momentum: float | str
    optimizer: str
    train_limit: int | str | None = None  # None: the whole split
    test_limit: int | str | None = None
    no_cuda: bool = False  # train on CPU even where CUDA is available


def trainer_args(flags: TrainerFlags) -> list[str]:
    """The trainer's arguments in field order: ``--name=value``, or ``--name`` for a true bool.

    None values and false bools are left out.
    """
    args = []
    for item in fields(flags):
        value, flag = getattr(flags, item.name), "--" + item.name.replace("_", "-")
        if value is True:
            args.append(flag)
        elif value is not None and value is not False:
            args.append(f"{flag}={value}")
    return args


def resources(cpu: str, memory: str, gpus: int = 0, gpu_resource: str = "nvidia.com/gpu") -> dict:
    """Requests = limits for CPU and memory; GPUs (or MIG slices) as a limit when > 0."""
    limits = {"cpu": cpu, "memory": memory}
    if gpus:
        limits[gpu_resource] = gpus
    return {"requests": {"cpu": cpu, "memory": memory}, "limits": limits}


def pvc_volume(name: str, claim_name: str) -> dict:
    """A pod volume backed by a PersistentVolumeClaim."""
    return {"name": name, "persistentVolumeClaim": {"claimName": claim_name}}


def volume_mount(name: str, mount_path: str) -> dict:
    """A container's mount of a pod volume."""
    return {"name": name, "mountPath": mount_path}


@dataclass(frozen=True)
class Placement:
    """Where and with what the training pods run: copied from the launcher task's config."""

    tolerations: list[dict] = field(default_factory=list)
    node_selector: dict[str, str] = field(default_factory=dict)
    affinity: dict = field(default_factory=dict)
    volumes: list[dict] = field(default_factory=list)
    volume_mounts: list[dict] = field(default_factory=list)
    env: list[dict] = field(default_factory=list)


@dataclass(frozen=True)
class RunPolicy:
    """``spec.runPolicy`` of the PyTorchJob."""

    clean_pod_policy: str = "Running"  # kill pods still running when the job ends
    ttl_seconds_after_finished: int = 3600  # the operator deletes the finished job after this
    backoff_limit: int = 3  # pod restarts (each resumes from the checkpoint) before failing
    active_deadline_seconds: int | None = None  # the operator fails the job after this

    def to_dict(self) -> dict:
        """The camelCase fields, unset ones left out."""
        policy = {
            "cleanPodPolicy": self.clean_pod_policy,
            "ttlSecondsAfterFinished": self.ttl_seconds_after_finished,
            "backoffLimit": self.backoff_limit,
        }
        if self.active_deadline_seconds is not None:
            policy["activeDeadlineSeconds"] = self.active_deadline_seconds
        return policy


def _metadata(name: str | None, namespace: str | None, **extra) -> dict:
    metadata = {}
    if name:
        metadata["name"] = name
    if namespace:
        metadata["namespace"] = namespace
    metadata.update({key: value for key, value in extra.items() if value})
    return metadata


def trainer_container(
    image: str, args: list[str], resource_spec: dict, placement: Placement
) -> dict:
    """The ``pytorch`` container: ``torchrun -m trainer`` plus the trainer's arguments.

    torchrun takes nodes, node rank, master address and processes per node from the
    ``PET_*`` variables the training operator sets from the job.
    """
    container = {
        "name": CONTAINER_NAME,
        "image": image,
        "command": ["torchrun", "-m", "trainer"],
        "args": list(args),
        "ports": [{"name": "pytorchjob-port", "containerPort": MASTER_PORT}],
        "resources": resource_spec,
    }
    if placement.env:
        container["env"] = list(placement.env)
    if placement.volume_mounts:
        container["volumeMounts"] = list(placement.volume_mounts)
    return container


def pod_template(container: dict, placement: Placement) -> dict:
    """A pod template around one container, without an Istio sidecar."""
    spec = {"containers": [container]}
    optional = {
        "tolerations": list(placement.tolerations),
        "nodeSelector": dict(placement.node_selector),
        "affinity": dict(placement.affinity),
        "volumes": list(placement.volumes),
    }
    spec.update({key: value for key, value in optional.items() if value})
    return {"metadata": {"labels": {ISTIO_INJECT_LABEL: "false"}}, "spec": spec}


def pytorchjob(
    *,
    name: str | None,
    namespace: str | None,
    image: str,
    args: list[str],
    queue_name: str,
    workers: int = 1,
    nproc_per_node: int = 1,
    resource_spec: dict | None = None,
    priority_class: str | None = None,
    placement: Placement | None = None,
    run_policy: RunPolicy | None = None,
) -> dict:
    """A PyTorchJob: one Master and ``workers - 1`` Workers, each ``nproc_per_node`` processes.

    Kueue admits it through ``queue_name``; ``priority_class`` is set only when given
    (a missing WorkloadPriorityClass would block admission). Pods restart OnFailure and
    the trainer resumes from its checkpoint.
    """
    if workers < 1 or nproc_per_node < 1:
        raise ValueError(
            f"workers and nproc_per_node must be >= 1, got {workers}, {nproc_per_node}"
        )
    placement = placement or Placement()
    template = pod_template(
        trainer_container(image, args, resource_spec or {}, placement), placement
    )
    replicas = {"Master": _replica_spec(1, template)}
    if workers > 1:
        replicas["Worker"] = _replica_spec(workers - 1, copy.deepcopy(template))
    labels = {QUEUE_LABEL: queue_name}
    if priority_class:
        labels[PRIORITY_LABEL] = priority_class
    return {
        "apiVersion": PYTORCHJOB.api_version,
        "kind": PYTORCHJOB.kind,
        "metadata": _metadata(name, namespace, labels=labels),
        "spec": {
            "nprocPerNode": str(nproc_per_node),
            "runPolicy": (run_policy or RunPolicy()).to_dict(),
            "pytorchReplicaSpecs": replicas,
        },
    }


def _replica_spec(replicas: int, template: dict) -> dict:
    return {"replicas": replicas, "restartPolicy": "OnFailure", "template": template}


def inference_service(
    *,
    name: str,
    namespace: str | None,
    image: str,
    storage_uri: str,
    resource_spec: dict,
    min_replicas: int = 1,
    max_replicas: int = 1,
    deployment_mode: str = "Standard",
) -> dict:
    """An InferenceService with a custom predictor: ``python -m serving`` from ``image``.

    KServe downloads or mounts ``storage_uri`` (e.g. ``pvc://models/fashion-mnist/run``)
    at /mnt/models. ``deployment_mode`` is Standard (a Deployment) or Knative
    (scale-to-zero with ``min_replicas=0``).
    """
    container = {
        "name": "kserve-container",
        "image": image,
        "command": ["python", "-m", "serving"],
        "args": [
            f"--model_name={name}",
            f"--model_dir={KSERVE_MODEL_DIR}",
            f"--http_port={SERVING_PORT}",
        ],
        "env": [{"name": "STORAGE_URI", "value": storage_uri}],
        "ports": [{"containerPort": SERVING_PORT, "protocol": "TCP"}],
        "resources": resource_spec,
    }
    annotations = {DEPLOYMENT_MODE_ANNOTATION: deployment_mode}
    return {
        "apiVersion": INFERENCESERVICE.api_version,
        "kind": INFERENCESERVICE.kind,
        "metadata": _metadata(name, namespace, annotations=annotations),
        "spec": {
            "predictor": {
                "minReplicas": min_replicas,
                "maxReplicas": max_replicas,
                "containers": [container],
            }
        },
    }


# --- Katib (issue 5): an Experiment whose trials are the PyTorchJob above ---------------

EXPERIMENT = CustomResource("kubeflow.org", "v1beta1", "experiments", "Experiment")
TRIAL = CustomResource("kubeflow.org", "v1beta1", "trials", "Trial")
# Katib's defaults for Kubeflow training jobs (experiment_defaults.go), set explicitly.
KATIB_SUCCESS_CONDITION = 'status.conditions.#(type=="Succeeded")#|#(status=="True")#'
KATIB_FAILURE_CONDITION = 'status.conditions.#(type=="Failed")#|#(status=="True")#'
# Only the master pod prints the metric line: Katib's collector watches only it.
KATIB_PRIMARY_POD_LABELS = {"training.kubeflow.org/job-role": "master"}
TRIAL_NAME_PARAMETER = "trialName"  # ${trialSpec.Name}: keeps each trial's files apart
_TRIAL_PARAMETER_HELP = {
    "lr": "learning rate (trainer --lr)",
    "epochs": "passes over the training set (trainer --epochs)",
    "momentum": "SGD momentum or AdamW beta1 (trainer --momentum)",
}


def trial_placeholder(name: str) -> str:
    """``${trialParameters.<name>}``: Katib substitutes the trial's value for it."""
    return f"${{trialParameters.{name}}}"


def katib_trial_flags(flags: TrainerFlags, sweep: SweepConfig, root: str) -> TrainerFlags:
    """``flags`` with the searched values as placeholders and per-trial output dirs.

    Args:
        flags: the trainer flags every trial shares (data, batch size, optimizer, ...).
        sweep: which parameters are searched.
        root: a directory on the shared volume; trial ``t`` writes under ``root/t``.
    """
    trial_dir = f"{root.rstrip('/')}/{trial_placeholder(TRIAL_NAME_PARAMETER)}"
    searched = {
        name: trial_placeholder(TRIAL_PARAMETER_NAMES[name]) for name in sweep.parameter_names
    }
    return replace(
        flags,
        model_dir=f"{trial_dir}/model",
        checkpoint_dir=f"{trial_dir}/checkpoints",
        **searched,
    )


def katib_parameters(sweep: SweepConfig) -> list[dict]:
    """``spec.parameters``: lr and momentum as doubles, epochs as an int (values as strings)."""
    specs = []
    for name in sweep.parameter_names:
        low, high, step = sweep.bounds(name)
        space = {"min": str(low), "max": str(high)}
        if step is not None:
            space["step"] = str(step)
        kind = "int" if name == "epochs" else "double"
        specs.append({"name": name, "parameterType": kind, "feasibleSpace": space})
    return specs


def katib_trial_parameters(sweep: SweepConfig) -> list[dict]:
    """``trialTemplate.trialParameters``: one per searched parameter, plus the trial name."""
    params = [
        {
            "name": TRIAL_PARAMETER_NAMES[name],
            "reference": name,
            "description": _TRIAL_PARAMETER_HELP[name],
        }
        for name in sweep.parameter_names
    ]
    params.append(
        {
            "name": TRIAL_NAME_PARAMETER,
            "reference": "${trialSpec.Name}",
            "description": "the trial's name: its output directory",
        }
    )
    return params


def katib_objective(sweep: SweepConfig) -> dict:
    """Maximise accuracy, also collect loss; both keep the latest value (the saved model)."""
    objective = {
        "type": "maximize",
        "objectiveMetricName": "accuracy",
        "additionalMetricNames": ["loss"],
        "metricStrategies": [
            {"name": "accuracy", "value": "latest"},
            {"name": "loss", "value": "latest"},
        ],
    }
    if sweep.goal is not None:
        objective["goal"] = sweep.goal
    return objective


def katib_algorithm(sweep: SweepConfig) -> dict:
    """``spec.algorithm``, with ``random_state`` when seeded and the algorithm takes it."""
    algorithm = {"algorithmName": sweep.algorithm}
    if sweep.seed is not None and sweep.algorithm in SEEDED_ALGORITHMS:
        algorithm["algorithmSettings"] = [{"name": "random_state", "value": str(sweep.seed)}]
    return algorithm


def katib_experiment(
    *, name: str, namespace: str | None, sweep: SweepConfig, trial_job: dict
) -> dict:
    """A Katib Experiment (``kubeflow.org/v1beta1``) that runs ``trial_job`` per trial.

    Args:
        name: the Experiment's name (a DNS label); computed at run time by the step.
        namespace: where the Experiment and its trials run; None leaves it to the client.
        sweep: the search space, algorithm and trial budget.
        trial_job: a PyTorchJob from ``pytorchjob(name=None, namespace=None, ...)`` whose
            trainer arguments come from ``katib_trial_flags``.

    Raises:
        ValueError: if ``trial_job`` sets a name or namespace (Katib sets them per trial).
    """
    if {"name", "namespace"} & set(trial_job.get("metadata", {})):
        raise ValueError("the trial job must leave metadata.name and namespace to Katib")
    return {
        "apiVersion": EXPERIMENT.api_version,
        "kind": EXPERIMENT.kind,
        "metadata": _metadata(name, namespace),
        "spec": {
            "objective": katib_objective(sweep),
            "algorithm": katib_algorithm(sweep),
            "parallelTrialCount": sweep.parallel_trials,
            "maxTrialCount": sweep.max_trials,
            "maxFailedTrialCount": sweep.max_failed_trials,
            "metricsCollectorSpec": {
                "collector": {"kind": "StdOut"},
                "source": {"filter": {"metricsFormat": [KATIB_METRICS_FILTER]}},
            },
            "parameters": katib_parameters(sweep),
            "trialTemplate": {
                "primaryContainerName": CONTAINER_NAME,
                "primaryPodLabels": dict(KATIB_PRIMARY_POD_LABELS),
                "successCondition": KATIB_SUCCESS_CONDITION,
                "failureCondition": KATIB_FAILURE_CONDITION,
                "trialParameters": katib_trial_parameters(sweep),
                "trialSpec": trial_job,
            },
        },
    }


# --- Karmada: spreading the pipeline's PyTorchJobs over member clusters (k8s/karmada) ---

PROPAGATION_POLICY = CustomResource(
    "policy.karmada.io", "v1alpha1", "propagationpolicies", "PropagationPolicy"
)


def propagation_policy(
    *,
    name: str,
    namespace: str,
    queue_name: str,
    cluster_weights: dict[str, int],
    one_cluster_per_job: bool = False,
) -> dict:
    """A Karmada PropagationPolicy for the PyTorchJobs of one Kueue queue in ``namespace``.

    The member clusters get a static weight each, under a Divided/Weighted replica
    division. Karmada counts no replicas in a PyTorchJob, so every selected cluster
    receives the whole job; ``one_cluster_per_job`` adds a spread constraint that places
    each job in exactly one of the clusters instead. The ConfigMaps, Secrets and PVCs the
    job's pods refer to follow it to the clusters it lands in (``propagateDeps``).
    """
    if not cluster_weights:
        raise ValueError("at least one member cluster is required")
    for cluster, weight in cluster_weights.items():
        if weight < 1:
            raise ValueError(f"the weight of cluster {cluster!r} must be >= 1, got {weight}")
    placement = {
        "clusterAffinity": {"clusterNames": list(cluster_weights)},
        "replicaScheduling": {
            "replicaSchedulingType": "Divided",
            "replicaDivisionPreference": "Weighted",
            "weightPreference": {
                "staticWeightList": [
                    {"targetCluster": {"clusterNames": [cluster]}, "weight": weight}
                    for cluster, weight in cluster_weights.items()
                ]
            },
        },
    }
    if one_cluster_per_job:
        placement["spreadConstraints"] = [
            {"spreadByField": "cluster", "minGroups": 1, "maxGroups": 1}
        ]
    selector = {
        "apiVersion": PYTORCHJOB.api_version,
        "kind": PYTORCHJOB.kind,
        "namespace": namespace,
        "labelSelector": {"matchLabels": {QUEUE_LABEL: queue_name}},
    }
    return {
        "apiVersion": PROPAGATION_POLICY.api_version,
        "kind": PROPAGATION_POLICY.kind,
        "metadata": _metadata(name, namespace),
        "spec": {"resourceSelectors": [selector], "propagateDeps": True, "placement": placement},
    }
