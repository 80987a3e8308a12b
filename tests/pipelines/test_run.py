"""``fmnist run`` end to end: the real pipeline under kfp.local on a slice of the real data.

One epoch of 2 torchrun processes on 4,000 training images; the deploy step starts the
real predictor and checks it. Run twice: above the accuracy gate (deployed) and below it
(skipped). Marked slow: about half a minute per run on 2 CPU cores.
"""

import re
from pathlib import Path

import pytest
import yaml

from pipelines import cli

SLICE = ("--epochs", "1", "--train-limit", "4000", "--test-limit", "1000")
METRIC_LINE = re.compile(  # after the RFC 3339 time Katib takes as the observation time
    r"^\s*\d{4}-\d\d-\d\dT[\d:.]+Z \{metricName: accuracy, metricValue: (\d\.\d{4})\};"
    r"\{metricName: loss, metricValue: (\d+\.\d{4})\}$",
    re.MULTILINE,
)


@pytest.fixture
def fmnist_run(capsys, fashion_mnist_dir, tmp_path):
    """Run ``fmnist run`` into a fresh directory: (exit code, stdout, run directory)."""

    def call(*argv: str):
        run_dir = tmp_path / f"run-{len(list(tmp_path.iterdir()))}"
        code = cli.main(
            ["run", "--run-dir", str(run_dir), "--data-dir", str(fashion_mnist_dir), *SLICE, *argv]
        )
        return code, capsys.readouterr().out, run_dir

    return call


def summary(out: str) -> dict[str, str]:
    """The ``name value`` rows of the final summary."""
    tail = out.split("fmnist run: finished in", 1)[1]
    return dict(re.findall(r"^  (\w+) +(.+)$", tail, re.MULTILINE))


@pytest.mark.slow
def test_run_above_the_gate_trains_evaluates_and_checks_the_predictor(fmnist_run, validate_crd):
    code, out, run_dir = fmnist_run("--workers", "2", "--min-accuracy", "0.3")
    assert code == 0, out
    assert "-m torch.distributed.run --standalone --nproc-per-node=2 -m trainer" in out
    lines = METRIC_LINE.findall(out)
    assert len(lines) == 2  # the trainer's (rank 0, one epoch) and the evaluate step's
    assert lines[0] == lines[1]
    accuracy = float(lines[1][0])
    assert accuracy > 0.3
    rows = summary(out)
    assert rows["accuracy"] == f"{accuracy:.4f}" and rows["loss"] == lines[1][1]
    assert rows["gate"].startswith("accuracy >= 0.3: passed")
    assert re.search(
        r"local predictor at http://127\.0\.0\.1:\d+ answered 100 test images like "
        r"the model \(\d+% correct\); stopped",
        out,
    )
    model = Path(rows["model"])
    assert {path.name for path in model.iterdir()} == {"model.pt", "model.json"}
    assert model.is_relative_to(run_dir)
    assert "Per-class accuracy" in Path(rows["report"]).read_text()
    manifests = [Path(path) for path in rows["manifests"].split(", ")]
    for path in manifests:
        validate_crd(yaml.safe_load(path.read_text()))
    assert "[KFP Executor" not in out and '"executorInput"' not in out  # chatter filtered


@pytest.mark.slow
def test_run_below_the_gate_skips_the_deploy_step(fmnist_run):
    code, out, run_dir = fmnist_run("--workers", "1", "--min-accuracy", "0.99")
    assert code == 0, out
    assert summary(out)["gate"] == "accuracy >= 0.99: not passed: nothing deployed"
    assert "local predictor at" not in out
    assert not list(run_dir.glob("outputs/*/deploy"))
    assert list(run_dir.glob("outputs/*/evaluate"))


@pytest.mark.parametrize(
    "flags", [("--nproc-per-node", "0"), ("--min-accuracy", "2"), ("--train-limit", "0")]
)
def test_run_rejects_bad_parameters_before_running(fmnist_run, flags):
    code, out, run_dir = fmnist_run(*flags)
    assert (code, out) == (2, "")
    assert not run_dir.exists()
