"""``fmnist run``: run the fashion-mnist pipeline on this machine with ``kfp.local``.

The very pipeline that is uploaded to Kubeflow, with ``target="local"``: the train step
runs ``torchrun`` here (gloo on CPU) and the deploy step checks a local predictor. Each
run gets a directory (``runs/<timestamp>`` by default; ``runs/latest`` points at the
newest) with the step outputs (model, metrics, reports), a scratch workspace, the
report as ``report.html``, and the objects the same parameters would create on a cluster.
"""

import argparse
import contextlib
import io
import os
import shutil
import sys
import time
import warnings
from pathlib import Path

from components.specs.params import DataSlice, Serving, TrainingJob
from pipelines.cli import UsageError
from pipelines.flags import add_set_flags, set_from_args

SETS = ((DataSlice, "data"), (TrainingJob, "training job"), (Serving, "gate and serving"))


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
        help="also show kfp's executor logs (inputs and outputs of every step)",
    )
    for parameter_set, title in SETS:
        add_set_flags(parser, parameter_set, title)
    parser.set_defaults(handler=run)


class ExecutorNoiseFilter(io.TextIOBase):
    """Drops kfp.local's executor chatter (``[KFP Executor ...]`` lines and the input dump)."""

    def __init__(self, target):
        self.target, self.pending, self.in_dump = target, "", False

    def write(self, text: str) -> int:
        """Pass on every complete line that is not executor chatter."""
        self.pending += text
        *lines, self.pending = self.pending.split("\n")
        for line in lines:
            self._line(line)
        return len(text)

    def _line(self, line: str) -> None:
        if self.in_dump:
            # The dump is an indented JSON object: it ends at its closing brace.
            self.in_dump = line.rstrip() not in ("}", "    }") and "[KFP Executor" not in line
            return
        if "[KFP Executor" in line:
            self.in_dump = line.rstrip().endswith("Got executor_input:")
            return
        self.target.write(line + "\n")

    def flush(self) -> None:
        """Flush the real stream."""
        self.target.flush()


def run(args: argparse.Namespace) -> int:
    """Run the pipeline locally and print a summary; 1 if a step failed."""
    sets = [set_from_args(args, parameter_set) for parameter_set, _ in SETS]
    if args.data_dir:
        if not args.data_dir.is_dir():
            raise UsageError(f"--data-dir {args.data_dir}: no such directory")
        os.environ["FASHION_MNIST_DIR"] = str(args.data_dir.resolve())
    run_dir = (args.run_dir or Path("runs") / time.strftime("%Y%m%d-%H%M%S")).resolve()
    manifests = write_manifests(sets[1], sets[2], run_dir / "manifests")
    started = time.monotonic()
    try:
        outputs = run_pipeline(sets, run_dir, verbose=args.verbose)
    except RuntimeError as exc:
        print(
            f"fmnist run: error: {exc}\n(the failed step's log is above; files in {run_dir})",
            file=sys.stderr,
        )
        return 1
    report = run_dir / "report.html"
    shutil.copyfile(outputs["report_html"].path, report)
    link_latest(run_dir)
    print_summary(sets[2], outputs, report, manifests, time.monotonic() - started)
    return 0


def run_pipeline(sets, run_dir: Path, verbose: bool = False) -> dict:
    """Run the pipeline with kfp.local under ``run_dir``; return its outputs."""
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
    stream = sys.stdout if verbose else ExecutorNoiseFilter(sys.stdout)
    with contextlib.redirect_stdout(stream), warnings.catch_warnings():
        # Running the steps in this interpreter instead of their image is the point here.
        warnings.filterwarnings("ignore", "You may be attemping to run a task", RuntimeWarning)
        return fashion_mnist(target="local", **arguments).outputs


def write_manifests(job: TrainingJob, serving: Serving, directory: Path) -> list[Path]:
    """Write the PyTorchJob, TrainJob and InferenceService these parameters give on a cluster."""
    from pipelines.commands.render import dump_yaml, inferenceservice_object, training_job_object

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


def print_summary(serving: Serving, outputs, report: Path, manifests, seconds: float) -> None:
    """Accuracy, loss, the gate's outcome, and where the files are."""
    accuracy = outputs["accuracy"]
    metrics = outputs["metrics"]
    gate = (
        "passed: the local predictor was started, checked on test images, and stopped"
        if accuracy >= serving.min_accuracy
        else "not passed: nothing deployed"
    )
    rows = [
        ("accuracy", f"{accuracy:.4f}"),
        ("loss", f"{metrics.metadata.get('loss', float('nan')):.4f}"),
        ("gate", f"accuracy >= {serving.min_accuracy}: {gate}"),
        ("model", outputs["model"].path),
        ("report", report),
        ("markdown", outputs["report"].path),
        ("metrics", metrics.path),
        ("manifests", ", ".join(str(path) for path in manifests)),
    ]
    print(f"\nfmnist run: finished in {seconds:.1f} s")
    for name, value in rows:
        print(f"  {name:<10} {value}")
