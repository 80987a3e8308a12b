"""Runs that cannot give a model fail in one line: diverged training, unusable paths.

The divergent runs are real ones on a slice of the real data: ``--lr 1000`` with the
default AdamW blows the loss up to about 1e19 in the first epoch, SGD at ``--lr 1e30``
turns it into NaN.
"""

import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from trainer.__main__ import main as trainer_main
from trainer.train import DIVERGED_LOSS, Diverged, check_loss

REPO = Path(__file__).resolve().parents[2]
TINY = ["--epochs", "2", "--train-limit", "512", "--test-limit", "200", "--num-threads", "1"]
ONE_LINE = re.compile(
    r"trainer: error: training diverged in epoch 1 with --lr (\S+): mean training loss (\S+) "
    r"\(a uniform guess: 2\.30\); try a smaller --lr"
)


def _trainer(args, timeout):
    command = [sys.executable, "-m", "trainer", *args]
    return subprocess.run(command, cwd=REPO, text=True, capture_output=True, timeout=timeout)


def test_a_loss_that_is_not_finite_or_exploded_stops_the_run():
    check_loss("mean training loss", 2.5, 1, 0.01)  # slow learning is not divergence
    check_loss("test loss", DIVERGED_LOSS, 3, 0.01)
    for value in (math.nan, math.inf, -math.inf, DIVERGED_LOSS * 1.01):
        with pytest.raises(Diverged, match=r"diverged in epoch 3 with --lr 0\.5: test loss"):
            check_loss("test loss", value, 3, 0.5)


@pytest.mark.parametrize(
    ("flags", "lr", "loss"),
    [
        (["--lr", "1000"], "1000", lambda value: value > DIVERGED_LOSS),
        (["--lr", "1e30", "--optimizer", "sgd", "--scheduler", "none"], "1e+30", math.isnan),
    ],
    ids=["exploded", "nan"],
)
@pytest.mark.slow
def test_a_diverging_run_fails_in_its_first_epoch(packed_small, tmp_path, flags, lr, loss):
    model = tmp_path / "model"
    args = ["--data-dir", str(packed_small), "--model-dir", str(model), *TINY, *flags]
    result = _trainer([*args, "--checkpoint-dir", str(tmp_path / "ck")], timeout=300)
    assert result.returncode == 1
    assert len(result.stderr.splitlines()) == 1, result.stderr
    found = ONE_LINE.fullmatch(result.stderr.strip())
    assert found, result.stderr
    assert found.group(1) == lr and loss(float(found.group(2)))
    assert "{metricName" not in result.stdout  # no metric line for Katib to record
    assert not model.exists()  # no model saved
    assert not (tmp_path / "ck" / "checkpoint.pt").exists()  # nothing to resume from


@pytest.mark.slow
def test_every_rank_stops_together(packed_small, tmp_path, pytorchjob_ranks):
    """Two gloo ranks as a PyTorchJob starts them (no launcher to stop a rank left behind).

    Both see the same all-rank loss, so both stop in epoch 1 and exit 1 themselves: a rank
    waiting in a collective for the other would run into the timeout instead.
    """
    args = ["--lr", "1000", "--data-dir", str(packed_small), "--model-dir", str(tmp_path / "m")]
    rank0, rank1 = pytorchjob_ranks([*args, *TINY], timeout=120)
    assert [rank0.returncode, rank1.returncode] == [1, 1], (rank0.stderr, rank1.stderr)
    assert ONE_LINE.fullmatch(rank0.stderr.strip()), rank0.stderr  # rank 0 says it, once
    assert "diverged" not in rank1.stderr
    assert not (tmp_path / "m").exists()


@pytest.fixture
def a_file(tmp_path):
    path = tmp_path / "a-file"
    path.write_text("not a directory\n")
    return path


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--model-dir", "{file}", "--model-dir {file}: is a file, not a directory"),
        ("--model-dir", "{file}/m", "--model-dir {file}/m: cannot be made, {file} is a file"),
        ("--checkpoint-dir", "{file}", "--checkpoint-dir {file}: is a file, not a directory"),
        ("--log-path", "{dir}", "--log-path {dir}: is a directory, not a file"),
        ("--log-path", "{dir}/none/m.log", "--log-path {dir}/none/m.log: no directory {dir}/none"),
        ("--data-dir", "{file}", "--data-dir {file}: is a file, not a directory"),
    ],
)
def test_unusable_paths_fail_before_training(
    packed_small, tmp_path, a_file, capsys, flag, value, message
):
    """``python -m trainer``'s main, in this process (the bad-input table runs it as one)."""
    names = {"file": a_file, "dir": tmp_path}
    args = ["--data-dir", str(packed_small), *TINY, "--epochs", "1", flag, value.format(**names)]
    assert trainer_main(args) == 2
    out, err = capsys.readouterr()
    assert out == ""  # nothing trained, not even started
    assert err == f"trainer: error: {message.format(**names)}\n"
