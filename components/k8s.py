"""Every call this project makes to the Kubernetes API, in one small class.

The RBAC the pipeline runner's service account needs follows from the methods below:

| method | API call | resource | verb |
|---|---|---|---|
| ``create`` | create_namespaced_custom_object | pytorchjobs, isvcs, experiments | create |
| ``get`` | get_namespaced_custom_object | pytorchjobs, isvcs, experiments | get |
| ``list`` | list_namespaced_custom_object | trials | list |
| ``replace`` | replace_namespaced_custom_object | isvcs (inferenceservices) | update |
| ``delete`` | delete_namespaced_custom_object | pytorchjobs, experiments | delete |
| ``list_pods`` | list_namespaced_pod | pods | list |
| ``pod_log`` | read_namespaced_pod_log | pods/log | get |
"""

from __future__ import annotations

from pathlib import Path

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from components.manifests import CustomResource

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def current_namespace() -> str:
    """The namespace this pod runs in; outside a cluster, the kubeconfig context's."""
    if SERVICE_ACCOUNT_NAMESPACE.is_file():
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip()
    try:
        _, context = config.list_kube_config_contexts()
    except (config.ConfigException, OSError):
        return "default"
    return context.get("context", {}).get("namespace") or "default"


def load_config() -> None:
    """Credentials: the pod's service account, else the local kubeconfig."""
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()


class KubeClient:
    """Custom objects and pods in one namespace-agnostic client; one API call per method."""

    def __init__(self, custom_api: client.CustomObjectsApi, core_api: client.CoreV1Api):
        self.custom_api, self.core_api = custom_api, core_api

    @classmethod
    def connect(cls) -> KubeClient:
        """A client with in-cluster (or kubeconfig) credentials."""
        load_config()
        return cls(client.CustomObjectsApi(), client.CoreV1Api())

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
        """Delete a custom object and its pods; a missing object is not an error."""
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

    def pod_log(self, namespace: str, pod: str, container: str) -> str:
        """The current log of one container."""
        return self.core_api.read_namespaced_pod_log(pod, namespace, container=container)


def apply(kube: KubeClient, resource: CustomResource, body: dict) -> dict:
    """Create ``body``, or replace the existing object of that name with it."""
    namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
    try:
        return kube.create(resource, namespace, body)
    except ApiException as exc:
        if exc.status != 409:
            raise
    current = kube.get(resource, namespace, name)
    if current is None:  # deleted between the two calls: create it after all
        return kube.create(resource, namespace, body)
    updated = {
        **body,
        "metadata": {**body["metadata"], "resourceVersion": current["metadata"]["resourceVersion"]},
    }
    return kube.replace(resource, namespace, name, updated)
