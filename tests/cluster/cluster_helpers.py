"""Helpers for the cluster tier's tests (tests/cluster/conftest.py puts this folder on sys.path).

from cluster_helpers import account_kubeconfig, condition, queue_for, remote_job, wait_for
"""

from __future__ import annotations

import base64
import time
from pathlib import Path

import kubernetes
import pytest
import yaml
from kubernetes.client.exceptions import ApiException

REPO = Path(__file__).resolve().parents[2]


def wait_for(check, timeout: float = 60, what: str = "the condition", interval: float = 0.5):
    """Call ``check()`` until it returns something truthy; return that, or fail naming ``what``."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except ApiException as error:  # e.g. 404 until a controller creates the object
            last = error
            if error.status not in (404, 409):
                raise
        if last and not isinstance(last, ApiException):
            return last
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout} s waiting for {what} (last: {last!r})")


def condition(obj: dict, kind: str) -> str | None:
    """The status ("True"/"False") of the condition of that type, or None."""
    for item in (obj.get("status") or {}).get("conditions") or []:
        if item.get("type") == kind:
            return item.get("status")
    return None


def queue_for(kueue_objects: list[dict], resources: dict[str, object]) -> tuple[str, str, str]:
    """(LocalQueue, ClusterQueue, flavor) Kueue admits a job asking for ``resources`` to.

    Kueue tries a ClusterQueue's flavors in order and takes the first whose quota covers every
    resource asked for (sigs.k8s.io/kueue pkg/scheduler/flavorassigner). Read from k8s/kueue as
    it is now, so the tests follow changes to the queues.
    """
    cluster_queues = {
        o["metadata"]["name"]: o for o in kueue_objects if o["kind"] == "ClusterQueue"
    }
    for local in (o for o in kueue_objects if o["kind"] == "LocalQueue"):
        queue = cluster_queues[local["spec"]["clusterQueue"]]
        for group in queue["spec"]["resourceGroups"]:
            if not set(resources) <= set(group["coveredResources"]):
                continue
            for flavor in group["flavors"]:
                quota = {r["name"]: r["nominalQuota"] for r in flavor["resources"]}
                if all(_quantity(quota.get(name, 0)) > 0 for name in resources):
                    return local["metadata"]["name"], queue["metadata"]["name"], flavor["name"]
    raise AssertionError(f"no LocalQueue in k8s/kueue admits {resources}")


def _quantity(value) -> float:
    text = str(value)
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "m": 1e-3}
    for suffix, factor in units.items():
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * factor
    return float(text)


def account_kubeconfig(api_client, admin: Path, account: str, namespace: str) -> tuple[str, dict]:
    """(token, kubeconfig) of a ServiceAccount: a TokenRequest token for one hour, and a
    kubeconfig for the cluster of the ``admin`` kubeconfig that uses it, its CA inline."""
    request = {"spec": {"audiences": [], "expirationSeconds": 3600}}
    token = (
        kubernetes.client.CoreV1Api(api_client)
        .create_namespaced_service_account_token(account, namespace, request)
        .status.token
    )
    config = yaml.safe_load(admin.read_text())
    context = next(c for c in config["contexts"] if c["name"] == config["current-context"])
    cluster = next(c for c in config["clusters"] if c["name"] == context["context"]["cluster"])
    cluster = dict(cluster["cluster"])
    if "certificate-authority" in cluster:  # kwokctl writes a path; make it self-contained
        ca = Path(cluster.pop("certificate-authority")).read_bytes()
        cluster["certificate-authority-data"] = base64.b64encode(ca).decode()
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "cluster", "cluster": cluster}],
        "users": [{"name": account, "user": {"token": token}}],
        "contexts": [
            {
                "name": account,
                "context": {"cluster": "cluster", "user": account, "namespace": namespace},
            }
        ],
        "current-context": account,
    }
    return token, kubeconfig


def remote_job(api_client, plural: tuple[str, str, str], namespace: str, name: str) -> dict | None:
    """A job (group, version, plural) through ``api_client`` (a worker, a Karmada member or
    Karmada itself), or None."""
    try:
        return kubernetes.client.CustomObjectsApi(api_client).get_namespaced_custom_object(
            *plural[:2], namespace, plural[2], name
        )
    except ApiException as error:
        if error.status == 404:
            return None
        raise
