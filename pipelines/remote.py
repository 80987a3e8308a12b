"""Talking to a Kubeflow Pipelines server for ``fmnist submit`` and ``fmnist schedule``.

Everything goes through ``kfp.Client`` (the KFP v2beta1 REST API). Server and network
errors become ``UsageError``s that name the host, never tracebacks.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import secrets
import tempfile
import urllib.error
import urllib.request
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import yaml

from pipelines.cli import UsageError

# parameterType in a compiled pipeline -> how a command-line value is converted, and its name.
_CONVERTERS = {
    "NUMBER_INTEGER": (int, "an integer"),
    "NUMBER_DOUBLE": (float, "a number"),
    "STRING": (str, "a string"),
    "BOOLEAN": (lambda text: {"true": True, "false": False}[text.lower()], "true or false"),
    "LIST": (json.loads, "a JSON list"),
    "STRUCT": (json.loads, "a JSON object"),
}
PIPELINE_NAME_MAX = 191  # the API server's pipelines.Name column (backend/src/apiserver/model)
VERSION_NAME_MAX = 255  # its pipeline_versions.Name column


@dataclass(frozen=True)
class Inputs:
    """A compiled pipeline's name and parameters: their types and defaults."""

    name: str
    types: dict[str, str]  # parameter name -> parameterType
    defaults: dict[str, object]


def pipeline_inputs(package: Path) -> Inputs:
    """The name and parameters of a compiled pipeline YAML.

    Raises:
        UsageError: the file is missing or is not a compiled pipeline.
    """
    try:
        spec = next(yaml.safe_load_all(Path(package).read_text()), None)  # then the platform's
    except FileNotFoundError:
        raise UsageError(f"--package {package}: no such file") from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        reason = str(exc).strip().splitlines()[0]
        raise UsageError(f"--package {package} is not a compiled pipeline: {reason}") from None
    info = spec.get("pipelineInfo") if isinstance(spec, dict) else None
    root = spec.get("root") if isinstance(spec, dict) else None
    if not (
        isinstance(info, dict) and isinstance(root, dict) and isinstance(info.get("name"), str)
    ):
        raise UsageError(
            f"--package {package} is not a compiled pipeline (no pipelineInfo.name and root): "
            "give a file from `fmnist compile`"
        )
    inputs = root.get("inputDefinitions", {}).get("parameters", {})
    return Inputs(
        info["name"],
        {name: value["parameterType"] for name, value in inputs.items()},
        {name: value["defaultValue"] for name, value in inputs.items() if "defaultValue" in value},
    )


def parse_params(pairs: list[str], types: dict[str, str]) -> dict[str, object]:
    """``NAME=VALUE`` flags -> run parameters, converted to the pipeline's declared types."""
    params = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        if not sep or not name:
            raise UsageError(f"--param takes NAME=VALUE, got {pair!r}")
        if name not in types:
            raise UsageError(f"unknown pipeline parameter {name!r}; known: {', '.join(types)}")
        convert, kind = _CONVERTERS[types[name]]
        try:
            params[name] = convert(text)
        except (KeyError, ValueError):
            raise UsageError(f"--param {name}: {text!r} is not {kind}") from None
    return params


def check_params(inputs: Inputs, params: dict[str, object]) -> None:
    """Check a run's values (the package's defaults, overridden by ``params``) as its steps will.

    The pipelines of this project are checked with their own parameter sets; a package of
    another pipeline only by the types it declares.

    Raises:
        UsageError: ``target=local`` (a cluster runs the pipeline), or a value out of range.
    """
    from components.specs.params import ParamError
    from pipelines import PIPELINES, load_pipeline
    from pipelines.flags import usage_error
    from pipelines.parameters import check_values

    values = {**inputs.defaults, **params}
    if values.get("target", "cluster") != "cluster":
        raise UsageError(
            f"--param target={values['target']} cannot run on a cluster: `fmnist run` runs the "
            "pipeline on this machine"
        )
    if inputs.name not in PIPELINES:
        return
    sources = load_pipeline(inputs.name).pipeline_func.parameter_sources
    try:
        check_values(sources, values)
    except ParamError as exc:
        raise usage_error(exc, spelling=lambda name: f"--param {name}") from None


def check_url(host: str) -> None:
    """``--host`` must name its scheme (the client would guess https otherwise)."""
    if not host.startswith(("http://", "https://")):
        raise UsageError(f"--host must be a URL such as http://localhost:8080, got {host!r}")


def check_host(host: str, token: str | None, timeout: float = 10.0) -> dict:
    """The server's healthz answer; fail early and clearly when the KFP API does not answer.

    Raises:
        UsageError: the host is unreachable, refuses us, or is not a KFP API server.
    """
    check_url(host)
    request = urllib.request.Request(f"{host.rstrip('/')}/apis/v2beta1/healthz")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read()
    except urllib.error.HTTPError as exc:
        hint = " (check --token)" if exc.code in (401, 403) else ""
        raise UsageError(f"Kubeflow Pipelines at {host} answered {exc.code}{hint}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise UsageError(f"cannot reach Kubeflow Pipelines at {host}: {reason}") from None
    try:
        health = json.loads(body)
    except ValueError:
        health = None
    if not isinstance(health, dict) or "multi_user" not in health:
        raise UsageError(f"{host} does not answer like a Kubeflow Pipelines API server")
    return health


def stated_version(text: str | None) -> tuple[int, int] | None:
    """``--kfp-version`` as (major, minor); None when not given.

    Raises:
        UsageError: it is given but is no release number.
    """
    from pipelines.backends import parse_version

    if text is None:
        return None
    version = parse_version(text)
    if version is None:
        raise UsageError(f"--kfp-version must be a release such as 2.15.0, got {text!r}")
    return version


def server_version(health: dict, stated: tuple[int, int] | None) -> tuple[int, int]:
    """The server's release: ``--kfp-version`` if given, else what its healthz reports.

    Raises:
        UsageError: neither tells a version.
    """
    from pipelines.backends import parse_version

    version = stated or parse_version(health.get("tag_name"))
    if version is None:
        raise UsageError(
            f"the server does not report its version (tag_name {health.get('tag_name')!r}); "
            "pass --kfp-version, e.g. --kfp-version 2.15.0"
        )
    return version


def connect(host: str, token: str | None = None, namespace: str | None = None):
    """A ``kfp.Client`` for ``host`` (whose healthz answer ``check_host`` has read)."""
    import kfp

    with quiet(host):
        return kfp.Client(host=host, existing_token=token, namespace=namespace or "kubeflow")


@contextlib.contextmanager
def quiet(host: str) -> Iterator[None]:
    """Silence the client's prints and warnings; turn API errors into UsageErrors."""
    from kfp_server_api.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    except ApiException as exc:
        raise UsageError(f"Kubeflow Pipelines at {host} refused: {_api_message(exc)}") from None
    except HTTPError as exc:
        raise UsageError(f"cannot reach Kubeflow Pipelines at {host}: {exc}") from None


def _api_message(exc) -> str:
    """Status, reason and the server's message, its first line only.

    The KFP API server's message of an internal error goes on with the wrapping context and
    a Go stack trace, one frame a line (kubeflow/pipelines 2.15.0 backend/src/common/util/
    error.go); the first line is the cause.
    """
    try:
        body = json.loads(exc.body)
        detail = body.get("message") or body.get("error_message", "")  # 409s use the latter
    except (TypeError, ValueError, AttributeError):
        detail = ""
    detail = detail.strip().splitlines()[0] if isinstance(detail, str) and detail.strip() else ""
    return f"{exc.status} {exc.reason}" + (f": {detail}" if detail else "")


def upload(client, package: Path, pipeline_name: str, version_name: str) -> tuple[str, str]:
    """Upload ``package`` as a new version of ``pipeline_name`` (created if missing).

    Returns:
        (pipeline id, pipeline version id).
    """
    pipeline_id = client.get_pipeline_id(pipeline_name)
    if pipeline_id is None:
        pipeline_id = client.upload_pipeline(str(package), pipeline_name=pipeline_name).pipeline_id
        versions = client.list_pipeline_versions(
            pipeline_id, page_size=1, sort_by="created_at desc"
        )
        return pipeline_id, versions.pipeline_versions[0].pipeline_version_id
    version = client.upload_pipeline_version(str(package), version_name, pipeline_id=pipeline_id)
    return pipeline_id, version.pipeline_version_id


def experiment_id(client, name: str, namespace: str | None) -> str:
    """The id of the KFP experiment called ``name``, created if missing."""
    return client.create_experiment(name, namespace=namespace or None).experiment_id


def timestamp() -> str:
    """A UTC timestamp for version and run names, e.g. 20260101-120000."""
    return datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")


def ui_url(host: str, path: str) -> str:
    """A link into the KFP UI served at ``host``, e.g. ``#/runs/details/<id>``."""
    return f"{host.rstrip('/')}/#/{path}"


def add_server_flags(parser: argparse.ArgumentParser) -> None:
    """``--host``, ``--token``, ``--namespace``: how to reach the KFP API."""
    group = parser.add_argument_group("Kubeflow Pipelines server")
    endpoint = os.environ.get("KF_PIPELINES_ENDPOINT")
    group.add_argument(
        "--host",
        default=endpoint,
        required=endpoint is None,
        help="KFP API URL, e.g. http://localhost:8080 after `kubectl port-forward -n kubeflow "
        "svc/ml-pipeline-ui 8080:80` (default: $KF_PIPELINES_ENDPOINT)",
    )
    group.add_argument("--token", help="bearer token, e.g. $(kubectl create token SA)")
    group.add_argument("--namespace", help="the profile namespace (multi-user Kubeflow)")


def add_pipeline_flags(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """Which pipeline to upload, under which name and version, with which parameters.

    Returns:
        The flags added (``schedule`` refuses them beside ``--list`` and the like).
    """
    from pipelines import PIPELINES
    from pipelines.commands.compile import add_workspace_flags

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
    from pipelines.backends import check_package, choose_variant, package_settings

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
    return Plan(package, variant, name, args.version, params)


def dry_run(args: argparse.Namespace) -> Plan:
    """``--dry-run``: check everything that needs no server, print the plan, contact nothing."""
    stated = stated_version(args.kfp_version)
    with tempfile.TemporaryDirectory() as tmp:
        plan = plan_from_args(args, Path(tmp), stated)
    print(f"dry run: nothing is sent to {args.host}")
    print("\n".join(plan.describe(args.experiment)))
    if not (stated or args.package):
        print("(the server's release picks the variant: --kfp-version names it here)")
    return plan


def upload_from_args(args: argparse.Namespace) -> Uploaded:
    """Check everything, then upload (the variant the server runs) and find the experiment."""
    from pipelines.backends import choose_variant

    stated = stated_version(args.kfp_version)
    with tempfile.TemporaryDirectory() as tmp:
        plan = plan_from_args(args, Path(tmp), stated)
        version = server_version(check_host(args.host, args.token), stated)
        if args.package or choose_variant(version, args.workspace_storage_class or "") != (
            plan.variant
        ):
            plan = plan_from_args(args, Path(tmp), version)  # checks or compiles for the server
        client = connect(args.host, args.token, args.namespace)
        with quiet(args.host):
            pipeline_id, version_id = upload(
                client,
                plan.package,
                plan.name,
                plan.version_name or f"{plan.name}-{timestamp()}-{secrets.token_hex(2)}",
            )
            experiment = experiment_id(client, args.experiment, args.namespace)
    return Uploaded(client, pipeline_id, version_id, experiment, plan.name, plan.params)


def _compile(args: argparse.Namespace, variant: str, out_dir: Path) -> Path:
    from pipelines.commands.compile import compile_pipeline, settings_from_args

    return compile_pipeline(args.pipeline, out_dir, settings_from_args(args, variant))
