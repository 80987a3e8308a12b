"""The Kubernetes failures a command reports as usage errors: one line, exit 2."""

from __future__ import annotations

import contextlib

from cli.errors import UsageError


@contextlib.contextmanager
def kubernetes_errors(missing: str = ""):
    """Missing credentials, an unreachable API, refusals, a wrong cluster: usage errors.

    ``missing`` names what a 404 means is not installed (``Katib``, ``KServe``).
    """
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config import ConfigException
    from urllib3.exceptions import HTTPError

    from cli.staging import NamespaceNotReady, StagingFailed
    from components.runtime.discovery import ClusterMismatch
    from components.runtime.kube import connection_failure
    from components.runtime.objects import NotOurs, Refused

    try:
        yield
    except ConfigException as exc:
        raise UsageError(f"no Kubernetes credentials ({exc})") from None
    except HTTPError as exc:
        raise UsageError(f"cannot reach the Kubernetes API at {connection_failure(exc)}") from None
    except ApiException as exc:
        hint = f" (is {missing} installed?)" if missing and exc.status == 404 else ""
        raise UsageError(f"the Kubernetes API refused: {exc.status} {exc.reason}{hint}") from None
    except (ClusterMismatch, NotOurs, Refused, NamespaceNotReady, StagingFailed) as exc:
        raise UsageError(str(exc)) from None
