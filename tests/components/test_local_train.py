"""The train step with ``target="local"``: torchrun on this machine, real processes, real data."""

import os
import sys
import tempfile

import pytest
from kfp import dsl

from components.runtime.local_train import local_flags, torchrun_command
from components.specs.params import TrainingJob
from components.specs.pods import WorkPaths
from components.steps.train import train


def test_torchrun_runs_every_process_with_the_cluster_jobs_flags(tmp_path):
    job = TrainingJob(workers=2, nproc_per_node=1, epochs=1)
    paths = WorkPaths(tmp_path / "data", tmp_path / "model", tmp_path / "ckpt")
    command = torchrun_command(local_flags(job, paths), job.processes)
    assert command == [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=2",
        "-m",
        "trainer",
        f"--data-dir={tmp_path}/data",
        f"--model-dir={tmp_path}/model",
        f"--checkpoint-dir={tmp_path}/ckpt",
        "--epochs=1",
        "--batch-size=128",
        "--lr=0.004",
        "--momentum=0.9",
        "--optimizer=adamw",
        "--no-cuda",
    ]


def run_step(tmp_path, dataset_dir, **changes):
    train.python_func(
        dataset=dsl.Dataset(uri=str(dataset_dir)),
        model=dsl.Model(uri=str(tmp_path / "model")),
        job=TrainingJob(**{"workers": 1, **changes}).to_dict(),
        target="local",
        workspace_path=str(tmp_path / "ws"),
        run_id="r",
        task_config=dsl.TaskConfig(),
    )


def test_a_trainer_that_cannot_find_its_data_fails_the_step_with_its_output(tmp_path, monkeypatch):
    monkeypatch.delenv("FASHION_MNIST_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # nothing cached there
    empty = tmp_path / "not-a-dataset"
    empty.mkdir()
    with pytest.raises(RuntimeError, match="torchrun exited with code 1") as error:
        run_step(tmp_path, empty)
    first, *rest = str(error.value).splitlines()
    reason = f"trainer: error: {empty}: FashionMNIST raw files missing: "
    assert first.startswith(f"torchrun exited with code 1: {reason}")
    assert first.endswith(". The trainer's last lines:")
    assert rest[-1].startswith(reason)  # torchrun's report (a traceback) only in the log


def test_torchrun_leaves_nothing_in_the_temporary_folder(tmp_path, monkeypatch):
    """torchrun makes a ``torchelastic_*`` folder there for every run and never removes it:
    ten soak runs once left ten behind (tests/soak/test_leaks.py)."""
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setenv("TMPDIR", str(temporary))
    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    monkeypatch.delenv("FASHION_MNIST_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(RuntimeError, match="torchrun exited with code 1"):
        run_step(tmp_path, tmp_path / "empty")  # torchrun ran: its worker failed
    assert os.listdir(temporary) == []


@pytest.mark.slow
def test_training_that_diverges_fails_the_step_with_the_trainers_line(tmp_path, fashion_mnist_dir):
    """``--lr 1000`` once gave a "model" at 10 % accuracy and a passing step."""
    from trainer.data import pack

    pack(tmp_path / "data", fashion_mnist_dir, train_limit=512, test_limit=200)
    with pytest.raises(RuntimeError) as error:
        run_step(tmp_path, tmp_path / "data", epochs=1, lr=1000.0)
    reason = "trainer: error: training diverged in epoch 1 with --lr 1000: mean training loss"
    assert str(error.value).startswith(f"torchrun exited with code 1: {reason}")
    assert not (tmp_path / "model" / "model.pt").exists()


def test_a_job_that_asks_for_gpus_this_machine_lacks_fails_before_torchrun(tmp_path, capsys):
    """The default tier has no CUDA: the step refuses instead of training on the CPU."""
    with pytest.raises(RuntimeError) as error:
        run_step(tmp_path, tmp_path, gpus_per_worker=1)
    assert str(error.value) == (
        "--gpus-per-worker 1 with --workers 1 needs 1 CUDA GPU(s) on this machine, and torch "
        "sees 0: nothing was trained"
    )
    assert "running" not in capsys.readouterr().out  # torchrun never started


@pytest.mark.slow
def test_the_timeout_stops_a_real_training_run_and_shows_its_last_lines(tmp_path, packed_small):
    """A run far longer than the timeout: it started, printed, and was cut off.

    torchrun starts its workers in sessions of their own (torch
    ``distributed/elastic/multiprocessing/subprocess_handler``): the step must stop them
    through torchrun, or they train on, and this test would hang until they finish.
    """
    with pytest.raises(RuntimeError, match="torchrun ran past 25 s and was stopped") as error:
        run_step(tmp_path, packed_small, epochs=500, timeout_seconds=25)
    tail = str(error.value)
    # it was training when stopped: its first line, or its epochs' metric lines, are there
    assert "training on 1 process(es)" in tail or "{metricName: accuracy, metricValue:" in tail
    assert not (tmp_path / "model" / "model.pt").exists()
