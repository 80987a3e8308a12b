"""``fmnist sweep``: search learning rate and epochs (and momentum) with Katib, or locally.

``--render`` prints the Katib Experiment, ``--apply`` creates it and follows its trials
until it ends, and ``--local`` runs the same search space on this machine (grid or
random), each trial a ``torchrun -m trainer`` subprocess read like Katib reads a trial.
All three take the same flags; each prints the best trial at the end.
"""

import argparse
import contextlib
import re
import sys
from dataclasses import fields
from pathlib import Path

from components.sweep import KATIB_ALGORITHMS, SweepConfig, SweepError, grid_points
from pipelines.cli import UsageError
from pipelines.flags import add_param_flags, flag, params_from_args

DESCRIPTION = """\
Search learning rate and epochs (and momentum). --render prints the Katib Experiment,
--apply creates it and follows its trials, --local runs the same search space here
(grid or random) as torchrun subprocesses read the way Katib reads a trial. All three
take the same flags and end with the best trial.
"""
EPILOG = """\
examples:
  # a 2x2 grid on a small slice, two trials at a time, here
  fmnist sweep --local --algorithm grid --lr-min 0.001 --lr-max 0.003 --lr-step 0.002 \\
      --epochs-min 1 --epochs-max 2 --parallel-trials 2 --workers 1 \\
      --train-limit 2000 --test-limit 500
  # the Experiment YAML, for review or kubectl apply -f -
  fmnist sweep --render --algorithm tpe --max-trials 20 --namespace team-a
  # create it, follow the trials, print the best (trials read <pvc>/train/data)
  fmnist sweep --apply --workspace-pvc fmnist-data --namespace team-a --gpus-per-worker 1 \\
      --nproc-per-node 1 --seed 7
"""
# Pipeline parameters that mean nothing to a sweep (searched, or about serving).
NOT_SWEEP_FLAGS = (
    "backend",
    "epochs",
    "lr",
    "min_accuracy",
    "model_name",
    "model_pvc",
    "serving_min_replicas",
    "serving_max_replicas",
    "serving_gpus",
    "serving_timeout_seconds",
    "deployment_mode",
    "serving_image",
)
NAME = re.compile(r"[a-z]([-a-z0-9]{0,38}[a-z0-9])?")  # Katib's rule, with room for trials
_TYPES = {"str": str, "float": float, "int": int, "float | None": float, "int | None": int}


def register(subparsers) -> None:
    """Add ``fmnist sweep``."""
    parser = subparsers.add_parser(
        "sweep",
        help="tune lr and epochs with Katib (--render/--apply) or here (--local)",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument(
        "--render",
        dest="mode",
        action="store_const",
        const="render",
        help="print the Experiment as YAML",
    )
    mode.add_argument(
        "--apply",
        dest="mode",
        action="store_const",
        const="apply",
        help="create the Experiment, follow its trials, print the best",
    )
    mode.add_argument(
        "--local",
        dest="mode",
        action="store_const",
        const="local",
        help="run the trials here, bounded by --parallel-trials",
    )
    add_sweep_flags(parser)
    parser.add_argument(
        "--name",
        default="fmnist-sweep",
        help="the Experiment's name (--local: the output folder's)",
    )
    add_cluster_flags(parser)
    local = parser.add_argument_group("--local")
    local.add_argument(
        "--data-dir",
        type=Path,
        help="packed dataset or raw IDX files (default: found or downloaded)",
    )
    local.add_argument(
        "--out-dir",
        type=Path,
        help="trials write model, checkpoints, log here (default: build/sweeps/NAME)",
    )
    add_param_flags(parser, exclude=NOT_SWEEP_FLAGS)
    parser.set_defaults(handler=sweep_command)


def add_sweep_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per ``SweepConfig`` field (``--max-trials`` defaults to the grid's size)."""
    group = parser.add_argument_group("search space and budget")
    for item in fields(SweepConfig):
        kind = _TYPES[str(item.type)]
        default = None if item.name == "max_trials" else item.default
        shown = "12, or every grid point for grid" if item.name == "max_trials" else default
        group.add_argument(
            flag(item.name),
            dest=item.name,
            type=kind,
            default=default,
            metavar=kind.__name__.upper(),
            choices=KATIB_ALGORITHMS if item.name == "algorithm" else None,
            help=item.metadata["help"] + ("" if shown is None else f" (default: {shown})"),
        )


def add_cluster_flags(parser: argparse.ArgumentParser) -> None:
    """Where Katib's trials find the data and how long ``--apply`` waits."""
    group = parser.add_argument_group("--render and --apply")
    group.add_argument(
        "--workspace-pvc",
        default="fmnist-workspace",
        help="PVC with the packed data at train/data; trials write katib/NAME/",
    )
    group.add_argument(
        "--sweep-timeout-seconds",
        type=int,
        default=6 * 3600,
        help="--apply: stop (and delete the Experiment) after this long",
    )
    group.add_argument(
        "--poll-seconds", type=float, default=15.0, help="--apply: seconds between status checks"
    )


def sweep_from_args(args: argparse.Namespace) -> SweepConfig:
    """The checked ``SweepConfig`` from the flags; a bad value names its flag(s)."""
    values = {item.name: getattr(args, item.name) for item in fields(SweepConfig)}
    try:
        if values["max_trials"] is None:
            values["max_trials"] = SweepConfig().max_trials
            if values["algorithm"] == "grid":
                probe = {**values, "max_trials": 1, "parallel_trials": 1, "max_failed_trials": 0}
                values["max_trials"] = len(grid_points(SweepConfig(**probe)))
        return SweepConfig(**values)
    except SweepError as exc:
        names = " / ".join(flag(name) for name in exc.names)
        raise UsageError(f"{names} must be {exc.allowed}") from None


def build_experiment_for(params, sweep: SweepConfig, args: argparse.Namespace, namespace):
    """The Experiment ``--render``/``--apply`` create: trials mount ``--workspace-pvc``."""
    from components.katib import build_experiment
    from components.launch_pytorchjob import pipeline_placement
    from components.manifests import WORKSPACE_MOUNT_PATH

    placement = pipeline_placement(args.workspace_pvc)
    return build_experiment(params, sweep, args.name, namespace, WORKSPACE_MOUNT_PATH, placement)


def sweep_command(args: argparse.Namespace) -> int:
    """Check the flags once, then render, apply, or run locally."""
    if not NAME.fullmatch(args.name):
        raise UsageError(
            f"--name must be a lowercase DNS label of at most 40 characters (Katib adds a "
            f"suffix per trial), got {args.name!r}"
        )
    sweep = sweep_from_args(args)
    params = params_from_args(args)
    if args.mode == "local":
        return run_local(sweep, params, args)
    if args.mode == "render":
        return render(build_experiment_for(params, sweep, args, params.namespace or None))
    return apply(sweep, params, args)


def render(experiment: dict) -> int:
    """Print one object as YAML, without anchors (Master and Worker share a template)."""
    import yaml

    class Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data):
            return True

    yaml.dump(experiment, sys.stdout, Dumper=Dumper, sort_keys=False)
    return 0


def apply(sweep: SweepConfig, params, args: argparse.Namespace) -> int:
    """Create the Experiment, redraw the trial table as it changes, print the best."""
    from components import katib
    from components.k8s import KubeClient, current_namespace

    with kubernetes_errors():
        kube = KubeClient.connect()
        namespace = params.namespace or current_namespace()
        experiment = build_experiment_for(params, sweep, args, namespace)
        print(f"creating Experiment {namespace}/{args.name}; Ctrl-C deletes it", flush=True)
        try:
            best = katib.run_experiment(
                kube, experiment, args.sweep_timeout_seconds, LiveTable(), args.poll_seconds
            )
        except (katib.ExperimentFailed, TimeoutError) as exc:
            print(f"fmnist sweep: {exc}", file=sys.stderr)
            return 1
    print_best(best)
    return 0


@contextlib.contextmanager
def kubernetes_errors():
    """Turn missing credentials, an unreachable API and refusals into usage errors."""
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config import ConfigException
    from urllib3.exceptions import HTTPError

    try:
        yield
    except ConfigException as exc:
        raise UsageError(f"no Kubernetes credentials ({exc})") from None
    except HTTPError as exc:
        raise UsageError(f"cannot reach the Kubernetes API: {exc}") from None
    except ApiException as exc:
        hint = " (is Katib installed?)" if exc.status == 404 else ""
        raise UsageError(f"the Kubernetes API refused: {exc.status} {exc.reason}{hint}") from None


class LiveTable:
    """Redraws the trial table in place on a terminal; prints it on change otherwise."""

    def __init__(self, stream=None):
        self.stream, self.lines, self.last = stream or sys.stdout, 0, None

    def __call__(self, experiment: dict, trials) -> None:
        """Show the Experiment's latest condition and its trials, if anything changed."""
        from components.katib import condition_message
        from components.sweep import trial_table

        text = f"{condition_message(experiment)}\n{trial_table(trials)}"
        if text == self.last:
            return
        if self.lines and self.stream.isatty():
            self.stream.write(f"\x1b[{self.lines}F\x1b[J")  # back to the table's top, clear
        self.stream.write(text + "\n")
        self.stream.flush()
        self.lines, self.last = text.count("\n") + 1, text


def local_flags(params, args: argparse.Namespace, out_dir: Path):
    """The trainer flags every local trial shares (data packed once into ``out_dir``)."""
    from components.manifests import TrainerFlags
    from trainer.data import DataError, find_raw_dir, is_packed, pack

    data_dir = args.data_dir
    try:
        if data_dir is None or not is_packed(data_dir):
            data_dir = out_dir / "data"
            raw = find_raw_dir(args.data_dir)
            pack(data_dir, raw, train_limit=params.train_limit, test_limit=params.test_limit)
    except DataError as exc:
        raise UsageError(str(exc)) from None
    return TrainerFlags(
        data_dir=str(data_dir),
        model_dir="",
        checkpoint_dir="",
        epochs=1,
        batch_size=params.batch_size,
        lr=params.lr,
        momentum=params.momentum,
        optimizer=params.optimizer,
        train_limit=params.train_limit,
        test_limit=params.test_limit,
        no_cuda=not params.gpus_per_worker,
    )


def run_local(sweep: SweepConfig, params, args: argparse.Namespace) -> int:
    """Run the trials here; print each as it starts and ends, then the ranked table."""
    from components.sweep import rank_trials, trial_table
    from pipelines.local_sweep import run_sweep, suggest

    try:
        suggest(sweep)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    out_dir = args.out_dir or Path("build/sweeps") / args.name
    base = local_flags(params, args, out_dir)
    result = run_sweep(sweep, base, out_dir, params.processes, on_trial=print_trial)
    ranked = rank_trials(result.trials)
    others = [trial for trial in result.trials if trial not in ranked]
    print(f"\nsweep {result.status.lower()}: {result.reason}")
    print(trial_table(ranked + others))
    if result.best is None:
        print("no trial reported accuracy", file=sys.stderr)
        return 1
    print_best(result.best, out_dir / result.best.name / "model")
    return 0 if result.status == "Succeeded" else 1


def print_trial(trial) -> None:
    """One line when a local trial starts or ends."""
    values = " ".join(f"{name}={value:g}" for name, value in trial.assignment.items())
    if trial.status == "Running":
        print(f"{trial.name} started: {values}", flush=True)
        return
    outcome = ", ".join(f"{name} {value:.4f}" for name, value in trial.metrics.items())
    detail = outcome or trial.message or "no metrics"
    print(f"{trial.name} {trial.status} in {trial.seconds:.0f} s: {values}: {detail}", flush=True)


def print_best(best, model_dir: Path | None = None) -> None:
    """The best trial's parameters, as flags for ``fmnist run``."""
    values = " ".join(f"--{name} {value:g}" for name, value in best.assignment.items())
    print(f"best trial: {best.name}, accuracy {best.accuracy:.4f}: {values}")
    if model_dir is not None:
        print(f"its model: {model_dir}")
