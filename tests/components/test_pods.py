"""components/specs/pods.py: the trainer's flags of a job, and where the job's pods run."""

import pytest
from kfp import dsl

from components.specs.params import TrainingJob
from components.specs.pods import (
    GPU_TOLERATION,
    OWN_WORKSPACE_MOUNT_PATH,
    TrainerFlags,
    WorkPaths,
    placement_from,
    pvc_volume,
    step_placement,
    volume_mount,
    workspace_placement,
)
from trainer.config import parse_args

FLAGS = TrainerFlags.for_job(
    TrainingJob(epochs=3, batch_size=64, lr=0.01, momentum=0.5), WorkPaths.under("/ws")
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
TASK_CONFIG = dsl.TaskConfig(
    volumes=[pvc_volume("kfp-workspace", "run-7-kfp-workspace")],
    volume_mounts=[volume_mount("kfp-workspace", "/kfp-workspace")],
    tolerations=[GPU_TOLERATION],
    env=[{"name": "HTTPS_PROXY", "value": "http://proxy:3128"}],
)


def test_trainer_flags_render_every_set_flag_in_order():
    assert FLAGS.args() == ARGS
    extra = TrainerFlags(**{**FLAGS.__dict__, "train_limit": 100, "no_cuda": True})
    assert extra.args()[-2:] == ["--train-limit=100", "--no-cuda"]
    assert TrainerFlags("/d", "/m", "/c", {"augment": False}).args()[-1] == "--no-augment"


def test_trainer_flags_keep_placeholders_verbatim():
    flags = FLAGS.for_trial({"lr": "${trialParameters.learningRate}"}, "/ws/t")
    assert "--lr=${trialParameters.learningRate}" in flags.args()
    assert "--model-dir=/ws/t/model" in flags.args()


def test_trainer_flags_are_the_trainers_own_flags():
    config = parse_args(FLAGS.args())
    assert (config.data_dir, config.checkpoint_dir, config.epochs, config.lr) == (
        "/ws/train/data",
        "/ws/train/checkpoints",
        3,
        0.01,
    )


def test_a_trial_replaces_only_recipe_flags():
    with pytest.raises(KeyError, match="not trainer flags of the recipe: lr_max"):
        FLAGS.for_trial({"lr_max": 0.1}, "/ws/t")


def test_placement_from_the_task_config_requires_the_workspace():
    placement = placement_from(TASK_CONFIG, "/kfp-workspace/run-7")
    assert placement.volumes == TASK_CONFIG.volumes and placement.env == TASK_CONFIG.env
    with pytest.raises(ValueError, match="not among the volumes passed to this step"):
        placement_from(dsl.TaskConfig(), "/kfp-workspace")


def test_the_render_placement_mounts_the_run_workspace_with_the_gpu_toleration():
    placement = workspace_placement("RUN-kfp-workspace")
    assert placement.tolerations == [GPU_TOLERATION]
    assert placement.volume_mounts == [{"name": "kfp-workspace", "mountPath": "/kfp-workspace"}]
    assert WorkPaths.under("/kfp-workspace").data_dir.as_posix() == "/kfp-workspace/train/data"


def test_the_step_places_its_job_on_the_pvc_it_is_told_else_on_its_task_config():
    on_pvc = step_placement(dsl.TaskConfig(), OWN_WORKSPACE_MOUNT_PATH, "run-7-fmnist-workspace")
    assert on_pvc.volumes == [pvc_volume("fmnist-workspace", "run-7-fmnist-workspace")]
    assert on_pvc.volume_mounts == [volume_mount("fmnist-workspace", "/fmnist-workspace")]
    assert on_pvc.tolerations == [GPU_TOLERATION]
    passed = step_placement(TASK_CONFIG, "/kfp-workspace/run-7")
    assert passed.volumes == TASK_CONFIG.volumes and passed.env == TASK_CONFIG.env
