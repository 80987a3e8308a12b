"""An in-memory Kubernetes API at the ``kubernetes`` client boundary, for the default tier.

``FakeCluster`` stands in for ``CustomObjectsApi``, ``CoreV1Api``, ``AppsV1Api`` and the
``ApiClient`` calls for discovery (``/apis/<group>/<version>``) and OpenAPI v3
(``/openapi/v3/apis/<group>/<version>``). Components run unmodified against it: they
create, read, replace and delete objects and read pods, logs and Deployments as against a
cluster, while the test scripts what the "cluster" reports (statuses, pods, logs,
transient failures) and inspects every call.
"""

from __future__ import annotations

import copy
import json
from types import SimpleNamespace

from kubernetes.client import (
    V1Container,
    V1ContainerState,
    V1ContainerStateWaiting,
    V1ContainerStatus,
    V1Deployment,
    V1DeploymentSpec,
    V1DeploymentStatus,
    V1EnvVar,
    V1LabelSelector,
    V1Namespace,
    V1Node,
    V1ObjectMeta,
    V1PersistentVolumeClaim,
    V1Pod,
    V1PodList,
    V1PodSpec,
    V1PodStatus,
    V1PodTemplateSpec,
)
from kubernetes.client.exceptions import ApiException


def _next(script: list):
    """The next scripted item; the last one stays."""
    return copy.deepcopy(script.pop(0) if len(script) > 1 else script[0])


class FakeCustomObjects:
    """Custom objects in memory; each ``get`` applies the next scripted status of its plural."""

    def __init__(self, cluster: FakeCluster):
        self.cluster = cluster
        self.objects: dict[tuple[str, str, str], dict] = {}
        self.statuses: dict[str, list[dict]] = {}  # plural -> statuses, one per get
        self.listings: dict[str, list[list[dict]]] = {}  # plural -> items, one per list
        self.calls: list[tuple] = []
        self.version = 0

    def _store(self, plural, namespace, body, generation):
        self.version += 1
        body = copy.deepcopy(body)
        body["metadata"].update(
            resourceVersion=str(self.version), generation=generation, uid=f"uid-{self.version}"
        )
        self.objects[(plural, namespace, body["metadata"]["name"])] = body
        return copy.deepcopy(body)

    def create_namespaced_custom_object(self, group, version, namespace, plural, body):
        self.calls.append(("create", group, version, namespace, plural, copy.deepcopy(body)))
        self.cluster.fail_if_scripted("create", plural)
        if (plural, namespace, body["metadata"]["name"]) in self.objects:
            raise ApiException(status=409, reason="AlreadyExists")
        return self._store(plural, namespace, body, 1)

    def get_namespaced_custom_object(self, group, version, namespace, plural, name):
        self.calls.append(("get", group, version, namespace, plural, name))
        self.cluster.fail_if_scripted("get", plural)
        stored = self.objects.get((plural, namespace, name))
        if stored is None:
            raise ApiException(status=404, reason="NotFound")
        script = self.statuses.get(plural, [])
        if script:
            stored["status"] = _next(script)
        return copy.deepcopy(stored)

    def list_namespaced_custom_object(self, group, version, namespace, plural, label_selector=None):
        self.calls.append(("list", group, version, namespace, plural, label_selector))
        return {"items": _next(self.listings.get(plural, [[]]))}

    def replace_namespaced_custom_object(self, group, version, namespace, plural, name, body):
        self.calls.append(("replace", group, version, namespace, plural, copy.deepcopy(body)))
        current = self.objects[(plural, namespace, name)]
        if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
            raise ApiException(status=409, reason="Conflict")
        changed = body.get("spec") != current.get("spec")
        body = {**copy.deepcopy(body), "status": current.get("status", {})}
        return self._store(plural, namespace, body, current["metadata"]["generation"] + changed)

    def delete_namespaced_custom_object(self, group, version, namespace, plural, name, body=None):
        self.calls.append(("delete", group, version, namespace, plural, name))
        if self.objects.pop((plural, namespace, name), None) is None:
            raise ApiException(status=404, reason="NotFound")

    def verbs(self) -> list[tuple[str, str]]:
        """(verb, plural) of every call, in order."""
        return [(call[0], call[4]) for call in self.calls]

    def created(self, plural: str) -> list[dict]:
        """The bodies of every create call for ``plural``."""
        return [call[5] for call in self.calls if call[0] == "create" and call[4] == plural]


class FakeCore:
    """Pods, their logs, namespaces: each list call and each log read returns the next one.

    Also what ``fmnist sweep --apply`` does with the user's credentials: read a PVC (those in
    ``pvcs`` exist) and run a pod to its end (each read reports the next of ``pod_phases``);
    and the Nodes the train step reads (``nodes``, by name).
    """

    def __init__(self, cluster: FakeCluster):
        self.cluster = cluster
        self.pods: list[list[V1Pod]] = [[]]  # the pods each list call sees; the last one stays
        self.logs: dict[str, list[str]] = {}
        self.selectors: list[str] = []
        self.namespace_labels: dict[str, dict[str, str]] = {}
        self.pvcs: set[tuple[str, str]] = set()  # (namespace, name)
        self.pod_phases: list[str] = ["Succeeded"]
        self.created_pods: list[dict] = []
        self.deleted_pods: list[tuple[str, str]] = []  # (namespace, name)
        self.nodes: dict[str, V1Node] = {}
        self.missing_service_accounts: set[str] = set()  # every other name exists

    def list_namespaced_pod(self, namespace, label_selector=None):
        self.selectors.append(label_selector)
        self.cluster.fail_if_scripted("list", "pods")
        return V1PodList(items=_next(self.pods))

    def read_namespaced_pod_log(self, name, namespace, container=None, previous=False):
        self.cluster.fail_if_scripted("get", "pods/log")
        return _next(self.logs.get(name, [""]))

    def read_namespace(self, name):
        labels = self.namespace_labels.get(name, {"kubernetes.io/metadata.name": name})
        return V1Namespace(metadata=V1ObjectMeta(name=name, labels=labels))

    def read_namespaced_service_account(self, name, namespace):
        if name in self.missing_service_accounts:
            raise ApiException(status=404, reason="NotFound")
        return V1ObjectMeta(name=name, namespace=namespace)

    def read_namespaced_persistent_volume_claim(self, name, namespace):
        if (namespace, name) not in self.pvcs:
            raise ApiException(status=404, reason="NotFound")
        return V1PersistentVolumeClaim(metadata=V1ObjectMeta(name=name, namespace=namespace))

    def create_namespaced_pod(self, namespace, body):
        self.created_pods.append(copy.deepcopy(body))
        return body

    def read_namespaced_pod(self, name, namespace):
        return V1Pod(
            metadata=V1ObjectMeta(name=name), status=V1PodStatus(phase=_next(self.pod_phases))
        )

    def delete_namespaced_pod(self, name, namespace):
        self.deleted_pods.append((namespace, name))

    def read_node(self, name):
        self.cluster.fail_if_scripted("get", "nodes")
        if name not in self.nodes:
            raise ApiException(status=404, reason="NotFound")
        return self.nodes[name]


class FakeApps:
    """Deployments: each list call returns the next scripted list."""

    def __init__(self):
        self.deployments: list[list] = [[]]
        self.selectors: list[str] = []

    def list_namespaced_deployment(self, namespace, label_selector=None):
        self.selectors.append(label_selector)
        return SimpleNamespace(items=_next(self.deployments))


class FakeApiClient:
    """``call_api`` for discovery and OpenAPI documents, from ``cluster.served``/``openapi``."""

    def __init__(self, cluster: FakeCluster):
        self.cluster = cluster

    def call_api(self, path, method, **kwargs):
        if path.startswith("/openapi/v3/apis/"):
            document = self.cluster.openapi.get(path.removeprefix("/openapi/v3/apis/"))
        else:
            resources = self.cluster.served.get(path.removeprefix("/apis/"))
            document = (
                None if resources is None else {"resources": [{"name": r} for r in resources]}
            )
        if document is None:
            raise ApiException(status=404, reason="NotFound")
        return SimpleNamespace(data=json.dumps(document).encode())


class FakeCluster:
    """The fake APIs together, with what the cluster serves and failures to inject."""

    def __init__(self):
        self.custom, self.core, self.apps = FakeCustomObjects(self), FakeCore(self), FakeApps()
        self.api_client = FakeApiClient(self)
        self.served = {"kubeflow.org/v1": ["pytorchjobs"], "kubeflow.org/v1beta1": ["experiments"]}
        self.openapi: dict[str, dict] = {}
        self.failures: dict[tuple[str, str], list[ApiException]] = {}

    def fail(self, verb: str, resource: str, *errors: Exception | None) -> None:
        """Make the next calls of ``verb`` on ``resource`` raise these errors, in order.

        A None lets that call through.
        """
        self.failures.setdefault((verb, resource), []).extend(errors)

    def fail_if_scripted(self, verb: str, resource: str) -> None:
        """Raise the next injected error for this call, if any."""
        errors = self.failures.get((verb, resource))
        if errors:
            error = errors.pop(0)
            if error is not None:
                raise error

    def serve_schema(self, api_version: str, kind: str, schema: dict) -> None:
        """Publish ``schema`` (a CRD's openAPIV3Schema) for ``kind`` under ``api_version``."""
        group, version = api_version.split("/")
        document = self.openapi.setdefault(api_version, {"components": {"schemas": {}}})
        gvk = [{"group": group, "version": version, "kind": kind}]
        document["components"]["schemas"][f"{group}.{version}.{kind}"] = {
            **schema,
            "x-kubernetes-group-version-kind": gvk,
        }


def rank0_pod(
    name: str,
    container: str = "pytorch",
    uid: str = "uid-1",
    restarts: int = 0,
    phase: str = "Running",
    waiting: str | None = None,
) -> V1Pod:
    """A training job's rank-0 pod, as the fake's pod lists return it."""
    state = V1ContainerState(waiting=V1ContainerStateWaiting(reason=waiting)) if waiting else None
    status = V1ContainerStatus(
        name=container,
        restart_count=restarts,
        ready=phase == "Running",
        image="trainer",
        image_id="trainer",
        state=state,
    )
    return V1Pod(
        metadata=V1ObjectMeta(name=name, uid=uid),
        status=V1PodStatus(phase=phase, container_statuses=[status]),
    )


# --- KServe: what its controller reports of a predictor --------------------------------
ISVC_URL = "http://fashion-mnist.team-a.example.com"
SOURCE = "internal.serving.kserve.io/storage-initializer-sourceuri"


def ready(generation: int = 1, mode: str = "RawDeployment", **extra) -> dict:
    """An InferenceService status: Ready, at ``generation``, in ``mode``."""
    return {
        "observedGeneration": generation,
        "deploymentMode": mode,
        "url": ISVC_URL,
        "conditions": [{"type": "Ready", "status": "True"}],
        **extra,
    }


def predictor_spec(uri: str) -> V1PodSpec:
    """A predictor pod spec whose STORAGE_URI is ``uri``."""
    env = [V1EnvVar(name="STORAGE_URI", value=uri)]
    return V1PodSpec(containers=[V1Container(name="kserve-container", env=env)])


def annotated(uri: str) -> V1ObjectMeta:
    """Pod metadata with the source-URI annotation KServe's pod mutator writes."""
    return V1ObjectMeta(name="fashion-mnist-predictor-abc", annotations={SOURCE: uri})


def deployment(uri: str, generation=2, observed=2, updated=1, available=1, replicas=1):
    """The predictor Deployment of ``uri``, with the rollout state given."""
    return V1Deployment(
        metadata=V1ObjectMeta(name="fashion-mnist-predictor", generation=generation),
        spec=V1DeploymentSpec(
            replicas=1,
            selector=V1LabelSelector(),
            template=V1PodTemplateSpec(metadata=annotated(uri), spec=predictor_spec(uri)),
        ),
        status=V1DeploymentStatus(
            observed_generation=observed,
            updated_replicas=updated,
            available_replicas=available,
            replicas=replicas,
        ),
    )
