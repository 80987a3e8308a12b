"""``fmnist render KIND``: print the YAML of an object the pipeline's steps would create.

For review and ``kubectl apply --dry-run=server -f -``. The objects come from the very
builders the steps call, for the parameters given as flags. What only exists at run time
is filled in with stand-ins: the job name, the run id, and the run's workspace PVC.

Each kind is an entry of ``KINDS``: a help line, a ``build(params, args)`` function
returning one object or a list of them, and optionally ``add_flags(parser)`` for flags
of its own.
"""

import argparse
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass

from pipelines.flags import add_param_flags, params_from_args

RUN_ID = "RUN-ID"  # stands in for the pipeline run's id
WORKSPACE_CLAIM = "RUN-NAME-kfp-workspace"  # the PVC KFP creates for a run's workspace


@dataclass(frozen=True)
class Kind:
    """One renderable kind of object."""

    help: str
    build: Callable  # (PipelineParams, argparse.Namespace) -> dict | list[dict]
    add_flags: Callable | None = None  # (argparse.ArgumentParser) -> None


def pytorchjob_object(params, args: argparse.Namespace) -> dict:
    """The PyTorchJob the train step creates (with the pipeline's workspace and toleration)."""
    from components.launch_pytorchjob import WorkPaths, build_job, pipeline_placement
    from components.manifests import WORKSPACE_MOUNT_PATH

    return build_job(
        params,
        args.job_name,
        params.namespace or None,
        WorkPaths.under(WORKSPACE_MOUNT_PATH),
        pipeline_placement(WORKSPACE_CLAIM),
    )


def _pytorchjob_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--job-name",
        default="fmnist-train",
        help="metadata.name (the step derives it from the run id)",
    )


def inferenceservice_object(params, args: argparse.Namespace) -> dict:
    """The InferenceService the deploy step applies, serving the model of run RUN-ID."""
    from components.kserve_deploy import build_isvc

    storage_uri = f"pvc://{params.model_pvc}/{params.model_name}/{RUN_ID}"
    return build_isvc(params, params.namespace or None, storage_uri)


def experiment_object(params, args: argparse.Namespace) -> dict:
    """The Katib Experiment of the tune step (and of ``fmnist sweep``), trials in the workspace."""
    from components.katib import build_experiment
    from components.launch_pytorchjob import pipeline_placement
    from components.manifests import WORKSPACE_MOUNT_PATH
    from pipelines.commands.sweep import sweep_from_args

    placement = pipeline_placement(WORKSPACE_CLAIM)
    namespace = params.namespace or None
    sweep = sweep_from_args(args)
    return build_experiment(params, sweep, args.name, namespace, WORKSPACE_MOUNT_PATH, placement)


def _experiment_flags(parser: argparse.ArgumentParser) -> None:
    from pipelines.commands.sweep import add_sweep_flags

    add_sweep_flags(parser)
    parser.add_argument(
        "--name", default="fmnist-tune", help="metadata.name (the step derives it from the run id)"
    )


def karmada_object(params, args: argparse.Namespace) -> dict:
    """A Karmada PropagationPolicy spreading the queue's PyTorchJobs over member clusters."""
    from components.manifests import propagation_policy
    from pipelines.cli import UsageError

    names = [name for name, _ in args.cluster]
    if len(set(names)) < len(names):
        raise UsageError(f"--cluster: each member cluster once, got {', '.join(names)}")
    return propagation_policy(
        name=args.policy_name,
        namespace=params.namespace or "kubeflow",
        queue_name=params.queue_name,
        cluster_weights=dict(args.cluster),
        one_cluster_per_job=args.one_cluster_per_job,
    )


def cluster_weight(text: str) -> tuple[str, int]:
    """``NAME=WEIGHT`` (a member cluster and its integer weight >= 1) as a pair."""
    name, sep, weight = text.partition("=")
    valid_name = re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,46}[a-z0-9])?", name)
    if not (sep and valid_name and weight.isdigit() and int(weight) >= 1):
        raise argparse.ArgumentTypeError(
            f"expected NAME=WEIGHT (NAME a cluster name, WEIGHT an integer >= 1), got {text!r}"
        )
    return name, int(weight)


def _karmada_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cluster",
        type=cluster_weight,
        action="append",
        required=True,
        metavar="NAME=WEIGHT",
        help="a member cluster and its static weight; repeat for each cluster",
    )
    parser.add_argument(
        "--policy-name", default="fmnist-pytorchjobs", help="metadata.name of the policy"
    )
    parser.add_argument(
        "--one-cluster-per-job",
        action="store_true",
        help="place each job whole in exactly one of the clusters (else: in every one)",
    )


KINDS = {
    "pytorchjob": Kind("the PyTorchJob of the train step", pytorchjob_object, _pytorchjob_flags),
    "inferenceservice": Kind("the InferenceService of the deploy step", inferenceservice_object),
    "experiment": Kind(
        "the Katib Experiment of the tune step (as fmnist sweep --render)",
        experiment_object,
        _experiment_flags,
    ),
    "karmada": Kind(
        "a Karmada PropagationPolicy for the PyTorchJobs (namespace: --namespace or kubeflow)",
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
        if kind.add_flags:
            kind.add_flags(sub)
        add_param_flags(sub)
        sub.set_defaults(handler=render)


def render(args: argparse.Namespace) -> int:
    """Build the chosen kind for the flags' parameters and print it as YAML."""
    import yaml

    params = params_from_args(args)
    built = KINDS[args.kind].build(params, args)
    documents = built if isinstance(built, list) else [built]
    yaml.safe_dump_all(documents, sys.stdout, sort_keys=False)
    return 0
