"""What ``fmnist submit`` and ``fmnist schedule`` upload: the pipeline, checked, then sent.

The pipeline flags, the plan checked without a server (``--dry-run`` prints it), and
the upload of the variant the server runs (compiled here, or ``--package``) as a new
version of its pipeline, with the experiment its runs go to.
"""

from __future__ import annotations

import argparse
import secrets
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cli.compiling import add_workspace_flags, compile_pipeline, settings_from_args
from cli.errors import UsageError
from cli.package_inputs import check_params, parse_params, pipeline_inputs
from cli.server import (
    check_host,
    check_url,
    connect,
    experiment_id,
    kfp_token,
    quiet,
    require_host,
    server_version,
    stated_version,
    timestamp,
    upload,
)
from pipelines import PIPELINES

PIPELINE_NAME_MAX = 191  # the API server's pipelines.Name column (backend/src/apiserver/model)
VERSION_NAME_MAX = 255  # its pipeline_versions.Name column


def add_pipeline_flags(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """Which pipeline to upload, under which name and version, with which parameters.

    Returns:
        The flags added (``schedule`` refuses them beside ``--list`` and the like).
    """
    group = parser.add_argument_group("pipeline")
    source = group.add_mutually_exclusive_group()
    actions = [
        source.add_argument(
            "--pipeline",
            choices=sorted(PIPELINES),
            default="fashion-mnist",
            help="compile this pipeline, in the variant the server runs (default: fashion-mnist)",
        ),
        source.add_argument("--package", type=Path, help="a compiled pipeline YAML instead"),
        group.add_argument("--pipeline-name", help="name in KFP (default: the pipeline's own)"),
        group.add_argument(
            "--version",
            help="version name (default: NAME-<UTC timestamp>-<4 hex digits>); the first "
            "version of a new pipeline takes the pipeline's name (kfp.Client.upload_pipeline "
            "names none)",
        ),
        group.add_argument(
            "--experiment", default="fmnist", help="KFP experiment (default: fmnist)"
        ),
        group.add_argument(
            "--param",
            action="append",
            default=[],
            metavar="NAME=VALUE",
            help="a pipeline parameter; repeat for more",
        ),
        group.add_argument(
            "--kfp-version",
            help="the server's Kubeflow Pipelines release, if its healthz does not report it; "
            "with --dry-run, the release to compile for (default: 2.15 or later)",
        ),
        group.add_argument(
            "--dry-run",
            action="store_true",
            help="check everything and print what would be done; contact no server",
        ),
    ]
    return actions + add_workspace_flags(parser)


@dataclass(frozen=True)
class Plan:
    """What would be uploaded and run, checked without a server."""

    package: Path
    variant: str  # the compiled variant: workspace or pvc
    name: str  # the pipeline's name in KFP
    version_name: str | None  # None: NAME-<UTC timestamp>-<4 hex digits>, chosen at upload
    params: dict
    defaults: dict  # the package's parameters that declare a default, with it

    def describe(self, experiment: str) -> list[str]:
        """Lines that say what would be done."""
        values = ", ".join(f"{name}={value!r}" for name, value in self.params.items())
        return [
            f"pipeline {self.name}: {self.package.name} ({self.variant} variant)",
            f"version: {self.version_name or f'{self.name}-<UTC timestamp>-<4 hex digits>'}",
            f"experiment: {experiment}",
            f"parameters: {values or 'the defaults'}",
        ]


@dataclass(frozen=True)
class Uploaded:
    """A pipeline version on the server, ready to run."""

    client: object  # kfp.Client
    pipeline_id: str
    version_id: str
    experiment_id: str
    name: str  # the pipeline's name in KFP
    params: dict
    defaults: dict

    @property
    def every_value(self) -> dict:
        """Every parameter with a default, at ``params``' value or its default.

        The parameters declared optional with no default (None) are left out: KFP's driver
        refuses a null value (kubeflow/pipelines 2.5.0 ``driver.go``, 2.15.0
        ``resolve.go``: "got null for input parameter").
        """
        return {**self.defaults, **self.params}


def require_text(value: str | None, flag_name: str, max_length: int = 0) -> None:
    """A name flag, when given, is not blank (and at most ``max_length`` characters)."""
    if value is not None and not value.strip():
        raise UsageError(f"{flag_name} must not be empty")
    if value is not None and max_length and len(value) > max_length:
        raise UsageError(f"{flag_name} must be 1 to {max_length} characters, got {len(value)}")


def plan_from_args(
    args: argparse.Namespace, out_dir: Path, version: tuple[int, int] | None
) -> Plan:
    """Check every flag that needs no server; compile (or read ``--package``) for ``version``.

    Args:
        args: the parsed flags of ``submit`` or ``schedule``.
        out_dir: where a compiled pipeline goes.
        version: the server's release, when known; else the workspace variant is compiled.
    """
    from cli.backends import check_package, choose_variant, package_settings

    check_url(args.host)
    require_text(args.experiment, "--experiment")
    require_text(args.pipeline_name, "--pipeline-name", PIPELINE_NAME_MAX)
    require_text(args.version, "--version", VERSION_NAME_MAX)
    if args.package:
        inputs = pipeline_inputs(args.package)
        if version:
            check_package(args.package, version)
        package, variant = args.package, package_settings(args.package)[0]
    else:
        storage_class = args.workspace_storage_class or ""
        variant = choose_variant(version, storage_class) if version else "workspace"
        package = _compile(args, variant, out_dir)
        inputs = pipeline_inputs(package)
    params = parse_params(args.param, inputs.types)
    check_params(inputs, params)
    name = args.pipeline_name or inputs.name
    return Plan(package, variant, name, args.version, params, inputs.defaults)


def dry_run(args: argparse.Namespace) -> Plan:
    """``--dry-run``: check everything that needs no server, print the plan, contact nothing."""
    stated = stated_version(args.kfp_version)
    kfp_token(args)  # a token file that cannot be read fails the dry run too
    with tempfile.TemporaryDirectory() as tmp:
        plan = plan_from_args(args, Path(tmp), stated)
    sent_to = f"to {args.host}" if args.host else "(no --host given)"
    print(f"dry run: nothing is sent {sent_to}")
    print("\n".join(plan.describe(args.experiment)))
    if not (stated or args.package):
        print("(the server's release picks the variant: --kfp-version names it here)")
    return plan


def plan_or_upload(args: argparse.Namespace, what: Callable[[Plan], str]) -> Uploaded | None:
    """``--dry-run``: print the plan and ``what`` it would create, return None; else upload."""
    if args.dry_run:
        print(what(dry_run(args)))
        return None
    return upload_from_args(args)


def upload_from_args(args: argparse.Namespace) -> Uploaded:
    """Check everything, then upload (the variant the server runs) and find the experiment."""
    from cli.backends import choose_variant

    require_host(args.host)
    stated = stated_version(args.kfp_version)
    token = kfp_token(args)
    with tempfile.TemporaryDirectory() as tmp:
        plan = plan_from_args(args, Path(tmp), stated)
        version = server_version(check_host(args.host, token), stated)
        if args.package or choose_variant(version, args.workspace_storage_class or "") != (
            plan.variant
        ):
            plan = plan_from_args(args, Path(tmp), version)  # checks or compiles for the server
        client = connect(args.host, token, args.namespace)
        with quiet(args.host):
            pipeline_id, version_id = upload(
                client,
                plan.package,
                plan.name,
                plan.version_name or f"{plan.name}-{timestamp()}-{secrets.token_hex(2)}",
            )
            experiment = experiment_id(client, args.experiment, args.namespace)
    return Uploaded(
        client, pipeline_id, version_id, experiment, plan.name, plan.params, plan.defaults
    )


def _compile(args: argparse.Namespace, variant: str, out_dir: Path) -> Path:
    return compile_pipeline(args.pipeline, out_dir, settings_from_args(args, variant))
