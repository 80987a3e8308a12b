"""The local sweep runner (components/runtime/local_sweep.py): suggestions, Katib's reading
of a trial, and its stopping rules.

Most tests replace ``subprocess.run`` (the runner's only I/O: each trial is a torchrun
process) with a stand-in trainer that prints the metric line for the lr it was given;
``test_sweep.py`` runs the real one on a 2x2 grid.
"""

import itertools
import subprocess
import threading

import pytest

import components.runtime.local_sweep as local_sweep
from components.runtime.local_sweep import observe, run_sweep, stop_reason, suggest, trial_flags
from components.runtime.local_train import torchrun_command
from components.specs.pods import TrainerFlags
from components.specs.sweep import Sweep, Trial
from trainer.metrics import format_metric_line

BASE = TrainerFlags(
    data_dir="/data",
    model_dir="",
    checkpoint_dir="",
    recipe=dict(epochs=1, batch_size=64, lr=0.1, momentum=0.9, optimizer="sgd"),
    test_limit=500,
)


def grid(**changes) -> Sweep:
    values = dict(
        algorithm="grid",
        lr_min=0.01,
        lr_max=0.05,
        lr_step=0.04,
        epochs_min=1,
        epochs_max=2,
        max_trials=4,
        parallel_trials=2,
    )
    return Sweep(**{**values, **changes})


def test_grid_suggestions_are_katibs_grid_in_order():
    assert suggest(grid(max_trials=3)) == [
        {"lr": 0.01, "epochs": 1},
        {"lr": 0.01, "epochs": 2},
        {"lr": 0.05, "epochs": 1},
    ]


def test_random_suggestions_are_seeded_and_in_range():
    sweep = Sweep(
        lr_min=0.01,
        lr_max=0.1,
        epochs_min=2,
        epochs_max=4,
        momentum_min=0.8,
        momentum_max=0.9,
        max_trials=20,
        seed=3,
    )
    points = suggest(sweep)
    assert points == suggest(sweep) != suggest(Sweep(**{**vars(sweep), "seed": 4}))
    assert len(points) == 20
    for point in points:
        assert 0.01 <= point["lr"] <= 0.1 and 0.8 <= point["momentum"] <= 0.9
        assert point["epochs"] in (2, 3, 4)


def test_other_algorithms_need_katib():
    with pytest.raises(ValueError, match="a local sweep runs grid or random; tpe needs Katib"):
        suggest(Sweep(algorithm="tpe"))


def test_observe_keeps_the_latest_value_like_the_metric_strategy():
    stdout = "\n".join(
        [
            "epoch 1 [64/2000] loss=2.1",
            format_metric_line(0.70, 0.9),
            format_metric_line(0.80, 0.6),
            "saved model",
        ]
    )
    assert observe(stdout) == {"accuracy": 0.8, "loss": 0.6}
    assert observe("accuracy=0.9\nloss=0.1") == {}  # Katib's default format is not ours


def test_trial_command_is_torchrun_with_the_trial_values():
    flags = trial_flags(BASE, Trial("trial-2", {"lr": 0.05, "epochs": 2}), "/out")
    command = torchrun_command(flags, 2)
    assert command[1:7] == [
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=2",
        "-m",
        "trainer",
    ]
    assert command[7:] == [
        "--data-dir=/data",
        "--model-dir=/out/trial-2/model",
        "--checkpoint-dir=/out/trial-2/checkpoints",
        "--epochs=2",
        "--batch-size=64",
        "--lr=0.05",
        "--momentum=0.9",
        "--optimizer=sgd",
        "--test-limit=500",
    ]


DIVERGED = (
    "trainer: error: training diverged in epoch 2 with --lr 0.05: mean training loss nan "
    "(a uniform guess: 2.30); try a smaller --lr\n"
)
# What torchrun 2.9 prints on stderr after a worker exited 1 (shortened).
TORCHRUN_REPORT = """\
E1201 09:55:04.025000 21582 torch/distributed/elastic/multiprocessing/api.py:1002] failed \
(exitcode: 1) local_rank: 0 (pid: 21646) of binary: /venv/bin/python
Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/torch/distributed/launcher/api.py", line 386, in \
launch_agent
    raise ChildFailedError(
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
trainer FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-01_09:55:04
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 21646)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
"""


@pytest.fixture
def fake_trainer(monkeypatch):
    """``subprocess.run`` for trial commands: accuracy = 0.5 + lr, or a scripted failure.

    Set ``state["meet"]`` to a ``threading.Barrier``: each trial then waits there for another.
    """
    state = {"running": 0, "peak": 0, "commands": [], "fail": set(), "silent": set()}
    state["diverge"] = set()  # these print a fine first epoch, then torchrun's failure report
    lock = threading.Lock()

    def run(command, **kwargs):
        lr = float(next(arg for arg in command if arg.startswith("--lr=")).split("=")[1])
        with lock:
            state["running"] += 1
            state["peak"] = max(state["peak"], state["running"])
            state["commands"].append(command)
        if state.get("meet"):
            state["meet"].wait()  # returns only once two trials run at the same time
        with lock:
            state["running"] -= 1
        if lr in state["fail"]:
            return subprocess.CompletedProcess(command, 1, "", "boom\ntrainer: error: bad\n")
        if lr in state["diverge"]:
            out = format_metric_line(0.99, 0.1) + "\n"
            return subprocess.CompletedProcess(command, 1, out, DIVERGED + TORCHRUN_REPORT)
        out = "" if lr in state["silent"] else format_metric_line(0.5 + lr, 1 - lr)
        return subprocess.CompletedProcess(command, 0, out + "\n", "")

    monkeypatch.setattr(local_sweep.subprocess, "run", run)
    return state


def test_runs_every_trial_with_bounded_parallelism_and_ranks_them(fake_trainer, tmp_path):
    sweep = grid(lr_min=0.01, lr_max=0.07, lr_step=0.02, epochs_max=1, max_trials=4)
    fake_trainer["meet"] = threading.Barrier(2, timeout=30)  # trials meet in pairs
    seen = []
    result = run_sweep(sweep, BASE, tmp_path, on_trial=lambda t: seen.append((t.name, t.status)))
    assert fake_trainer["peak"] == 2
    in_flight = itertools.accumulate(1 if status == "Running" else -1 for _, status in seen)
    assert max(in_flight) == 2  # never more started than parallel_trials before one ended
    assert [trial.status for trial in result.trials] == ["Succeeded"] * 4
    assert (result.status, result.reason) == ("Succeeded", "max trial count reached")
    assert result.best.name == "trial-4" and result.best.assignment == {"lr": 0.07, "epochs": 1}
    assert result.best.metrics == {"accuracy": 0.57, "loss": 0.93}
    assert seen.count(("trial-1", "Running")) == 1 and ("trial-1", "Succeeded") in seen
    log = (tmp_path / "trial-1" / "log.txt").read_text()
    assert "{metricName: accuracy, metricValue: 0.5100};" in log  # trial-1 ran with lr 0.01


def test_goal_stops_new_trials(fake_trainer, tmp_path):
    sweep = grid(lr_max=0.07, lr_step=0.02, epochs_max=1, parallel_trials=1, goal=0.54)
    result = run_sweep(sweep, BASE, tmp_path)
    assert [trial.name for trial in result.trials] == ["trial-1", "trial-2", "trial-3"]
    assert (result.status, result.reason) == ("Succeeded", "goal reached")


def test_failures_and_missing_metrics_count_against_max_failed(fake_trainer, tmp_path):
    fake_trainer["fail"].add(0.01)
    fake_trainer["silent"].add(0.03)
    sweep = grid(
        lr_min=0.01,
        lr_max=0.07,
        lr_step=0.02,
        epochs_max=1,
        max_trials=4,
        parallel_trials=1,
        max_failed_trials=2,
    )
    result = run_sweep(sweep, BASE, tmp_path)
    assert [trial.status for trial in result.trials] == ["Failed", "MetricsUnavailable"]
    assert result.trials[0].message == "trainer: error: bad"
    assert (result.status, result.reason) == ("Failed", "max failed trial count reached")
    assert result.best is None


def test_stop_reason_follows_katib():
    done = Trial("a", {}, "Succeeded", {"accuracy": 0.9})
    assert stop_reason([done], Sweep(goal=0.9)) == "goal reached"
    assert stop_reason([done], Sweep(goal=0.95)) is None
    failed = Trial("b", {}, "Failed")
    assert stop_reason([failed], Sweep(max_failed_trials=1)) == "max failed trial count reached"
    assert stop_reason([done], Sweep(max_failed_trials=0)) is None  # 0 failures never stop


def test_a_failed_trial_shows_the_trainers_reason_and_is_never_the_best(fake_trainer, tmp_path):
    """A trial that reported a fine epoch and then diverged: Failed, with the trainer's line."""
    fake_trainer["diverge"].add(0.05)
    result = run_sweep(grid(epochs_max=1, max_trials=2), BASE, tmp_path)
    failed = result.trials[1]
    assert (failed.status, failed.metrics["accuracy"]) == ("Failed", 0.99)
    assert failed.message == DIVERGED.strip()
    assert result.best.name == "trial-1" and result.best.accuracy == 0.51
    assert (tmp_path / "trial-2" / "log.txt").read_text().endswith(TORCHRUN_REPORT)  # all of it


@pytest.mark.parametrize(
    ("output", "reason"),
    [
        (TORCHRUN_REPORT, "exitcode  : 1 (pid: 21646)"),  # a worker that said nothing
        ("  traceback : Signal 9 (SIGKILL) received by PID 7\n====\n", "traceback : Signal 9"),
        ("[rank0]: Traceback\n[rank0]: MemoryError: out\n" + TORCHRUN_REPORT, "MemoryError: out"),
        ("python -m trainer: error: --lr must be ... (see --help)\n", "trainer: error: --lr must"),
        ("Killed\n=====\n", "Killed"),
        ("", ""),
    ],
)
def test_failure_reason_is_the_last_meaningful_line(output, reason):
    from components.runtime.torchrun_log import failure_reason

    assert failure_reason(output).startswith(reason)


def test_a_sweep_starts_afresh_unless_it_resumes(fake_trainer, tmp_path):
    """An earlier sweep's trials (checkpoints, models, logs) are removed, or kept for --resume."""
    for name in ("trial-1", "trial-7"):
        (tmp_path / name / "checkpoints").mkdir(parents=True)
        (tmp_path / name / "checkpoints" / "checkpoint.pt").write_bytes(b"earlier")
    (tmp_path / "data").mkdir()  # the packed data is not a trial's
    run_sweep(grid(epochs_max=1, max_trials=1, parallel_trials=1), BASE, tmp_path, resume=True)
    assert (tmp_path / "trial-1" / "checkpoints" / "checkpoint.pt").read_bytes() == b"earlier"
    assert (tmp_path / "trial-7").is_dir()
    run_sweep(grid(epochs_max=1, max_trials=1, parallel_trials=1), BASE, tmp_path)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["data", "trial-1"]
    assert [path.name for path in (tmp_path / "trial-1").iterdir()] == ["log.txt"]
