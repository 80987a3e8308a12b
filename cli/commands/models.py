"""``fmnist models``: the versions a pipeline registered in Kubeflow Model Registry.

    fmnist models list --model-registry http://127.0.0.1:8080
    fmnist models show VERSION       # a version is named after its run: the KFP run id
    fmnist models deploy VERSION     # serve an earlier version again: a roll back

The registry is ``--model-registry``, else ``$FMNIST_MODEL_REGISTRY``. ``deploy`` applies the
InferenceService with the pipeline's own deploy code and waits the same way, in the
kubeconfig's namespace (``--namespace``); its serving flags are the pipeline's parameters.
An unknown version, an unreachable registry or a registry without the model is a one-line
error (exit 2), and nothing is changed.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

from cli.errors import UsageError
from cli.flags import add_set_flags, set_from_args
from cli.kube_errors import kubernetes_errors
from components.specs.params import Serving

REGISTRY_VARIABLE = "FMNIST_MODEL_REGISTRY"
SERVED_MARK = "*"


def register(subparsers) -> None:
    """Add ``fmnist models list|show|deploy``."""
    parser = subparsers.add_parser(
        "models",
        help="list, show and deploy the model versions in Kubeflow Model Registry",
        description="The model versions the pipeline registered in Kubeflow Model Registry.",
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="every version, oldest first, with its accuracy")
    show = actions.add_parser("show", help="one version: its URI, metrics, recipe and run")
    show.add_argument("version", metavar="VERSION", help="the version's name (its run id)")
    deploy = actions.add_parser(
        "deploy", help="serve a registered version (roll back to an earlier one)"
    )
    deploy.add_argument("version", metavar="VERSION", help="the version's name (its run id)")
    add_set_flags(deploy, Serving, "serving", exclude=("min_accuracy", "min_improvement"))
    for action in (listing, show):
        action.add_argument(
            "--model-registry",
            default=None,
            help=f"the registry's address (default: ${REGISTRY_VARIABLE})",
        )
        action.add_argument(
            "--model-name",
            default=Serving().model_name,
            help="the registered model (default: %(default)s)",
        )
    for action in (listing, show, deploy):
        action.add_argument(
            "--namespace", help="the InferenceService's namespace (default: the kubeconfig's)"
        )
    listing.set_defaults(handler=list_versions)
    show.set_defaults(handler=show_version)
    deploy.set_defaults(handler=deploy_version)


def registry_address(args: argparse.Namespace) -> str:
    """``--model-registry``, else the environment's; UsageError if neither is set."""
    address = args.model_registry or os.environ.get(REGISTRY_VARIABLE, "")
    if not address:
        raise UsageError(f"no model registry: pass --model-registry or set ${REGISTRY_VARIABLE}")
    return address


def serving_from(args: argparse.Namespace) -> Serving:
    """The checked serving set of the flags, with the registry resolved."""
    return set_from_args(args, Serving, model_registry=registry_address(args))


@contextlib.contextmanager
def registry_errors():
    """The registry's one-line errors (unreachable, unknown model or version) as usage errors."""
    from components.runtime.registry import RegistryError

    try:
        yield
    except RegistryError as error:
        raise UsageError(str(error)) from None


def _namespace(args: argparse.Namespace) -> str:
    from components.runtime.kube import current_namespace

    return args.namespace or current_namespace()


def list_versions(args: argparse.Namespace) -> int:
    """Print a table of the versions; the served one is marked."""
    from components.runtime.registry import Registry

    serving, namespace = serving_from(args), _namespace(args)
    with registry_errors():
        registry = Registry(serving.model_registry)
        versions = registry.versions(serving.model_name)
        served = registry.served(namespace, serving.model_name)
    rows = [("", "VERSION", "ID", "ACCURACY", "LOSS", "REGISTERED (UTC)")]
    for version in versions:
        loss = version.properties.get("loss")
        rows.append(
            (
                SERVED_MARK if served and version.id == served.version_id else "",
                version.name,
                version.id,
                "-" if version.accuracy is None else f"{version.accuracy:.4f}",
                "-" if loss is None else f"{loss:.4f}",
                version.created.strftime("%Y-%m-%d %H:%M:%S"),
            )
        )
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    for row in rows:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )
    if served:
        where = f" at {served.url}" if served.url else ""
        print(f"{SERVED_MARK} served by InferenceService {namespace}/{serving.model_name}{where}")
    return 0


def show_version(args: argparse.Namespace) -> int:
    """Print one version's URI, source run, properties and whether it is served."""
    from components.runtime.model_versions import source_text
    from components.runtime.registry import Registry

    serving = serving_from(args)
    with registry_errors():
        registry = Registry(serving.model_registry)
        version = registry.version(serving.model_name, args.version)
        served = registry.served(_namespace(args), serving.model_name)
    print(f"model       {serving.model_name} (id {version.registered_model_id})")
    print(f"version     {version.name} (id {version.id})")
    print(f"registered  {version.created:%Y-%m-%d %H:%M:%S} UTC")
    print(f"uri         {version.uri}")
    if version.source:
        print(f"source      {source_text(version.source)}")
    print(f"served      {'yes' if served and version.id == served.version_id else 'no'}")
    for name, value in sorted(version.properties.items()):
        print(f"{name:<11} {value}")
    return 0


def deploy_version(args: argparse.Namespace) -> int:
    """Serve the version with the pipeline's deploy code; 1 if it does not come up."""
    from components.runtime.kserve import DeployFailed
    from components.runtime.kube import CONNECT_ONCE, KubeClient
    from components.runtime.model_versions import deploy_registered

    serving = serving_from(args)
    try:
        with registry_errors(), kubernetes_errors(missing="KServe"):
            kube = KubeClient.connect(CONNECT_ONCE)
            url = deploy_registered(serving, args.version, kube, _namespace(args))
    except (DeployFailed, TimeoutError) as error:
        print(f"fmnist models deploy: {str(error).splitlines()[0]}", file=sys.stderr)
        return 1
    print(f"{serving.model_name} version {args.version} serves at {url}")
    return 0
