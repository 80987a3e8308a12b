"""``fmnist sweep``: search learning rate and epochs (and momentum) with Katib, or locally.

``--render`` prints the Katib Experiment, ``--apply`` checks the namespace, stages the
packed data on the workspace PVC, creates the Experiment and follows its trials until it
ends, and ``--local`` runs the same search space on this machine (grid or random), each
trial a ``torchrun -m trainer`` subprocess read like Katib reads a trial. All three take
the same flags; each prints the best trial at the end.
"""

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from cli.errors import UsageError
from cli.flags import (
    add_cpu_fallback_flag,
    add_set_flags,
    check_namespace_name,
    check_object_name,
    check_pvc_name,
    command_with_examples,
    set_from_args,
)
from cli.kube_errors import kubernetes_errors
from cli.manifests import dump_yaml, experiment_for, rendered_experiment
from components.specs.compat import DEFAULT_TRAINER_RELEASE, TRAINER_RELEASES
from components.specs.params import DataSlice, TrainingJob
from components.specs.pods import OWN_WORKSPACE
from components.specs.sweep import ALWAYS_SEARCHED, Sweep

SUMMARY = "tune lr and epochs with Katib (--render/--apply) or here (--local)"
DESCRIPTION = """\
Search learning rate and epochs (and momentum). --render prints the Katib Experiment,
--apply stages the data, creates the Experiment and follows its trials, --local runs the
same search space here (grid or random) as torchrun subprocesses read the way Katib reads
a trial. All three take the same flags and end with the best trial.
"""
EPILOG = """\
examples:
  # a 2x2 grid on a small slice, two trials at a time, here
  fmnist sweep --local --algorithm grid --lr-min 0.001 --lr-max 0.003 --lr-step 0.002 \\
      --epochs-min 1 --epochs-max 2 --parallel-trials 2 --workers 1 \\
      --train-limit 2000 --test-limit 500
  # the Experiment YAML with TrainJob trials, for review or kubectl apply -f -
  fmnist sweep --render --algorithm tpe --max-trials 20 --job-api trainjob
  # on a cluster: check team-a, stage the data on its PVC, run, print the best
  fmnist sweep --apply --namespace team-a --workspace-pvc fmnist-workspace \\
      --gpus-per-worker 1 --nproc-per-node 1 --seed 7
"""


def register(subparsers) -> None:
    """Add ``fmnist sweep``."""
    parser = command_with_examples(subparsers, "sweep", SUMMARY, DESCRIPTION, EPILOG)
    mode = parser.add_mutually_exclusive_group(required=True)
    for name, text in (
        ("render", "print the Experiment as YAML"),
        ("apply", "stage the data, create the Experiment, follow its trials, print the best"),
        ("local", "run the trials here, bounded by --parallel-trials"),
    ):
        mode.add_argument(f"--{name}", dest="mode", action="store_const", const=name, help=text)
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
    local.add_argument(
        "--resume",
        action="store_true",
        help="continue the trials an earlier sweep left in --out-dir from their checkpoints "
        "(default: remove them and start afresh)",
    )
    add_cpu_fallback_flag(local)
    add_set_flags(parser, Sweep, "search space and budget")
    add_set_flags(parser, TrainingJob, "training job of every trial", exclude=ALWAYS_SEARCHED)
    add_set_flags(parser, DataSlice, "data (--local, and what --apply stages)")
    parser.set_defaults(handler=sweep_command)


def add_cluster_flags(parser: argparse.ArgumentParser) -> None:
    """Where the Experiment runs, where its trials find the data, how ``--apply`` waits."""
    group = parser.add_argument_group("--render and --apply")
    group.add_argument(
        "--namespace", help="the Experiment's namespace (--apply default: the kubeconfig's)"
    )
    group.add_argument(
        "--workspace-pvc",
        default=OWN_WORKSPACE,
        help="PVC the data is staged on (train/data); trials write katib/NAME/ (k8s/storage)",
    )
    group.add_argument(
        "--trainer-version",
        choices=sorted(TRAINER_RELEASES),
        default=DEFAULT_TRAINER_RELEASE,
        help="--render with TrainJob trials: the Kubeflow Trainer release "
        "(--apply asks the cluster)",
    )
    group.add_argument(
        "--poll-seconds", type=float, default=15.0, help="--apply: seconds between status checks"
    )


def sweep_from_args(args: argparse.Namespace) -> Sweep:
    """The checked ``Sweep`` from the flags; a bad value names its flag(s)."""
    return set_from_args(args, Sweep)


def sweep_command(args: argparse.Namespace) -> int:
    """Check the flags once, then render, apply, or run locally."""
    check_object_name(args.name)
    if args.mode != "local":
        check_namespace_name(args.namespace)
        check_pvc_name(args.workspace_pvc, "--workspace-pvc")
    sweep, job = sweep_from_args(args), set_from_args(args, TrainingJob)
    if args.mode == "local":
        return run_local(sweep, job, set_from_args(args, DataSlice), args)
    for name in ("resume", "cpu_fallback"):
        if getattr(args, name):
            raise UsageError(f"--{name.replace('_', '-')} is for --local only")
    if args.mode == "render":
        claim, release = args.workspace_pvc, args.trainer_version
        dump_yaml(rendered_experiment(job, sweep, args.name, args.namespace, claim, release))
        return 0
    return apply(sweep, job, set_from_args(args, DataSlice), args)


def apply(sweep: Sweep, job: TrainingJob, data: DataSlice, args: argparse.Namespace) -> int:
    """Check the namespace, stage the data, create the Experiment, redraw the trial table."""
    from cli.staging import check_namespace, run_staging_pod
    from components.runtime import katib
    from components.runtime.discovery import find_target
    from components.runtime.kube import CONNECT_ONCE, KubeClient, current_namespace

    with kubernetes_errors(missing="Katib"):
        kube = KubeClient.connect(CONNECT_ONCE)
        print(f"connecting to the Kubernetes API at {kube.host}", flush=True)
        namespace = args.namespace or current_namespace()
        check_namespace(kube, namespace, job.queue, args.workspace_pvc)
        target = find_target(kube, job.job_api)
        run_staging_pod(kube, namespace, args.workspace_pvc, job.image, data)
        experiment = experiment_for(
            job, sweep, args.name, namespace, args.workspace_pvc, target.api, target.generation
        )
        print(f"creating Experiment {namespace}/{args.name}; Ctrl-C deletes it", flush=True)
        try:
            best = katib.run_experiment(
                kube, experiment, sweep.sweep_timeout_seconds, LiveTable(), args.poll_seconds
            )
        except (katib.ExperimentFailed, TimeoutError) as exc:
            print(f"fmnist sweep: {exc}", file=sys.stderr)
            return 1
    print_best(best)
    return 0


class LiveTable:
    """Redraws the trial table in place on a terminal; prints it on change otherwise."""

    def __init__(self, stream=None):
        self.stream, self.lines, self.last = stream or sys.stdout, 0, None

    def __call__(self, experiment: dict, trials) -> None:
        """Show the Experiment's conditions and its trials, if anything changed."""
        from components.runtime.waiting import condition_summary
        from components.specs.sweep import trial_table

        text = f"{condition_summary(experiment)}\n{trial_table(trials)}"
        if text == self.last:
            return
        if self.lines and self.stream.isatty():
            self.stream.write(f"\x1b[{self.lines}F\x1b[J")  # back to the table's top, clear
        self.stream.write(text + "\n")
        self.stream.flush()
        self.lines, self.last = text.count("\n") + 1, text


def local_flags(job: TrainingJob, data: DataSlice, args: argparse.Namespace, out_dir: Path):
    """The trainer flags every local trial shares (data packed once into ``out_dir``)."""
    from components.runtime.local_train import local_flags as local_train_flags
    from components.specs.pods import WorkPaths
    from trainer.data import DataError, find_raw_dir, is_packed, pack

    data_dir = args.data_dir
    try:
        if data_dir is None or not is_packed(data_dir):
            data_dir = out_dir / "data"
            raw = find_raw_dir(args.data_dir)
            pack(data_dir, raw, train_limit=data.train_limit, test_limit=data.test_limit)
    except DataError as exc:
        raise UsageError(str(exc)) from None
    # Each trial sets its own lr, epochs and output directories (local_sweep.trial_flags).
    paths = WorkPaths(Path(data_dir), out_dir, out_dir)
    flags = local_train_flags(job, paths)
    return replace(flags, train_limit=data.train_limit, test_limit=data.test_limit)


def run_local(sweep: Sweep, job: TrainingJob, data: DataSlice, args: argparse.Namespace) -> int:
    """Run the trials here; print each as it starts and ends, then the ranked table."""
    from components.runtime.local_sweep import earlier_trials, run_sweep, suggest
    from components.runtime.local_train import local_job
    from components.specs.sweep import rank_trials, trial_table

    try:
        suggest(sweep)
        job = local_job(job, args.cpu_fallback, warn=print_warning)
    except ValueError as exc:  # an algorithm Katib must run, GPUs that are not here
        raise UsageError(str(exc)) from None
    if sweep.median_stop:
        raise UsageError("--median-stop is Katib's early stopping: for --render and --apply")
    if args.resume and sweep.algorithm == "random" and sweep.seed is None:
        raise UsageError("--resume with --algorithm random needs the earlier sweep's --seed")
    out_dir = args.out_dir or Path("build/sweeps") / args.name
    if out_dir.exists() and not out_dir.is_dir():
        raise UsageError(f"--out-dir {out_dir} is a file, not a directory")
    base = local_flags(job, data, args, out_dir)
    earlier = earlier_trials(out_dir)
    if earlier:
        what = "resuming" if args.resume else "removing (--resume continues them)"
        print(f"{out_dir}: {what} the {len(earlier)} trial(s) of an earlier sweep", flush=True)
    result = run_sweep(
        sweep, base, out_dir, job.processes, on_trial=print_trial, resume=args.resume
    )
    ranked = rank_trials(result.trials)
    others = [trial for trial in result.trials if trial not in ranked]
    print(f"\nsweep {result.status.lower()}: {result.reason}")
    print(trial_table(ranked + others))
    if result.best is None:
        print("no trial reported accuracy", file=sys.stderr)
        return 1
    print_best(result.best, out_dir / result.best.name / "model")
    return 0 if result.status == "Succeeded" else 1


def print_warning(text: str) -> None:
    """A note on stderr that the sweep runs otherwise than asked."""
    print(f"fmnist sweep: {text}", file=sys.stderr, flush=True)


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
