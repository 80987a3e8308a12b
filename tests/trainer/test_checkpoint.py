"""Which checkpoints a run may continue, without training."""

import pytest

from trainer.checkpoint import CheckpointMismatch, check_compatible
from trainer.config import TrainConfig, config_dict


def _state(steps_per_epoch=None, **overrides):
    state = {"config": config_dict(TrainConfig(**overrides))}
    if steps_per_epoch is not None:
        state["steps_per_epoch"] = steps_per_epoch
    return state


def test_same_settings_and_steps_continue():
    check_compatible(_state(469), config_dict(TrainConfig()), 469)
    check_compatible(_state(), config_dict(TrainConfig()), 469)  # written before steps were kept
    check_compatible(_state(469, num_threads=4), config_dict(TrainConfig()), 469)


@pytest.mark.parametrize(
    ("saved", "now", "message"),
    [
        (_state(469, batch_size=256), 469, r"--batch-size 256 \(now 128\);"),
        (_state(16, train_limit=2000), 469, r"--train-limit 2000 \(now None\);"),
        # Same flags, another world size or dataset: the one-cycle schedule would overrun.
        (_state(469), 235, r"469 steps per epoch \(now 235: another world size or data\);"),
        (_state(469, batch_norm=False), 469, r"--batch-norm False \(now True\);"),
    ],
)
def test_another_steps_per_epoch_is_refused(saved, now, message):
    with pytest.raises(CheckpointMismatch, match=f"written by a run with {message} use the same"):
        check_compatible(saved, config_dict(TrainConfig()), now)


def test_a_checkpoint_from_before_batch_norm_trained_without_it():
    saved = _state(469)
    del saved["config"]["batch_norm"]
    check_compatible(saved, config_dict(TrainConfig(batch_norm=False)), 469)
    with pytest.raises(CheckpointMismatch, match=r"--batch-norm False \(now True\)"):
        check_compatible(saved, config_dict(TrainConfig()), 469)
