"""The pure builders: exact objects for a base case, table-driven variations, CRD validation."""

import pytest

from components.manifests import (
    GPU_TOLERATION,
    Placement,
    RunPolicy,
    TrainerFlags,
    inference_service,
    pvc_volume,
    pytorchjob,
    resources,
    trainer_args,
    volume_mount,
)
from trainer.config import parse_args

FLAGS = TrainerFlags(
    data_dir="/ws/train/data",
    model_dir="/ws/train/model",
    checkpoint_dir="/ws/train/checkpoints",
    epochs=3,
    batch_size=64,
    lr=0.01,
    momentum=0.5,
    optimizer="adamw",
)
ARGS = [
    "--data-dir=/ws/train/data",
    "--model-dir=/ws/train/model",
    "--checkpoint-dir=/ws/train/checkpoints",
    "--epochs=3",
    "--batch-size=64",
    "--lr=0.01",
    "--momentum=0.5",
    "--optimizer=adamw",
]
WORKSPACE = Placement(
    volumes=[pvc_volume("kfp-workspace", "run-1-kfp-workspace")],
    volume_mounts=[volume_mount("kfp-workspace", "/ws")],
)


def test_trainer_args_render_every_set_flag_in_order():
    assert trainer_args(FLAGS) == ARGS


def test_trainer_args_add_limits_and_bare_bool_flags():
    flags = TrainerFlags(**{**FLAGS.__dict__, "train_limit": 100, "no_cuda": True})
    assert trainer_args(flags)[-2:] == ["--train-limit=100", "--no-cuda"]


def test_trainer_args_keep_placeholders_verbatim():
    flags = TrainerFlags(
        **{
            **FLAGS.__dict__,
            "lr": "${trialParameters.learningRate}",
            "epochs": "${trialParameters.epochs}",
        }
    )
    args = trainer_args(flags)
    assert "--lr=${trialParameters.learningRate}" in args
    assert "--epochs=${trialParameters.epochs}" in args


def test_trainer_args_are_the_trainers_own_flags():
    config = parse_args(trainer_args(FLAGS))
    assert (config.data_dir, config.model_dir, config.checkpoint_dir) == (
        "/ws/train/data",
        "/ws/train/model",
        "/ws/train/checkpoints",
    )
    assert (config.epochs, config.batch_size, config.lr, config.momentum, config.optimizer) == (
        3,
        64,
        0.01,
        0.5,
        "adamw",
    )


def test_pytorchjob_single_replica_exact_object(validate_crd):
    job = pytorchjob(
        name="fmnist-abc",
        namespace="team-a",
        image="trainer:1",
        args=ARGS,
        queue_name="fmnist",
        resource_spec=resources("2", "4Gi"),
        placement=WORKSPACE,
    )
    template = {
        "metadata": {"labels": {"sidecar.istio.io/inject": "false"}},
        "spec": {
            "containers": [
                {
                    "name": "pytorch",
                    "image": "trainer:1",
                    "command": ["torchrun", "-m", "trainer"],
                    "args": ARGS,
                    "ports": [{"name": "pytorchjob-port", "containerPort": 23456}],
                    "resources": {
                        "requests": {"cpu": "2", "memory": "4Gi"},
                        "limits": {"cpu": "2", "memory": "4Gi"},
                    },
                    "volumeMounts": [{"name": "kfp-workspace", "mountPath": "/ws"}],
                }
            ],
            "volumes": [
                {
                    "name": "kfp-workspace",
                    "persistentVolumeClaim": {"claimName": "run-1-kfp-workspace"},
                }
            ],
        },
    }
    assert job == {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {
            "name": "fmnist-abc",
            "namespace": "team-a",
            "labels": {"kueue.x-k8s.io/queue-name": "fmnist"},
        },
        "spec": {
            "nprocPerNode": "1",
            "runPolicy": {
                "cleanPodPolicy": "Running",
                "ttlSecondsAfterFinished": 3600,
                "backoffLimit": 3,
            },
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": template},
            },
        },
    }
    validate_crd(job)


GPU_PLACEMENT = Placement(
    tolerations=[GPU_TOLERATION],
    node_selector={"nvidia.com/gpu.product": "H100"},
    affinity={
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["gpu"]}]}
                ]
            }
        }
    },
    volumes=WORKSPACE.volumes,
    volume_mounts=WORKSPACE.volume_mounts,
    env=[{"name": "NCCL_DEBUG", "value": "WARN"}],
)


@pytest.mark.parametrize(
    ("case", "kwargs", "expected"),
    [
        ("workers", dict(workers=4), {"Worker.replicas": 3, "Master.replicas": 1}),
        (
            "gpus",
            dict(workers=2, nproc_per_node=2, resource_spec=resources("8", "32Gi", 2)),
            {"nprocPerNode": "2", "gpu_limit": ("nvidia.com/gpu", 2)},
        ),
        (
            "mig slice",
            dict(workers=3, resource_spec=resources("2", "8Gi", 1, "nvidia.com/mig-1g.10gb")),
            {"nprocPerNode": "1", "gpu_limit": ("nvidia.com/mig-1g.10gb", 1)},
        ),
        (
            "priority",
            dict(priority_class="high"),
            {
                "labels": {
                    "kueue.x-k8s.io/queue-name": "fmnist",
                    "kueue.x-k8s.io/priority-class": "high",
                }
            },
        ),
        (
            "run policy",
            dict(run_policy=RunPolicy("All", 60, 1, 7200)),
            {
                "runPolicy": {
                    "cleanPodPolicy": "All",
                    "ttlSecondsAfterFinished": 60,
                    "backoffLimit": 1,
                    "activeDeadlineSeconds": 7200,
                }
            },
        ),
        ("placement", dict(workers=2, placement=GPU_PLACEMENT), {"placement": GPU_PLACEMENT}),
        ("no name (a template)", dict(name=None, namespace=None), {"metadata_keys": ["labels"]}),
    ],
)
def test_pytorchjob_variations(case, kwargs, expected, validate_crd):
    job = pytorchjob(
        **{
            "name": "j",
            "namespace": "ns",
            "image": "trainer:1",
            "args": ARGS,
            "queue_name": "fmnist",
            **kwargs,
        }
    )
    validate_crd(job)
    spec, replicas = job["spec"], job["spec"]["pytorchReplicaSpecs"]
    for role in ("Master", "Worker"):
        if f"{role}.replicas" in expected:
            assert replicas[role]["replicas"] == expected[f"{role}.replicas"]
    if "nprocPerNode" in expected:
        assert spec["nprocPerNode"] == expected["nprocPerNode"]
    for role, replica in replicas.items():
        pod = replica["template"]["spec"]
        container = pod["containers"][0]
        assert replica["template"]["metadata"]["labels"] == {"sidecar.istio.io/inject": "false"}
        assert replica["restartPolicy"] == "OnFailure", role
        if "gpu_limit" in expected:
            resource, count = expected["gpu_limit"]
            assert container["resources"]["limits"][resource] == count
        if "placement" in expected:
            placement = expected["placement"]
            assert (pod["tolerations"], pod["nodeSelector"], pod["affinity"], pod["volumes"]) == (
                placement.tolerations,
                placement.node_selector,
                placement.affinity,
                placement.volumes,
            )
            assert container["env"] == placement.env
            assert container["volumeMounts"] == placement.volume_mounts
    if "labels" in expected:
        assert job["metadata"]["labels"] == expected["labels"]
    if "runPolicy" in expected:
        assert spec["runPolicy"] == expected["runPolicy"]
    if "metadata_keys" in expected:
        assert list(job["metadata"]) == expected["metadata_keys"]


def test_pytorchjob_replicas_do_not_share_their_templates():
    job = pytorchjob(name="j", namespace="ns", image="i", args=ARGS, queue_name="q", workers=2)
    replicas = job["spec"]["pytorchReplicaSpecs"]
    assert replicas["Master"]["template"] == replicas["Worker"]["template"]
    assert replicas["Master"]["template"] is not replicas["Worker"]["template"]


@pytest.mark.parametrize("workers, nproc", [(0, 1), (1, 0)])
def test_pytorchjob_rejects_empty_jobs(workers, nproc):
    with pytest.raises(ValueError, match="workers and nproc_per_node must be >= 1"):
        pytorchjob(
            name="j",
            namespace="ns",
            image="i",
            args=[],
            queue_name="q",
            workers=workers,
            nproc_per_node=nproc,
        )


def test_inference_service_exact_object(validate_crd):
    isvc = inference_service(
        name="fashion-mnist",
        namespace="team-a",
        image="serving:1",
        storage_uri="pvc://models/fashion-mnist/run-1",
        resource_spec=resources("1", "2Gi"),
    )
    assert isvc == {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {
            "name": "fashion-mnist",
            "namespace": "team-a",
            "annotations": {"serving.kserve.io/deploymentMode": "Standard"},
        },
        "spec": {
            "predictor": {
                "minReplicas": 1,
                "maxReplicas": 1,
                "containers": [
                    {
                        "name": "kserve-container",
                        "image": "serving:1",
                        "command": ["python", "-m", "serving"],
                        "args": [
                            "--model_name=fashion-mnist",
                            "--model_dir=/mnt/models",
                            "--http_port=8080",
                        ],
                        "env": [
                            {"name": "STORAGE_URI", "value": "pvc://models/fashion-mnist/run-1"}
                        ],
                        "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                        "resources": {
                            "requests": {"cpu": "1", "memory": "2Gi"},
                            "limits": {"cpu": "1", "memory": "2Gi"},
                        },
                    }
                ],
            }
        },
    }
    validate_crd(isvc)


@pytest.mark.parametrize(
    ("case", "kwargs", "check"),
    [
        (
            "knative scale to zero",
            dict(deployment_mode="Knative", min_replicas=0, max_replicas=4),
            lambda isvc: (
                (
                    isvc["metadata"]["annotations"]["serving.kserve.io/deploymentMode"],
                    isvc["spec"]["predictor"]["minReplicas"],
                    isvc["spec"]["predictor"]["maxReplicas"],
                )
                == ("Knative", 0, 4)
            ),
        ),
        (
            "gpu",
            dict(resource_spec=resources("2", "8Gi", 1)),
            lambda isvc: (
                isvc["spec"]["predictor"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
                == 1
            ),
        ),
        (
            "mig gpu",
            dict(resource_spec=resources("2", "8Gi", 1, "nvidia.com/mig-2g.20gb")),
            lambda isvc: (
                isvc["spec"]["predictor"]["containers"][0]["resources"]["limits"][
                    "nvidia.com/mig-2g.20gb"
                ]
                == 1
            ),
        ),
        ("no namespace", dict(namespace=None), lambda isvc: "namespace" not in isvc["metadata"]),
    ],
)
def test_inference_service_variations(case, kwargs, check, validate_crd):
    isvc = inference_service(
        **{
            "name": "m",
            "namespace": "ns",
            "image": "serving:1",
            "storage_uri": "pvc://p/m/r",
            "resource_spec": resources("1", "1Gi"),
            **kwargs,
        }
    )
    validate_crd(isvc)
    assert check(isvc), case
