"""Talking to a Kubeflow Pipelines server for ``fmnist submit`` and ``fmnist schedule``.

Everything goes through ``kfp.Client`` (the KFP v2beta1 REST API). Server and network
errors become ``UsageError``s that name the host, never tracebacks. Nothing waits for ever:
the healthz check has connect and read timeouts (``HEALTHZ_SECONDS``), and every block of
client calls (inside ``quiet``) a deadline (``CALL_SECONDS``).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import signal
import sys
import urllib.error
import urllib.parse
import urllib.request
import warnings
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

from cli.errors import UsageError

TOKEN_ENV = "FMNIST_KFP_TOKEN"  # the token, when neither --token nor --token-file gives one
TOKEN_FILE_MAX_BYTES = 16 * 1024  # a service-account token is 1 to 2 KiB
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")  # plain http to these stays on this machine
HEALTHZ_SECONDS = 10.0  # to connect, and for each read, of the healthz check
CALL_SECONDS = 60.0  # the most one block of kfp.Client calls may take, an upload included


def check_url(host: str | None) -> None:
    """``--host``, when given, must name its scheme (the client would guess https otherwise)."""
    if host is not None and not host.startswith(("http://", "https://")):
        raise UsageError(f"--host must be a URL such as http://localhost:8080, got {host!r}")


def require_host(host: str | None) -> str:
    """``--host`` (or ``$KF_PIPELINES_ENDPOINT``): needed by all but ``--dry-run``.

    Raises:
        UsageError: neither is given.
    """
    if host is None:
        raise UsageError(
            "--host is required to reach Kubeflow Pipelines (or set $KF_PIPELINES_ENDPOINT); "
            "--dry-run needs none"
        )
    check_url(host)
    return host


def check_host(host: str | None, token: str | None) -> dict:
    """The server's healthz answer; fail early and clearly when the KFP API does not answer.

    Raises:
        UsageError: no host is given, or it is unreachable, refuses us, or is not a KFP API
            server.
    """
    host = require_host(host)
    request = urllib.request.Request(f"{host.rstrip('/')}/apis/v2beta1/healthz")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=HEALTHZ_SECONDS) as response:
            body = response.read()
    except urllib.error.HTTPError as exc:
        hint = " (check the token)" if exc.code in (401, 403) else ""
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
    from cli.backends import parse_version

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
    from cli.backends import parse_version

    version = stated or parse_version(health.get("tag_name"))
    if version is None:
        raise UsageError(
            f"the server does not report its version (tag_name {health.get('tag_name')!r}); "
            "pass --kfp-version, e.g. --kfp-version 2.15.0"
        )
    return version


def kfp_token(args: argparse.Namespace) -> str | None:
    """The bearer token: ``--token-file``, ``--token``, else ``$FMNIST_KFP_TOKEN``; or None.

    Prints one warning line when the token would go over plain http to a host other than
    this machine. The token itself is never printed, in a warning or an error.

    Raises:
        UsageError: the file cannot be read, is too large, or the token is not one word of
            printable ASCII (which would reach an HTTP header).
    """
    if args.token_file is not None:
        token, source = _read_token_file(args.token_file), f"--token-file {args.token_file}"
    elif args.token is not None:
        token, source = args.token.strip(), "--token"
    else:
        token, source = os.environ.get(TOKEN_ENV, "").strip(), f"${TOKEN_ENV}"
    if not token:
        if args.token_file is not None or args.token is not None:
            raise UsageError(f"{source} gives an empty token")
        return None
    if not all("!" <= char <= "~" for char in token):
        raise UsageError(
            f"the token from {source} holds spaces, control or non-ASCII characters; "
            "a bearer token is one word"
        )
    url = urllib.parse.urlsplit(args.host or "")
    if url.scheme == "http" and url.hostname not in LOOPBACK_HOSTS:
        print(
            f"fmnist: warning: a token over plain http to {url.hostname} can be read by "
            "anyone on the way; use https",
            file=sys.stderr,
        )
    return token


def _read_token_file(path: Path) -> str:
    try:
        with path.open("rb") as file:
            data = file.read(TOKEN_FILE_MAX_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"cannot read --token-file {path}: {exc.strerror}") from None
    if len(data) > TOKEN_FILE_MAX_BYTES:
        raise UsageError(
            f"--token-file {path} is over {TOKEN_FILE_MAX_BYTES} bytes: not a bearer token"
        )
    return data.decode("latin-1").strip()


def connect(host: str, token: str | None = None, namespace: str | None = None):
    """A ``kfp.Client`` for ``host`` (whose healthz answer ``check_host`` has read)."""
    import kfp

    with quiet(host):
        return kfp.Client(host=host, existing_token=token, namespace=namespace or "kubeflow")


class NoAnswer(BaseException):
    """``CALL_SECONDS`` passed inside ``quiet``.

    A BaseException, so that no ``except Exception`` in the client takes it for a failed
    request and carries on.
    """


@contextlib.contextmanager
def quiet(host: str) -> Iterator[None]:
    """Silence the client's prints and warnings; turn API errors into UsageErrors.

    The block ends within ``CALL_SECONDS``: the ``kfp.Client`` sets no timeout on its
    requests (kfp-server-api 2.17.3 ``kfp_server_api/rest.py``, ``RESTClientObject.request``:
    none unless a call passes ``_request_timeout``, and kfp 2.17.3 ``kfp/client/client.py``
    passes none), so a timer interrupts it instead (main thread only, as ``fmnist`` runs).
    """
    from kfp_server_api.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), _deadline():
            warnings.simplefilter("ignore")
            yield
    except NoAnswer:
        raise UsageError(
            f"Kubeflow Pipelines at {host} did not answer within {CALL_SECONDS:g} s"
        ) from None
    except ApiException as exc:
        raise UsageError(f"Kubeflow Pipelines at {host} refused: {_api_message(exc)}") from None
    except HTTPError as exc:
        raise UsageError(f"cannot reach Kubeflow Pipelines at {host}: {exc}") from None


@contextlib.contextmanager
def _deadline() -> Iterator[None]:
    def interrupt(signum, frame):
        raise NoAnswer

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, CALL_SECONDS)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


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
    endpoint = os.environ.get("KF_PIPELINES_ENDPOINT") or None
    group.add_argument(
        "--host",
        default=endpoint,
        help="KFP API URL, e.g. http://localhost:8080 after `kubectl port-forward -n kubeflow "
        "svc/ml-pipeline-ui 8080:80` (default: $KF_PIPELINES_ENDPOINT; --dry-run needs none)",
    )
    token = group.add_mutually_exclusive_group()
    token.add_argument(
        "--token",
        help=f"bearer token (visible in ps: prefer --token-file or ${TOKEN_ENV})",
    )
    token.add_argument(
        "--token-file",
        type=Path,
        metavar="PATH",
        help=f"read the bearer token from this file (default: ${TOKEN_ENV}, if set)",
    )
    group.add_argument("--namespace", help="the profile namespace (multi-user Kubeflow)")
