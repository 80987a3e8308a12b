"""The real trainer as users run it: one process, torchrun with gloo, and PyTorchJob env."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from components.runtime.ports import free_port
from trainer.metrics import ZERO_TIME, observation_time, parse_metric_lines

REPO = Path(__file__).resolve().parents[2]
SMALL = [
    "--train-limit",
    "2000",
    "--test-limit",
    "500",
    "--log-interval",
    "5",
    "--num-threads",
    "1",
]


def _metric_lines(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if "{metricName: accuracy" in line]


def _trainer(args, env=None, **kwargs):
    return subprocess.run(
        [sys.executable, "-m", "trainer", *args],
        cwd=REPO,
        text=True,
        capture_output=True,
        env={**os.environ, **(env or {})},
        **kwargs,
    )


def _torchrun_two_ranks(args):
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]
    command += ["--master-port", str(free_port()), "-m", "trainer", *args]
    return subprocess.run(command, cwd=REPO, text=True, capture_output=True, timeout=300)


@pytest.mark.slow
def test_torchrun_two_ranks_gloo(packed_small, tmp_path):
    log_path = tmp_path / "metrics.log"
    result = _torchrun_two_ranks(
        [
            "--epochs",
            "2",
            "--data-dir",
            str(packed_small),
            "--model-dir",
            str(tmp_path / "model"),
            "--log-path",
            str(log_path),
            *SMALL,
        ]
    )
    assert result.returncode == 0, result.stderr
    lines = _metric_lines(result.stdout)
    assert len(lines) == 2  # rank 0 only, once per epoch
    assert all(observation_time(line) > ZERO_TIME for line in lines)
    assert log_path.read_text().splitlines() == lines
    assert "training on 2 process(es)" in result.stdout
    assert "samples/s=" in result.stdout
    card = json.loads((tmp_path / "model" / "model.json").read_text())
    accuracy = dict(parse_metric_lines(lines[-1:]))["accuracy"]
    assert card["metrics"]["accuracy"] == pytest.approx(accuracy, abs=5e-5)
    assert accuracy > 0.4  # chance is 0.1
    assert card["training"]["world_size"] == 2
    assert [h["epoch"] for h in card["training"]["history"]] == [1, 2]


@pytest.mark.slow
def test_pytorchjob_env_without_torchrun(packed_small, tmp_path, pytorchjob_ranks):
    """The env a PyTorchJob pod gets (MASTER_ADDR/PORT, WORLD_SIZE, RANK), two processes."""
    args = [
        "--epochs",
        "1",
        "--data-dir",
        str(packed_small),
        "--model-dir",
        str(tmp_path / "model"),
    ]
    rank0, rank1 = pytorchjob_ranks([*args, *SMALL], timeout=300)
    assert [rank0.returncode, rank1.returncode] == [0, 0], (rank0.stderr, rank1.stderr)
    assert rank0.stdout.count("{metricName: accuracy") == 1
    assert "{metricName" not in rank1.stdout  # only rank 0 reports
    assert (tmp_path / "model" / "model.pt").is_file()


@pytest.mark.slow
def test_two_ranks_evaluate_like_one(packed_small, tmp_path, evaluate_saved):
    """The metric line of 2 ranks (each scoring half the test set) is the whole set's score.

    The reference is an evaluation of the saved model in this process, so a broken
    cross-rank sum (rank 0 reporting only its own half) fails here: on 300 test images
    rank 0's half scores differently from the whole in both accuracy and loss (on 500,
    the first half's accuracy equals the whole's, and only the loss could tell). It also
    fails if rank 1 scores its half with its own batch-norm statistics instead of rank 0's,
    which are the ones saved (3 points of accuracy apart here).
    """
    model_dir = tmp_path / "model"
    args = ["--epochs", "1", "--data-dir", str(packed_small), "--model-dir", str(model_dir)]
    two = _torchrun_two_ranks([*args, *SMALL, "--test-limit", "300"])
    assert two.returncode == 0, two.stderr
    reported = dict(parse_metric_lines(_metric_lines(two.stdout)))
    accuracy, loss = evaluate_saved(model_dir, packed_small, test_limit=300)
    half_accuracy, half_loss = evaluate_saved(model_dir, packed_small, test_limit=150)
    # The test can see rank 0 reporting only its half (else pick another --test-limit).
    assert round(half_accuracy, 4) != round(accuracy, 4) and abs(half_loss - loss) > 1e-3
    assert reported["accuracy"] == round(accuracy, 4)  # k / 500: exact at 4 decimals
    assert reported["loss"] == pytest.approx(loss, abs=1.5e-4)  # rounding, summation order


@pytest.mark.slow
def test_killed_run_resumes_from_last_epoch(packed_small, tmp_path):
    args = ["--epochs", "3", "--data-dir", str(packed_small), *SMALL]
    straight = _trainer([*args, "--model-dir", str(tmp_path / "a")], timeout=300)
    assert straight.returncode == 0, straight.stderr

    ck = ["--checkpoint-dir", str(tmp_path / "ck"), "--model-dir", str(tmp_path / "b")]
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainer", *args, *ck],
        cwd=REPO,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    metric_lines = 0
    for line in proc.stdout:
        metric_lines += "{metricName: accuracy" in line
        if line.startswith("epoch 3 "):  # epoch 2's checkpoint is on disk
            break
    proc.kill()
    proc.wait()
    assert metric_lines == 2  # killed during epoch 3, after two finished epochs
    resumed = _trainer([*args, *ck], timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed from epoch 2 (its checkpoint); epoch 3 is next" in resumed.stdout
    # Epoch 2's line once more (where the run stands, for Katib), then epoch 3's.
    values = [line.split(" ", 1)[1] for line in _metric_lines(resumed.stdout)]
    assert values == [line.split(" ", 1)[1] for line in _metric_lines(straight.stdout)[1:]]
    a = json.loads((tmp_path / "a" / "model.json").read_text())
    b = json.loads((tmp_path / "b" / "model.json").read_text())
    assert b["metrics"] == a["metrics"]
    assert [h["epoch"] for h in b["training"]["history"]] == [1, 2, 3]


def test_missing_data_is_a_clear_error(tmp_path):
    result = _trainer(["--data-dir", str(tmp_path / "nowhere")])
    assert result.returncode == 2
    assert "nowhere: FashionMNIST raw files missing" in result.stderr
    assert "Traceback" not in result.stderr


def test_bad_flag_names_the_flag():
    result = _trainer(["--epochs", "-1"])
    assert result.returncode == 2
    assert "--epochs must be an integer >= 1" in result.stderr


def _cpu_flags() -> set[str]:
    """This machine's CPU feature flags, as the kernel lists them (x86 "flags", Arm "Features")."""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith(("flags", "Features")):
            return set(line.split(":", 1)[1].split())
    return set()


def test_mixed_precision_choice():
    from trainer.step import mixed_precision_dtype

    cpu = torch.device("cpu")
    assert mixed_precision_dtype("fp32", cpu) is None
    assert mixed_precision_dtype("bf16", cpu) is torch.bfloat16
    # oneDNN computes bf16 natively with AVX-512 BW+VL+DQ or AVX-NE-CONVERT (x86), or Arm's
    # bf16 extension; anywhere else "auto" must stay in fp32 (emulated bf16 is slower).
    flags = _cpu_flags()
    native = {"avx512bw", "avx512vl", "avx512dq"} <= flags or bool(
        {"avx_ne_convert", "bf16"} & flags
    )
    assert mixed_precision_dtype("auto", cpu) is (torch.bfloat16 if native else None)


def test_auto_precision_on_a_cpu_follows_what_onednn_reports(monkeypatch):
    """Whatever this machine's CPU: "auto" is bf16 exactly where oneDNN computes it natively."""
    from trainer.step import mixed_precision_dtype

    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: True)
    for native, expected in ((True, torch.bfloat16), (False, None)):
        monkeypatch.setattr(
            torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda native=native: native
        )
        assert mixed_precision_dtype("auto", torch.device("cpu")) is expected


def test_checkpoint_of_another_schedule_is_refused(packed_small, tmp_path):
    args = ["--data-dir", str(packed_small), "--checkpoint-dir", str(tmp_path), *SMALL]
    assert _trainer(["--epochs", "1", *args], timeout=300).returncode == 0
    result = _trainer(["--epochs", "2", "--lr", "0.01", *args], timeout=300)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"trainer: error: {tmp_path}: the checkpoint was written by a run with "
        "--epochs 1 (now 2), --lr 0.004 (now 0.01); "
        "use the same settings to resume, or a fresh --checkpoint-dir"
    ]
    # Another batch size or slice changes the steps per epoch (once a OneCycleLR traceback).
    from trainer.checkpoint import CheckpointMismatch
    from trainer.config import parse_args
    from trainer.data import load_packed
    from trainer.distributed import Context
    from trainer.train import Trainer

    cpu = Context(0, 0, 1, torch.device("cpu"))
    for changed, message in [
        (["--batch-size", "64"], "--batch-size 128 (now 64);"),
        (["--train-limit", "1000"], "--train-limit 2000 (now 1000);"),
    ]:
        with pytest.raises(CheckpointMismatch, match=re.escape(f"a run with {message} use")):
            Trainer(parse_args(["--epochs", "1", *args, *changed]), load_packed(packed_small), cpu)
