"""``fmnist render KIND``: print the YAML of an object the pipeline's steps would create.

For review and ``kubectl apply --dry-run=server -f -``. The objects come from the very
builders the steps call. Each kind takes only the flags of what shapes it (the training
job's for ``pytorchjob``, the serving set's for ``inferenceservice``); what only exists at
run time is a stand-in: the job name, the run id, and the run's workspace PVC.
"""

import argparse
from collections.abc import Callable
from dataclasses import dataclass

from cli.errors import UsageError
from cli.flags import add_set_flags, check_namespace_name, check_object_name, set_from_args
from cli.manifests import (
    WORKSPACE_CLAIM,
    dump_yaml,
    inferenceservice_object,
    rendered_experiment,
    training_job_object,
)
from components.specs.compat import DEFAULT_TRAINER_RELEASE, TRAINER_RELEASES
from components.specs.names import is_dns_label
from components.specs.params import Serving, TrainingJob
from components.specs.sweep import ALWAYS_SEARCHED, Sweep

KARMADA_CLUSTER_MAX = 48  # Karmada's limit on a member cluster's name


@dataclass(frozen=True)
class Kind:
    """One renderable kind of object."""

    help: str
    build: Callable  # (argparse.Namespace) -> dict
    add_flags: Callable  # (argparse.ArgumentParser) -> None


def _namespace_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--namespace", help="metadata.namespace (the step uses the run's)")


def _trainer_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--trainer-version",
        choices=sorted(TRAINER_RELEASES),
        default=DEFAULT_TRAINER_RELEASE,
        help="Kubeflow Trainer release: v2.1 (Kubeflow 1.11) takes podTemplateOverrides, "
        f"v2.2 and later runtimePatches (default: {DEFAULT_TRAINER_RELEASE})",
    )


def _job_kind(api: str) -> Kind:
    def build(args: argparse.Namespace) -> dict:
        name, namespace = (
            check_object_name(args.job_name, "--job-name"),
            check_namespace_name(args.namespace),
        )
        job = set_from_args(args, TrainingJob)
        generation = TRAINER_RELEASES[getattr(args, "trainer_version", DEFAULT_TRAINER_RELEASE)]
        return training_job_object(job, api, name, namespace, generation)

    def add_flags(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--job-name", default="fmnist-train", help="metadata.name")
        _namespace_flag(parser)
        if api == "trainjob":
            _trainer_flag(parser)
        ignored = ("job_api",) if api == "trainjob" else ("job_api", "trainjob_runtime")
        add_set_flags(parser, TrainingJob, "training job", exclude=ignored)

    label = "PyTorchJob" if api == "pytorchjob" else "TrainJob"
    return Kind(f"the train step's {label}", build, add_flags)


def _isvc_flags(parser: argparse.ArgumentParser) -> None:
    _namespace_flag(parser)
    parser.add_argument(
        "--kserve-before-0.16",
        dest="legacy",
        action="store_true",
        help="write the deployment mode as KServe <= 0.15 names it (RawDeployment/Serverless)",
    )
    add_set_flags(parser, Serving, "serving", exclude=("min_accuracy", "min_improvement"))


def _isvc(args: argparse.Namespace) -> dict:
    namespace = check_namespace_name(args.namespace)
    return inferenceservice_object(set_from_args(args, Serving), namespace, args.legacy)


def _experiment(args: argparse.Namespace) -> dict:
    name, namespace = check_object_name(args.name), check_namespace_name(args.namespace)
    job, sweep = set_from_args(args, TrainingJob), set_from_args(args, Sweep)
    return rendered_experiment(job, sweep, name, namespace, WORKSPACE_CLAIM, args.trainer_version)


def _experiment_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--name",
        default="fmnist-tune",
        help="metadata.name (the tune step derives it from the run id)",
    )
    _namespace_flag(parser)
    _trainer_flag(parser)
    add_set_flags(parser, Sweep, "search space and budget")
    add_set_flags(parser, TrainingJob, "training job of every trial", exclude=ALWAYS_SEARCHED)


def karmada_object(args: argparse.Namespace) -> dict:
    """A Karmada PropagationPolicy placing each of the queue's jobs in one member cluster."""
    from components.specs.karmada import propagation_policy

    if len(set(args.cluster)) < len(args.cluster):
        raise UsageError(f"--cluster: each member cluster once, got {', '.join(args.cluster)}")
    return propagation_policy(
        name=args.policy_name,
        namespace=check_namespace_name(args.namespace) or "kubeflow",
        queue_name=args.queue_name,
        clusters=args.cluster,
    )


def member_cluster(text: str) -> str:
    """A Karmada member cluster's name (a DNS label of at most 48 characters)."""
    if "=" in text:
        raise argparse.ArgumentTypeError(
            f"expected a member cluster's name, got {text!r}: weights are gone, each job goes "
            "whole to one cluster with room for it (docs/multicluster.md, Karmada)"
        )
    if not is_dns_label(text, KARMADA_CLUSTER_MAX):
        raise argparse.ArgumentTypeError(
            f"expected a member cluster's name (a DNS label of at most {KARMADA_CLUSTER_MAX} "
            f"characters), got {text!r}"
        )
    return text


def _karmada_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cluster",
        type=member_cluster,
        action="append",
        required=True,
        metavar="NAME",
        help="a member cluster a job may go to; repeat for each cluster",
    )
    parser.add_argument("--policy-name", default="fmnist-training-jobs", help="metadata.name")
    parser.add_argument("--namespace", help="where the jobs run (default: kubeflow)")
    parser.add_argument(
        "--queue-name", default="fmnist-gpu", help="the Kueue LocalQueue of the jobs to place"
    )


KINDS = {
    "pytorchjob": _job_kind("pytorchjob"),
    "trainjob": _job_kind("trainjob"),
    "inferenceservice": Kind("the deploy step's InferenceService", _isvc, _isvc_flags),
    "experiment": Kind(
        "the tune step's Katib Experiment (trials: --job-api pytorchjob, the default for "
        "auto, or trainjob)",
        _experiment,
        _experiment_flags,
    ),
    "karmada": Kind(
        "a Karmada PropagationPolicy placing each PyTorchJob and TrainJob of a queue in one "
        "member cluster",
        karmada_object,
        _karmada_flags,
    ),
}


def register(subparsers) -> None:
    """Add ``fmnist render KIND`` with one sub-command per kind."""
    parser = subparsers.add_parser(
        "render",
        help="print the YAML of an object the pipeline would create",
        description="Print the YAML of an object the pipeline's steps would create.",
    )
    kinds = parser.add_subparsers(dest="kind", required=True, metavar="KIND")
    for name, kind in KINDS.items():
        sub = kinds.add_parser(name, help=kind.help, description=f"Print {kind.help} as YAML.")
        kind.add_flags(sub)
        sub.set_defaults(handler=render)


def render(args: argparse.Namespace) -> int:
    """Build the chosen kind for the flags and print it as YAML (no anchors)."""
    dump_yaml(KINDS[args.kind].build(args))
    return 0
