"""``fmnist run``: run the fashion-mnist pipeline on this machine with ``kfp.local``.

The very pipeline that is uploaded to Kubeflow, with ``target="local"``: the train step
runs ``torchrun`` here (gloo on CPU) and the deploy step checks a local predictor. Each
run gets a directory (``runs/<timestamp>`` by default; ``runs/latest`` points at the
newest) with the step outputs (model, reports), a scratch workspace, ``log.txt`` (all of
kfp's output), ``metrics.json``, the report as ``report.html``, and the objects the same
parameters would create on a cluster. The terminal shows the steps' progress and a summary.
"""

import argparse
import contextlib
import io
import json
import os
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

from cli.errors import UsageError
from cli.flags import add_cpu_fallback_flag, add_set_flags, set_from_args
from cli.manifests import dump_yaml, inferenceservice_object, training_job_object
from cli.run_output import RunOutput, strip_ansi
from components.specs.params import DataSlice, Serving, TrainingJob

SETS = ((DataSlice, "data"), (TrainingJob, "training job"), (Serving, "gate and serving"))
GATE_NOT_PASSED = 3  # the exit code of --fail-on-gate when the model is below the gate
# kfp.local's warning about task settings it ignores (kfp 2.17 local/orchestrator/
# task_executor.py), for the ones every step of ours has.
NO_LOCAL_EFFECT = (
    r".*settings \[('(display_name|cpu_limit|memory_limit|cpu_request|memory_request)'"
    r"(, )?)+\] have no effect"
)


def register(subparsers) -> None:
    """Add ``fmnist run``."""
    parser = subparsers.add_parser(
        "run",
        help="run the pipeline here (kfp.local, torchrun, local predictor)",
        description="Run the fashion-mnist pipeline on this machine (kfp.local, target=local).",
    )
    parser.add_argument(
        "--run-dir", type=Path, help="where this run's files go (default: runs/<timestamp>)"
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        help="directory of the raw FashionMNIST .gz files "
        "(default: $FASHION_MNIST_DIR, Debian's package, or download)",
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="show all of kfp's output (executor logs, every step's inputs and outputs), "
        "as log.txt has it",
    )
    add_cpu_fallback_flag(parser)
    parser.add_argument(
        "--fail-on-gate",
        action="store_true",
        help=f"exit with code {GATE_NOT_PASSED} when the accuracy is below --min-accuracy (for CI)",
    )
    for parameter_set, title in SETS:
        add_set_flags(parser, parameter_set, title)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Run the pipeline locally and print a summary.

    Returns:
        0; 1 if a step failed; GATE_NOT_PASSED with ``--fail-on-gate`` below the gate.
    """
    sets = [set_from_args(args, parameter_set) for parameter_set, _ in SETS]
    local_sets = [sets[0], local_training_job(sets[1], args.cpu_fallback), sets[2]]
    run_dir = (args.run_dir or Path("runs") / time.strftime("%Y%m%d-%H%M%S")).resolve()
    if run_dir.exists() and not run_dir.is_dir():
        raise UsageError(f"--run-dir {args.run_dir} is a file, not a directory")
    os.environ["FASHION_MNIST_DIR"] = str(check_raw_data(args.data_dir))
    manifests = write_manifests(sets[1], sets[2], run_dir / "manifests")
    started = time.monotonic()
    log_path = run_dir / "log.txt"
    print(f"fmnist run: {run_dir} (all of kfp's output: {log_path.name} there)", flush=True)
    with log_path.open("w") as log:
        output = RunOutput(log, sys.stdout, sets[1].epochs)
        try:
            outputs = run_pipeline(local_sets, run_dir, output, verbose=args.verbose)
        except RuntimeError as exc:
            print_failure(output, exc, log_path)
            return 1
    serving = sets[2]
    # Locally nothing serves between runs, so the gate is min_accuracy alone
    # (components/runtime/champion.py); the evaluate step says so in its gate line.
    passed = outputs["accuracy"] >= serving.min_accuracy
    report = run_dir / "report.html"
    shutil.copyfile(outputs["report_html"].path, report)
    metrics = write_metrics(outputs, serving, passed, run_dir / "metrics.json")
    link_latest(run_dir)
    rows = summary_rows(outputs, serving, passed, report, metrics, manifests, log_path)
    print_summary(rows, time.monotonic() - started)
    return GATE_NOT_PASSED if args.fail_on_gate and not passed else 0


def local_training_job(job: TrainingJob, cpu_fallback: bool) -> TrainingJob:
    """The job as this machine runs it: GPUs it lacks are an error, or the CPU if allowed."""
    from components.runtime.local_train import local_job

    def warn(text: str) -> None:
        print(f"fmnist run: {text}", file=sys.stderr, flush=True)

    try:
        return local_job(job, cpu_fallback, warn)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def check_raw_data(data_dir: Path | None) -> Path:
    """The raw data directory the pack step will read, its four files checked.

    Raises:
        UsageError: the files are missing, truncated or corrupt (the message names the file).
    """
    from trainer.data import DataError, find_raw_dir, read_raw

    if data_dir is not None and not data_dir.is_dir():
        raise UsageError(f"--data-dir {data_dir}: no such directory")
    try:
        found = find_raw_dir(data_dir)
        read_raw(found)  # checksums: a corrupt file fails here, not 25 lines into the pack step
    except DataError as exc:
        raise UsageError(str(exc)) from exc
    return found.resolve()


def run_pipeline(sets, run_dir: Path, output: RunOutput, verbose: bool = False) -> dict:
    """Run the pipeline with kfp.local under ``run_dir``; return its outputs.

    kfp's output goes to ``output``; with ``verbose`` to the terminal too.
    """
    from kfp import local

    from pipelines.fashion_mnist import fashion_mnist

    workspace = run_dir / "workspace"  # kfp.local deletes it when the run ends
    workspace.mkdir(parents=True, exist_ok=True)
    local.init(
        local.SubprocessRunner(use_venv=False),
        pipeline_root=str(run_dir / "outputs"),
        workspace_root=str(workspace),
    )
    arguments = {name: value for item in sets for name, value in item.to_dict().items()}
    stream = Tee(output.log, sys.stdout) if verbose else output
    with steps_temporary_folder(), contextlib.redirect_stdout(stream), warnings.catch_warnings():
        # Running the steps in this interpreter instead of their image is the point here.
        warnings.filterwarnings("ignore", "You may be attemping to run a task", RuntimeWarning)
        # Display names, and the step pods' CPU and memory: a cluster's business.
        warnings.filterwarnings("ignore", NO_LOCAL_EFFECT, UserWarning)
        return fashion_mnist(target="local", **arguments).outputs


@contextlib.contextmanager
def steps_temporary_folder():
    """Give the steps' processes a ``TMPDIR`` of their own, removed when they end.

    Each step's command makes a ``mktemp -d`` for its program that it never removes (kfp
    2.x ``kfp/dsl/component_factory.py``): harmless in a pod, a folder in /tmp per step here.
    """
    saved = os.environ.get("TMPDIR")
    with tempfile.TemporaryDirectory(prefix="fmnist-run-") as folder:
        os.environ["TMPDIR"] = folder
        try:
            yield
        finally:
            if saved is None:
                del os.environ["TMPDIR"]
            else:
                os.environ["TMPDIR"] = saved


class Tee(io.TextIOBase):
    """Writes to a log and to the terminal, without colour codes where it is not a terminal."""

    def __init__(self, log, console):
        self.log, self.console = log, console

    def write(self, text: str) -> int:
        """Write ``text`` to both."""
        self.log.write(strip_ansi(text))
        self.console.write(text if self.console.isatty() else strip_ansi(text))
        return len(text)

    def flush(self) -> None:
        """Flush both."""
        self.log.flush()
        self.console.flush()


def print_failure(output: RunOutput, exc: RuntimeError, log_path: Path) -> None:
    """Which step failed and its error, in a few lines, and where the whole log is."""
    if output.failed_step:
        error = output.failure() or "(no error message; see the log)"
        message = f"step {output.failed_step} failed: {error}"
    else:
        message = strip_ansi(str(exc))
    message = message.replace("\n", "\n  ")
    print(f"fmnist run: error: {message}\n  (the whole log: {log_path})", file=sys.stderr)


def write_manifests(job: TrainingJob, serving: Serving, directory: Path) -> list[Path]:
    """Write the PyTorchJob, TrainJob and InferenceService these parameters give on a cluster."""
    directory.mkdir(parents=True, exist_ok=True)
    objects = {
        "pytorchjob": training_job_object(job, "pytorchjob", "fmnist-train", None),
        "trainjob": training_job_object(job, "trainjob", "fmnist-train", None),
        "inferenceservice": inferenceservice_object(serving, None, legacy=False),
    }
    written = []
    for name, obj in objects.items():
        path = directory / f"{name}.yaml"
        with path.open("w") as stream:
            dump_yaml(obj, stream)
        written.append(path)
    return written


def link_latest(run_dir: Path) -> None:
    """Point ``<runs>/latest`` at this run's directory."""
    latest = run_dir.parent / "latest"
    if latest.is_symlink() or not latest.exists():
        latest.unlink(missing_ok=True)
        latest.symlink_to(run_dir.name)


def write_metrics(outputs, serving: Serving, passed: bool, path: Path) -> Path:
    """Accuracy, loss and the gate's outcome, as JSON (for scripts and CI)."""
    metrics = {
        "accuracy": outputs["accuracy"],
        "loss": outputs["metrics"].metadata.get("loss"),
        "min_accuracy": serving.min_accuracy,
        "gate_passed": passed,
        "model": outputs["model"].path,
    }
    path.write_text(json.dumps(metrics, indent=2) + "\n")
    return path


def summary_rows(outputs, serving: Serving, passed: bool, report, metrics, manifests, log):
    """The ``(name, value)`` rows of the summary."""
    gate = (
        "passed: the local predictor was started, checked on test images, and stopped"
        if passed
        else "not passed: nothing deployed"
    )
    return [
        ("accuracy", f"{outputs['accuracy']:.4f}"),
        ("loss", f"{outputs['metrics'].metadata.get('loss', float('nan')):.4f}"),
        ("gate", f"accuracy >= {serving.min_accuracy}: {gate}"),
        ("model", outputs["model"].path),
        ("report", report),
        ("markdown", outputs["report"].path),
        ("metrics", metrics),
        ("log", log),
        ("manifests", ", ".join(str(path) for path in manifests)),
    ]


def print_summary(rows: list[tuple[str, object]], seconds: float) -> None:
    """The summary: how long the run took, then one row per result."""
    print(f"\nfmnist run: finished in {seconds:.1f} s")
    for name, value in rows:
        print(f"  {name:<10} {value}")
