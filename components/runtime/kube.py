"""Every call the steps make to the Kubernetes API, in one small class.

The RBAC the pipeline's service account needs (k8s/rbac) follows from the methods below;
tests/k8s/test_rbac.py derives it from this code and compares it with the Role:

| method | API call (``*_namespaced_*``) | resources | verb |
|---|---|---|---|
| ``create`` | create_..._custom_object | pytorchjobs, trainjobs, isvcs, experiments | create |
| ``get`` | get_..._custom_object | the same | get |
| ``list`` | list_..._custom_object | trials, workloads | list |
| ``replace`` | replace_..._custom_object | inferenceservices | update |
| ``delete`` | delete_..._custom_object | pytorchjobs, trainjobs, experiments | delete |
| ``list_pods`` | list_..._pod | pods | list |
| ``pod_log`` | read_..._pod_log | pods/log | get |
| ``list_deployments`` | list_..._deployment | deployments (apps) | list |
| ``namespace_labels`` | read_namespace (cluster-scoped) | namespaces | get |
| ``has_service_account`` | read_..._service_account | serviceaccounts | get |

``served_resources`` (discovery) and ``openapi_schema`` (``/openapi/v3``) read what the
cluster serves; every authenticated user may (the ``system:discovery`` ClusterRole).
Transient failures (5xx, 429, dropped connections) are retried by the client itself a few
times, and ``is_transient`` tells the waiting loop which errors to wait out. Every request
has connect and read timeouts (``REQUEST_TIMEOUT``, through ``BoundedApiClient``): an API
server that accepts and never answers fails the call instead of holding the step.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError
from urllib3.util.retry import Retry

from components.specs.kinds import CustomResource

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
TRANSIENT_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
# The client's own retries of one request; the waiting loop retries whole polls on top.
CLIENT_RETRIES = Retry(
    total=4, connect=4, read=2, backoff_factor=0.5, status_forcelist=sorted(TRANSIENT_STATUSES)
)
CONNECT_ONCE = CLIENT_RETRIES.new(connect=0)
# Seconds to connect, and to wait for each read, per attempt. With CLIENT_RETRIES one call
# gives up after at most 5 connects (about 57 s) or 3 reads of a GET (about 91 s).
REQUEST_TIMEOUT = (10.0, 30.0)


def is_transient(error: BaseException) -> bool:
    """Whether an API error is worth waiting out: a 5xx, a 429, a timeout, a lost connection."""
    if isinstance(error, ApiException):
        return error.status in TRANSIENT_STATUSES or not error.status
    return isinstance(error, (HTTPError, ConnectionError, TimeoutError))


def connection_failure(error: HTTPError) -> str:
    """Where a request could not go and why, e.g. ``https://10.0.0.1:6443: ... refused``."""
    pool = getattr(error, "pool", None)
    where = f"{pool.scheme}://{pool.host}:{pool.port}" if pool else "the API server"
    reason = str(getattr(error, "reason", None) or error)
    return f"{where}: {reason.rpartition('): ')[2] or reason}"


def current_namespace() -> str:
    """The namespace this pod runs in; outside a cluster, the kubeconfig context's."""
    if SERVICE_ACCOUNT_NAMESPACE.is_file():
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip()
    try:  # KUBECONFIG as it is now (the client reads it once, at import)
        _, context = config.list_kube_config_contexts(os.environ.get("KUBECONFIG"))
    except (config.ConfigException, OSError):
        return "default"
    return context.get("context", {}).get("namespace") or "default"


def load_config() -> None:
    """Credentials: the pod's service account, else the local kubeconfig.

    Raises:
        config.ConfigException: no credentials, or a kubeconfig that cannot be read (the
            message names the file and the first line of what is wrong with it).
    """
    try:
        config.load_incluster_config()
        return
    except config.ConfigException:
        pass
    path = os.environ.get("KUBECONFIG")  # as it is now (the client read it once, at import)
    try:
        config.load_kube_config(config_file=path)
    except (yaml.YAMLError, TypeError, AttributeError, KeyError, ValueError) as exc:
        where = path or config.kube_config.KUBE_CONFIG_DEFAULT_LOCATION
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise config.ConfigException(f"the kubeconfig {where} is not valid: {reason}") from None


class BoundedApiClient(client.ApiClient):
    """An ``ApiClient`` whose every request has connect and read timeouts.

    The kubernetes client waits for ever unless a call passes ``_request_timeout``
    (kubernetes 30.1.0 ``client/rest.py``, ``RESTClientObject.request``: no timeout given,
    none set); every generated API method and ``call_api`` hand that keyword to
    ``ApiClient.request`` (``client/api_client.py``, ``__call_api``), which fills in ours.
    """

    timeout = REQUEST_TIMEOUT

    def request(self, *args, _request_timeout=None, **kwargs):
        """``ApiClient.request`` with ``timeout`` unless the call gives its own."""
        timeout = _request_timeout or self.timeout
        return super().request(*args, _request_timeout=timeout, **kwargs)


class KubeClient:
    """Custom objects, pods, deployments and discovery; one API call per method."""

    def __init__(self, api_client: client.ApiClient | None = None):
        self.api_client = api_client or BoundedApiClient()
        self.custom_api = client.CustomObjectsApi(self.api_client)
        self.core_api = client.CoreV1Api(self.api_client)
        self.apps_api = client.AppsV1Api(self.api_client)
        self.host = getattr(getattr(self.api_client, "configuration", None), "host", "")

    @classmethod
    def connect(cls, retries: Retry = CLIENT_RETRIES) -> KubeClient:
        """A client with in-cluster (or kubeconfig) credentials that retries transient errors.

        ``host`` is the API server's URL. The commands a user runs pass ``CONNECT_ONCE``: a
        refused connection is an answer for them, not worth seconds of silent retries.
        """
        load_config()
        configuration = client.Configuration.get_default_copy()
        configuration.retries = retries
        return cls(BoundedApiClient(configuration))

    def create(self, resource: CustomResource, namespace: str, body: dict) -> dict:
        """Create a custom object; raises ApiException (409 if it exists)."""
        return self.custom_api.create_namespaced_custom_object(
            resource.group, resource.version, namespace, resource.plural, body
        )

    def get(self, resource: CustomResource, namespace: str, name: str) -> dict | None:
        """A custom object, or None if there is none of that name."""
        try:
            return self.custom_api.get_namespaced_custom_object(
                resource.group, resource.version, namespace, resource.plural, name
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def list(self, resource: CustomResource, namespace: str, label_selector: str) -> list[dict]:
        """The custom objects matching a label selector."""
        found = self.custom_api.list_namespaced_custom_object(
            resource.group,
            resource.version,
            namespace,
            resource.plural,
            label_selector=label_selector,
        )
        return found.get("items", [])

    def replace(self, resource: CustomResource, namespace: str, name: str, body: dict) -> dict:
        """Replace a custom object (``body`` carries the current resourceVersion)."""
        return self.custom_api.replace_namespaced_custom_object(
            resource.group, resource.version, namespace, resource.plural, name, body
        )

    def delete(self, resource: CustomResource, namespace: str, name: str) -> None:
        """Delete a custom object and what it owns; a missing object is not an error."""
        try:
            self.custom_api.delete_namespaced_custom_object(
                resource.group,
                resource.version,
                namespace,
                resource.plural,
                name,
                body=client.V1DeleteOptions(propagation_policy="Background"),
            )
        except ApiException as exc:
            if exc.status != 404:
                raise

    def list_pods(self, namespace: str, label_selector: str) -> list[client.V1Pod]:
        """The pods matching a label selector."""
        return self.core_api.list_namespaced_pod(namespace, label_selector=label_selector).items

    def pod_log(self, namespace: str, pod: str, container: str, previous: bool = False) -> str:
        """The log of one container (``previous``: of its last terminated run)."""
        return self.core_api.read_namespaced_pod_log(
            pod, namespace, container=container, previous=previous
        )

    def list_deployments(self, namespace: str, label_selector: str) -> list[client.V1Deployment]:
        """The Deployments matching a label selector."""
        return self.apps_api.list_namespaced_deployment(
            namespace, label_selector=label_selector
        ).items

    def namespace_labels(self, name: str) -> dict[str, str]:
        """The labels of a namespace."""
        return self.core_api.read_namespace(name).metadata.labels or {}

    def has_service_account(self, namespace: str, name: str) -> bool:
        """Whether ServiceAccount ``name`` exists in ``namespace``."""
        try:
            self.core_api.read_namespaced_service_account(name, namespace)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def served_resources(self, group_version: str) -> set[str] | None:
        """The resources the API serves under ``group/version``; None if it serves none."""
        try:
            found = self._get_json(f"/apis/{group_version}")
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return {item["name"] for item in found.get("resources", [])}

    def openapi_schema(self, group_version: str) -> dict:
        """The served OpenAPI v3 document of ``group/version`` (CRD schemas included)."""
        return self._get_json(f"/openapi/v3/apis/{group_version}")

    def _get_json(self, path: str) -> dict:
        response = self.api_client.call_api(
            path,
            "GET",
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
            _preload_content=False,
            _return_http_data_only=True,
        )
        return json.loads(response.data)


def apply(kube: KubeClient, resource: CustomResource, body: dict, current: dict | None) -> dict:
    """Create ``body``, or replace ``current`` (the live object of that name) with it.

    A replacement keeps the live object's metadata (finalizers, others' labels and
    annotations, resourceVersion) and takes the spec, labels and annotations of ``body``.
    """
    namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
    if current is None:
        return kube.create(resource, namespace, body)
    metadata = dict(current["metadata"])
    for key in ("labels", "annotations"):
        metadata[key] = {**(metadata.get(key) or {}), **body["metadata"].get(key, {})}
    return kube.replace(resource, namespace, name, {**body, "metadata": metadata})
