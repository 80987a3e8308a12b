"""Trainer flags: recipes, overrides, and errors that name the flag."""

import re

import pytest

from trainer.config import RECIPES, TrainConfig, parse_args


def test_reference_recipe_is_reachable_and_overridable():
    config = parse_args(["--recipe", "reference"])
    assert (
        config.batch_size,
        config.lr,
        config.momentum,
        config.optimizer,
        config.scheduler,
        config.augment,
        config.batch_norm,
    ) == (32, 0.01, 0.9, "sgd", "none", False, False)
    assert TrainConfig().batch_norm and not parse_args(["--no-batch-norm"]).batch_norm
    assert parse_args(["--recipe", "reference", "--lr", "0.02"]).lr == 0.02
    assert set(RECIPES) == {"default", "reference"}


def test_reference_mnist_py_flags_parse():
    config = parse_args(
        [
            "--epochs",
            "3",
            "--batch-size",
            "64",
            "--test-batch-size",
            "500",
            "--lr",
            "0.1",
            "--momentum",
            "0.5",
            "--no-cuda",
            "--seed",
            "7",
            "--log-interval",
            "5",
            "--log-path",
            "/tmp/x.log",
            "--save-model",
            "--backend",
            "gloo",
        ]
    )
    assert config.epochs == 3 and config.device == "cpu" and config.save_model
    assert config.model_dir == "model"
    assert config.backend == "gloo"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--epochs", "0"], "--epochs must be an integer >= 1"),
        (["--batch-size", "-4"], "--batch-size must be an integer >= 1"),
        (["--lr", "0"], "--lr must be a finite number > 0"),
        (["--lr", "inf"], "--lr must be a finite number > 0"),
        (["--lr", "nan"], "--lr must be a finite number > 0"),
        (["--weight-decay", "inf"], "--weight-decay must be a finite number >= 0"),
        (["--momentum", "1.5"], r"--momentum must be in \[0, 1\)"),
        (["--optimizer", "rmsprop"], "argument --optimizer: invalid choice: 'rmsprop'"),
        (["--train-limit", "0"], "--train-limit must be an integer >= 1"),
        (["--precision", "fp16"], "argument --precision: invalid choice: 'fp16'"),
        (["--device", "gpu"], "argument --device: invalid choice: 'gpu'"),
        (["--device", "cpu", "--cuda-graphs"], "--cuda-graphs must be used without --device cpu"),
        (["--no-device-data", "--cuda-graphs"], "--cuda-graphs must be used with --device-data"),
    ],
)
def test_bad_flags_exit_2_naming_the_flag(argv, message, capsys):
    with pytest.raises(SystemExit) as caught:
        parse_args(argv)
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert re.search(message, err)
    assert len(err.splitlines()) == 1, err  # one line, no usage block


def test_config_checks_ranges_directly():
    with pytest.raises(ValueError, match="--optimizer must be one of sgd, adamw"):
        TrainConfig(optimizer="adam")


def test_device_flag_and_the_reference_alias():
    assert parse_args([]).device == "auto"
    assert parse_args(["--device", "cuda"]).device == "cuda"
    assert parse_args(["--no-cuda"]).device == "cpu"
    assert parse_args(["--device", "cuda", "--no-cuda"]).device == "cpu"  # the last one wins


def test_gpu_speed_flags_default_to_the_safe_choice():
    config = parse_args([])
    assert (config.device_data, config.fused_optimizer) == (True, True)
    assert (config.compile, config.cuda_graphs) == (False, False)
    off = parse_args(["--no-device-data", "--no-fused-optimizer"])
    assert (off.device_data, off.fused_optimizer) == (False, False)


# Every flag of `python -m trainer`, written out: what the pipeline, the Katib trial
# template and docs/ pass to it (``TrainerFlags``), and the rest of the README's list.
TRAINER_FLAGS = {
    "--help", "--recipe", "--epochs", "--batch-size", "--test-batch-size", "--lr",
    "--momentum", "--optimizer", "--scheduler", "--weight-decay", "--label-smoothing",
    "--augment", "--no-augment", "--precision", "--seed", "--device", "--backend",
    "--device-data", "--no-device-data", "--fused-optimizer", "--no-fused-optimizer",
    "--compile", "--no-compile", "--cuda-graphs", "--no-cuda-graphs", "--log-interval",
    "--log-path", "--data-dir", "--model-dir", "--save-model", "--no-save-model",
    "--checkpoint-dir", "--train-limit", "--test-limit", "--num-threads", "--no-cuda",
}  # fmt: skip


def _help_entries(text: str) -> dict[str, str]:
    """``--help``'s options section: each option string -> its description (one line)."""
    entries, flags = {}, None
    for line in text.split("options:", 1)[1].splitlines():
        if re.match(r"^  -", line):
            head, _, described = line.strip().partition("  ")
            flags = re.findall(r"(?:^|, )(-{1,2}[\w-]+)", head)
            for flag in flags:
                entries[flag] = described.strip()
        elif flags and line.strip():
            for flag in flags:
                entries[flag] = f"{entries[flag]} {line.strip()}".strip()
    return entries


def test_every_flag_is_documented_in_help(capsys):
    with pytest.raises(SystemExit):
        parse_args(["--help"])
    entries = _help_entries(capsys.readouterr().out)
    assert TRAINER_FLAGS <= set(entries), TRAINER_FLAGS - set(entries)
    undocumented = [flag for flag, text in entries.items() if len(text.split()) < 3]
    assert undocumented == []
    assert entries["--device"].startswith("auto: CUDA when a GPU is visible")
    assert entries["--no-cuda"].startswith("same as --device cpu")
    assert entries["--cuda-graphs"].startswith("replay each full training step as one CUDA")
    assert entries["--epochs"] == "passes over the training set (default: 10)"
