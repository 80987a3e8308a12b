"""``fmnist run`` end to end, and ``fmnist serve`` on what it made.

Two real runs of the pipeline under kfp.local on a slice of the real data (1 epoch, 2,000
training and 500 test images), each a separate ``fmnist`` process whose output is captured
(not a terminal): one above the accuracy gate (two torchrun processes; the deploy step
starts the real predictor and checks it), one below it with ``--fail-on-gate``. Each is
shared by the tests of its kind. What kfp.local writes is checked in the run's log.txt;
the terminal gets the steps' progress and the summary only.
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import requests
import yaml

from cli.run_output import ANSI_CODE, RunOutput

REPO = Path(__file__).resolve().parents[2]
SLICE = ("--epochs", "1", "--train-limit", "2000", "--test-limit", "500")
METRIC_LINE = re.compile(  # after the RFC 3339 time Katib takes as the observation time
    r"^\s*\d{4}-\d\d-\d\dT[\d:.]+Z \{metricName: accuracy, metricValue: (\d\.\d{4})\};"
    r"\{metricName: loss, metricValue: (\d+\.\d{4})\}$",
    re.MULTILINE,
)
STEPS = ("validate-serving", "validate-training", "pack-dataset", "train", "evaluate")
ANSI = "\x1b["
RUN_BOUND_SECONDS = 400  # a whole pipeline run (~60 s alone on 2 cores) inside the test's setup


def fmnist(
    *argv: str, timeout: float = 600, env: dict | None = None
) -> subprocess.CompletedProcess:
    """``fmnist ARGV`` in a fresh process, its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "cli", *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def temporary_folder(run_dir: Path) -> Path:
    """The TMPDIR the run in ``run_dir`` was given."""
    return run_dir.with_name(f"{run_dir.name}-tmp")


def fmnist_run(run_dir: Path, data_dir: Path, *flags: str) -> subprocess.CompletedProcess:
    """``fmnist run`` into ``run_dir``, with a temporary folder of its own."""
    temporary_folder(run_dir).mkdir(parents=True)
    return fmnist(
        *("run", "--run-dir", str(run_dir), "--data-dir", str(data_dir), *SLICE, *flags),
        env={**os.environ, "TMPDIR": str(temporary_folder(run_dir))},
    )


def summary(out: str) -> dict[str, str]:
    """The ``name value`` rows of the final summary."""
    tail = out.split("fmnist run: finished in", 1)[1]
    return dict(re.findall(r"^  (\w+) +(.+)$", tail, re.MULTILINE))


@pytest.fixture(scope="module")
def passed(tmp_path_factory, fashion_mnist_dir):
    """A run above the gate: (completed process, run directory)."""
    run_dir = tmp_path_factory.mktemp("runs") / "passed"
    done = fmnist_run(run_dir, fashion_mnist_dir, "--workers", "2", "--min-accuracy", "0.3")
    assert done.returncode == 0, done.stdout + done.stderr
    return done, run_dir


@pytest.fixture(scope="module")
def below_gate(tmp_path_factory, fashion_mnist_dir):
    """A run below the gate with --fail-on-gate: (completed process, run directory)."""
    run_dir = tmp_path_factory.mktemp("runs") / "below"
    done = fmnist_run(run_dir, fashion_mnist_dir, "--min-accuracy", "0.99", "--fail-on-gate")
    return done, run_dir


@pytest.mark.slow
@pytest.mark.timeout(RUN_BOUND_SECONDS)
def test_run_shows_the_steps_progress_and_the_summary_only(passed):
    done, run_dir = passed
    out = done.stdout
    assert done.stderr == "", done.stderr
    for step in (*STEPS, "deploy"):
        assert re.search(rf"^{step} +started$", out, re.MULTILINE), step
        assert re.search(rf"^{step} +done in \d+\.\d s$", out, re.MULTILINE), step
    log = (run_dir / "log.txt").read_text()
    (trainer_line, evaluate_line) = METRIC_LINE.findall(log)
    assert trainer_line == evaluate_line  # the trainer's (rank 0, one epoch) and evaluate's
    accuracy, loss = trainer_line
    assert re.search(
        rf"^train +epoch 1/1: test accuracy {accuracy}, loss {loss} \(\d+ s\)$", out, re.MULTILINE
    )
    evaluated = rf"^evaluate +test accuracy {accuracy}, loss {loss} on 500 images\. Gate: Passed"
    assert re.search(evaluated, out, re.MULTILINE)
    assert re.search(
        r"^deploy +the local predictor answered 100 test images like the model "
        r"\(\d+% correct\) and was stopped$",
        out,
        re.MULTILINE,
    )
    assert "http://" not in out  # the predictor's address is gone when the run ends
    rows = summary(out)
    assert rows["accuracy"] == accuracy and rows["loss"] == loss
    assert rows["gate"].startswith("accuracy >= 0.3: passed")
    assert Path(rows["log"]) == run_dir / "log.txt"


@pytest.mark.slow
@pytest.mark.timeout(RUN_BOUND_SECONDS)
def test_kfp_dumps_go_to_the_log_not_the_terminal(passed):
    done, run_dir = passed
    out, log = done.stdout, (run_dir / "log.txt").read_text()
    for dump in ("[KFP Executor", "Got executor_input:", "Streamed logs:", "confusionMatrix"):
        assert dump in log and dump not in out, dump
    assert "'batch_size': 128.0" in log and "128" not in out  # kfp's float rendering of ints
    assert "--nproc-per-node=2 -m trainer" in log  # the torchrun command, in the log only
    assert "OMP_NUM_THREADS" in log and "OMP_NUM_THREADS" not in out  # torchrun's banner
    assert ANSI not in out and ANSI not in log
    assert max(len(line) for line in out.splitlines()) < 400


@pytest.mark.slow
@pytest.mark.timeout(RUN_BOUND_SECONDS)
def test_run_writes_metrics_report_model_and_manifests(passed, validate_crd):
    done, run_dir = passed
    rows = summary(done.stdout)
    metrics = json.loads(Path(rows["metrics"]).read_text())
    assert f"{metrics['accuracy']:.4f}" == rows["accuracy"]
    assert (metrics["min_accuracy"], metrics["gate_passed"]) == (0.3, True)
    model = Path(rows["model"])
    assert metrics["model"] == str(model) and model.is_relative_to(run_dir)
    assert {path.name for path in model.iterdir()} == {"model.pt", "model.json"}
    page = Path(rows["report"]).read_text()
    assert "Gate.</b> Passed: " in page and str(model) in page
    assert "a slice: 2,000 training and 500 test images" in page
    assert "One epoch: test accuracy" in page and page.count("<svg") == 1  # no 1-point chart
    assert "Per-class accuracy" in Path(rows["markdown"]).read_text()
    for path in rows["manifests"].split(", "):
        validate_crd(yaml.safe_load(Path(path).read_text()))
    assert (run_dir.parent / "latest").resolve() == run_dir


@pytest.mark.slow
@pytest.mark.timeout(RUN_BOUND_SECONDS)
def test_fail_on_gate_exits_3_below_the_gate_and_deploys_nothing(below_gate):
    done, run_dir = below_gate
    assert done.returncode == 3, done.stdout + done.stderr
    assert summary(done.stdout)["gate"] == "accuracy >= 0.99: not passed: nothing deployed"
    assert not re.search(r"^deploy ", done.stdout, re.MULTILINE)
    assert not list(run_dir.glob("outputs/*/deploy"))
    assert json.loads((run_dir / "metrics.json").read_text())["gate_passed"] is False
    assert "Gate.</b> Not passed: " in (run_dir / "report.html").read_text()


@pytest.mark.slow
@pytest.mark.timeout(RUN_BOUND_SECONDS)
def test_a_run_leaves_nothing_in_the_temporary_folder(passed, below_gate):
    """Each KFP step's command makes a ``mktemp -d`` for its program and never removes it
    (kfp 2.x kfp/dsl/component_factory.py), and torchrun a ``torchelastic_*`` folder: ten
    soak runs once left 70 folders in /tmp (tests/soak/test_leaks.py)."""
    for _, run_dir in (passed, below_gate):
        assert os.listdir(temporary_folder(run_dir)) == []


@pytest.mark.slow
@pytest.mark.timeout(RUN_BOUND_SECONDS)
def test_serve_answers_over_http_like_the_model_and_stops_on_ctrl_c(passed, packed_small):
    import torch

    from components.runtime.ports import free_port
    from trainer.data import load_packed
    from trainer.model import load_model_dir, normalize

    _, run_dir = passed
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "cli", "serve", str(run_dir), "--port", str(port)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as in a terminal
    )
    try:
        startup = server.stdout.readline()
        model_dir = next(run_dir.glob("outputs/*/train/model"))
        card = json.loads((model_dir / "model.json").read_text())
        assert startup == (
            f"fmnist serve: fashion-mnist from {model_dir} (test accuracy "
            f"{card['metrics']['accuracy']:.4f}) at http://127.0.0.1:{port}\n"
        )
        test = load_packed(packed_small).test.head(20)
        response = requests.post(
            f"http://127.0.0.1:{port}/v1/models/fashion-mnist:predict",
            json={"instances": test.images.tolist()},
            timeout=30,
        )
        labels = [item["label"] for item in response.json()["predictions"]]
        network, card = load_model_dir(model_dir)
        with torch.inference_mode():
            inputs = normalize(torch.tensor(test.images), card.pixel_mean, card.pixel_std)
            assert labels == network(inputs).argmax(1).tolist()
        assert sum(a == b for a, b in zip(labels, test.labels.tolist(), strict=True)) >= 10
        server.send_signal(signal.SIGINT)
        assert server.wait(timeout=30) == 0
        assert server.stdout.read().splitlines()[-1] == "fmnist serve: stopped"
    finally:
        server.kill()
        server.wait()
    with pytest.raises(requests.ConnectionError):
        requests.get(f"http://127.0.0.1:{port}/v2/health/live", timeout=5)


def test_version_names_the_package_and_its_frameworks():
    import importlib.metadata

    done = fmnist("--version", timeout=60)
    versions = [importlib.metadata.version(name) for name in ("fmnist-pipeline", "kfp", "torch")]
    assert done.returncode == 0
    assert done.stdout.startswith(f"fmnist {versions[0]} (kfp {versions[1]}, torch {versions[2]}")


# --- RunOutput on a recorded kfp.local stream ----------------------------------------------

RECORDED = """\
09:53:14.384 - INFO - Running pipeline: \x1b[95m'fashion-mnist'\x1b[0m
--------------------------------------------------------------------------------
09:53:14.400 - INFO - Executing task \x1b[96m'pack-dataset'\x1b[0m
09:53:14.400 - INFO - Streamed logs:

    [KFP Executor 2026-12-01 09:53:14,610 INFO]: Got executor_input:
    {
        "inputs": {
            "parameterValues": {
                "train_limit": 2000
            }
        }
    }
    packed 2000 training and 500 test images from /data
    [KFP Executor 2026-12-01 09:53:20,239 INFO]: Wrote executor output file to /x.json.
    \n
09:53:20.362 - INFO - Task \x1b[96m'pack-dataset'\x1b[0m finished with status \x1b[92mSUCCESS\x1b[0m
09:53:20.363 - INFO - Task \x1b[96m'pack-dataset'\x1b[0m outputs:
    dataset: Dataset( name='dataset',
                      metadata={'counts': {'train': 2000.0, 'test': 500.0}} )
--------------------------------------------------------------------------------
09:53:20.365 - INFO - Executing task \x1b[96m'train'\x1b[0m
09:53:20.365 - INFO - Streamed logs:

    running -m torch.distributed.run --standalone --nproc-per-node=2 -m trainer --epochs=3
    *****************************************
    Setting OMP_NUM_THREADS environment variable for each process to be 1 in default
    *****************************************
    training on 2 process(es), device cpu, 2000 examples
    2026-12-01T09:53:30.000000Z {metricName: accuracy, metricValue: 0.6560};\
{metricName: loss, metricValue: 0.9212}
    2026-12-01T09:53:40.000000Z {metricName: accuracy, metricValue: 0.7440};\
{metricName: loss, metricValue: 0.7480}
    Traceback (most recent call last):
      File "/x/executor.py", line 453, in execute
        result = self.func(**func_kwargs)
                 ^^^^^^^^^^^^^^^^^^^^^^^^
    RuntimeError: torchrun exited with code 1. Last lines:
    trainer: error: epoch 3: the loss is not finite (lr 1000)
    \n
09:53:41.946 - ERROR - Task \x1b[96m'train'\x1b[0m finished with status \x1b[91mFAILURE\x1b[0m
"""


class Clock:
    """A clock that moves 10 s each time it is read."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 10
        return self.now


def test_run_output_shows_progress_and_keeps_everything_in_the_log():
    log, console = io.StringIO(), io.StringIO()
    output = RunOutput(log, console, epochs=3, clock=Clock())
    for piece in (RECORDED[:100], RECORDED[100:2000], RECORDED[2000:]):  # writes split lines
        output.write(piece)
    # The clock reads 10, 20, ...: pack starts at 10, ends at 20; train starts at 30, training
    # at 40; epoch 1 at 50 (10 s in, 20 s left), epoch 2 at 60; the failure at 70.
    assert console.getvalue().splitlines() == [
        "pack-dataset       started",
        "pack-dataset       packed 2000 training and 500 test images from /data",
        "pack-dataset       done in 10.0 s",
        "train              started",
        "train              training on 2 process(es), device cpu, 2000 examples",
        "train              epoch 1/3: test accuracy 0.6560, loss 0.9212 (10 s, about 20 s left)",
        "train              epoch 2/3: test accuracy 0.7440, loss 0.7480 (20 s, about 10 s left)",
        "train              failed after 40.0 s",
    ]
    assert log.getvalue() == ANSI_CODE.sub("", RECORDED) and ANSI not in log.getvalue()
    assert output.failed_step == "train"
    assert output.failure() == (
        "RuntimeError: torchrun exited with code 1. Last lines:\n"
        "trainer: error: epoch 3: the loss is not finite (lr 1000)"
    )


def test_a_failed_step_is_named_with_its_error_in_a_few_lines():
    stream = RECORDED.split("09:53:20.365")[0] + (
        "09:53:20.365 - INFO - Executing task 'pack-dataset'\n"
        "09:53:20.365 - INFO - Streamed logs:\n\n"
        "    Traceback (most recent call last):\n"
        '      File "/x/data.py", line 146, in find_raw_dir\n'
        "    trainer.data.DataError: FashionMNIST raw files not found. Looked in:\n"
        + "".join(f"      - /place/{n}\n" for n in range(6))
        + "09:53:21.000 - ERROR - Task 'pack-dataset' finished with status FAILURE\n"
    )
    output = RunOutput(io.StringIO(), io.StringIO(), epochs=1)
    output.write(stream)
    assert output.failure().splitlines() == [
        "DataError: FashionMNIST raw files not found. Looked in:",
        "  - /place/0",
        "  - /place/1",
        "  - /place/2",
        "...",
    ]


def test_a_second_task_of_a_step_is_shown_by_the_step_name():
    """KFP names the deploy task after register-model ``deploy-2``; the user sees deploy."""
    console = io.StringIO()
    output = RunOutput(io.StringIO(), console, epochs=1, clock=Clock())
    output.write(
        "10:00:00.000 - INFO - Executing task 'deploy-2'\n"
        "10:00:01.000 - INFO - Task 'deploy-2' finished with status SUCCESS\n"
    )
    assert console.getvalue().splitlines() == [
        "deploy             started",
        "deploy             done in 10.0 s",
    ]


class Captured(io.StringIO):
    """A captured stream that says whether it is a terminal."""

    def __init__(self, terminal: bool):
        super().__init__()
        self.terminal = terminal

    def isatty(self) -> bool:
        return self.terminal


@pytest.mark.parametrize("terminal", [False, True])
def test_verbose_shows_everything_with_colour_only_on_a_terminal(terminal):
    from cli.commands.run import Tee

    log, console = io.StringIO(), Captured(terminal)
    Tee(log, console).write(RECORDED)
    assert log.getvalue() == ANSI_CODE.sub("", RECORDED)
    assert console.getvalue() == (RECORDED if terminal else log.getvalue())
