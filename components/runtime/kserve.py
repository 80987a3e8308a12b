"""Serve a model with KServe: publish it, apply the InferenceService, wait until it serves.

The run's workspace is deleted with the run, so the model directory is copied onto the
model volume, which outlives it, at a path unique to the run; the service reads it through
its ``STORAGE_URI`` (trainer/model_dir.py says where each of these is).

Ready is not enough on a redeploy: in Standard (raw) mode KServe copies
``observedGeneration`` from the predictor Deployment and keeps Ready=True while the old
pod still serves (kserve v0.15.2 ``pkg/apis/serving/v1beta1/inference_service_status.go``,
``PropagateRawStatus``). So the step waits for the Deployment that carries the new
STORAGE_URI to finish its rollout; in Knative mode, for the latest created revision to be
the latest ready one and to take all the traffic. A new predictor that cannot start
(crash loop, image pull error) fails the step with the reason and its last log lines.

With a post-deploy check (components/runtime/post_deploy.py), a model that serves but
fails it is rolled back (components/runtime/rollback.py).

The deployment mode annotation must not change on an existing service: KServe's webhook
rejects any value that differs from ``status.deploymentMode`` (kserve
``pkg/apis/serving/v1beta1/inference_service_validation.go``, ``validateDeploymentMode``).
"""

from __future__ import annotations

from collections.abc import Callable

from components.runtime.discovery import kserve_uses_legacy_names
from components.runtime.kube import KubeClient, apply, current_namespace
from components.runtime.post_deploy import CheckFailed
from components.runtime.signals import terminate_on_sigterm
from components.runtime.volumes import publish_model
from components.runtime.waiting import condition_summary, follow, short_reason, true_conditions
from components.specs.compat import canonical_deployment_mode, deployment_mode_name
from components.specs.inferenceservice import (
    MANAGED_BY,
    MANAGED_BY_LABEL,
    PREDICTOR_CONTAINER,
    inference_service,
)
from components.specs.kinds import INFERENCESERVICE
from components.specs.params import Serving
from trainer.model_dir import pvc_uri

POLL_SECONDS = 5.0
ISVC_LABEL = "serving.kserve.io/inferenceservice"  # on the predictor's Deployment and pods
SOURCE_URI_ANNOTATION = "internal.serving.kserve.io/storage-initializer-sourceuri"
# Container states from which a predictor does not recover by waiting.
STUCK_REASONS = frozenset(
    {
        "CrashLoopBackOff",
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
    }
)
LOG_LINES = 20


class DeployFailed(RuntimeError):
    """The new model cannot serve, or the request cannot be applied."""


def mode_annotation(serving: Serving, live: dict | None, legacy: bool) -> str:
    """The deployment mode to write: the live service's, in the installed KServe's naming.

    Raises:
        DeployFailed: the live service runs in another mode than the one asked for.
    """
    recorded = ((live or {}).get("status") or {}).get("deploymentMode")
    if not recorded:
        return deployment_mode_name(serving.mode, legacy)
    current = canonical_deployment_mode(recorded)
    if current != serving.mode:
        name = live["metadata"]["name"]
        raise DeployFailed(
            f"InferenceService {live['metadata']['namespace']}/{name} runs in {recorded} "
            f"mode, and KServe cannot change the mode of an existing service; deploy with "
            f"deployment_mode={current}, or delete it first (kubectl delete "
            f"inferenceservice {name}) to switch to {serving.deployment_mode}"
        )
    return deployment_mode_name(recorded, legacy)


class RolloutWatch:
    """One poll of a deploy: has the new model taken over, or can it never start?"""

    def __init__(
        self, kube: KubeClient, namespace: str, serving: Serving, storage_uri: str, generation: int
    ):
        self.kube, self.namespace, self.serving = kube, namespace, serving
        self.storage_uri, self.generation, self.last = storage_uri, generation, None
        self.name = serving.model_name

    def check(self) -> dict | None:
        """The service once the new model serves; None meanwhile; raises if it cannot start."""
        isvc = self.kube.get(INFERENCESERVICE, self.namespace, self.name)
        if isvc is None:
            raise DeployFailed(f"InferenceService {self.namespace}/{self.name} disappeared")
        self.last = isvc
        self._check_predictor_pods()
        failure = _model_failure(isvc)
        if failure:
            raise DeployFailed(f"{self.what}: {failure}.\n{self.describe()}")
        served = (
            self._standard_done()
            if self.serving.mode == "Standard"
            else _knative_done(isvc, self.generation)
        )
        return isvc if served and "Ready" in true_conditions(isvc) else None

    @property
    def what(self) -> str:
        """``InferenceService ns/name``."""
        return f"InferenceService {self.namespace}/{self.name}"

    def describe(self) -> str:
        """The service's conditions."""
        return f"Conditions:\n{condition_summary(self.last)}"

    def _standard_done(self) -> bool:
        selector = f"{ISVC_LABEL}={self.name},component=predictor"
        new = [
            d
            for d in self.kube.list_deployments(self.namespace, selector)
            if _serves(d.spec.template.metadata, d.spec.template.spec, self.storage_uri)
        ]
        replicas = self.serving.serving_min_replicas
        return bool(new) and all(_rolled_out(deployment, replicas) for deployment in new)

    def _check_predictor_pods(self) -> None:
        for pod in self.kube.list_pods(self.namespace, f"{ISVC_LABEL}={self.name}"):
            if not _serves(pod.metadata, pod.spec, self.storage_uri):
                continue  # an old pod, going away
            for status in pod.status.container_statuses or []:
                reason = _stuck(status)
                if status.name == PREDICTOR_CONTAINER and reason:
                    log = self._log(pod.metadata.name, bool(status.restart_count))
                    raise DeployFailed(
                        f"{self.what}: the new predictor pod {pod.metadata.name} cannot start: "
                        f"{reason}\nLast lines of its log:\n{log}"
                    )

    def _log(self, pod: str, previous: bool) -> str:
        try:
            text = self.kube.pod_log(self.namespace, pod, PREDICTOR_CONTAINER, previous)
        except Exception:  # noqa: BLE001 - the reason above is the message; the log is extra
            return "(not available)"
        return "\n".join(text.splitlines()[-LOG_LINES:]) or "(empty)"


def _serves(metadata, pod_spec, storage_uri: str) -> bool:
    """Whether a pod (or pod template) runs the predictor for this STORAGE_URI.

    KServe records the URI in an annotation; its pod mutator then rewrites the container's
    STORAGE_URI to /mnt/models in the pod (kserve v0.15.2 ``pkg/constants/constants.go``
    ``StorageInitializerSourceUriInternalAnnotationKey``, ``pkg/webhook/admission/pod/
    storage_initializer_injector.go``), so a pod is known by the annotation.
    """
    annotations = (metadata.annotations if metadata else None) or {}
    if annotations.get(SOURCE_URI_ANNOTATION):
        return annotations[SOURCE_URI_ANNOTATION] == storage_uri
    for container in pod_spec.containers or []:
        if container.name == PREDICTOR_CONTAINER:
            return any(
                env.name == "STORAGE_URI" and env.value == storage_uri
                for env in container.env or []
            )
    return False


def _rolled_out(deployment, min_replicas: int = 1) -> bool:
    """Every replica of the Deployment runs the new template, and at least ``min_replicas``.

    KServe leaves the replicas of an HPA-scaled Deployment unset (1) and lets the HPA raise
    them to minReplicas later (kserve v0.15.2 pkg/controller/v1beta1/inferenceservice/
    reconcilers/deployment/deployment_reconciler.go), so the Deployment alone would call one
    replica of two "rolled out".
    """
    status = deployment.status
    desired = max(deployment.spec.replicas or 1, min_replicas)
    return (
        (status.observed_generation or 0) >= (deployment.metadata.generation or 0)
        and (status.updated_replicas or 0) == desired
        and (status.available_replicas or 0) == desired
        and (status.replicas or 0) == desired
    )


def _stuck(status) -> str | None:
    waiting = status.state.waiting if status.state else None
    if waiting and waiting.reason in STUCK_REASONS:
        return f"{waiting.reason}: {waiting.message or ''}".strip()
    terminated = status.state.terminated if status.state else None
    if terminated and terminated.exit_code:
        return f"exited with code {terminated.exit_code} ({terminated.reason or 'Error'})"
    return None


def _knative_done(isvc: dict, generation: int) -> bool:
    status = isvc.get("status", {})
    predictor = status.get("components", {}).get("predictor", {})
    ready = predictor.get("latestReadyRevision")
    traffic = sum(
        item.get("percent", 0)
        for item in predictor.get("traffic", [])
        if item.get("revisionName") == ready
    )
    return (
        (status.get("observedGeneration") or 0) >= generation
        and bool(ready)
        and predictor.get("latestCreatedRevision") == ready
        and traffic == 100
    )


def _model_failure(isvc: dict) -> str | None:
    """Why the model can never become ready (failed to load, revision failed), else None."""
    model_status = isvc.get("status", {}).get("modelStatus", {})
    if model_status.get("states", {}).get("targetModelState") == "FailedToLoad":
        info = model_status.get("lastFailureInfo", {})
        return f"model failed to load: {info.get('reason', '?')}: {info.get('message', '')}"
    for condition in isvc.get("status", {}).get("conditions", []):
        if condition.get("reason") == "RevisionFailed" and condition.get("status") == "False":
            return f"revision failed: {condition.get('message', '')}"
    return None


def deploy_to_kserve(
    serving: Serving,
    model_dir: str,
    run_id: str,
    kube: KubeClient | None = None,
    check: Callable[[str], object] | None = None,
) -> str:
    """Publish the model, apply the InferenceService, wait until it serves; return its URL.

    ``check`` is ``serve``'s post-deploy check.
    """
    store_path = publish_model(model_dir, serving.model_name, run_id)
    return serve(serving, pvc_uri(serving.model_pvc, store_path), kube, check=check)


def serve(
    serving: Serving,
    storage_uri: str,
    kube: KubeClient | None = None,
    namespace: str | None = None,
    metadata: tuple[dict, dict] = ({}, {}),
    check: Callable[[str], object] | None = None,
) -> str:
    """Apply the InferenceService serving ``storage_uri``, wait until it serves; its URL.

    ``metadata`` is the labels and annotations to add (a registered version's ids). A
    rollout that fails, times out or is stopped puts back the spec that was serving.
    ``check``, the post-deploy check, is called with the cluster-local URL once the rollout
    is done; a ``CheckFailed`` rolls the service back (``roll_back``).
    """
    kube = kube or KubeClient.connect()
    namespace = namespace or current_namespace()
    live = kube.get(INFERENCESERVICE, namespace, serving.model_name)
    check_ours(live, serving)
    annotation = mode_annotation(serving, live, kserve_uses_legacy_names(kube))
    body = inference_service(
        serving=serving, namespace=namespace, storage_uri=storage_uri, mode_annotation=annotation
    )
    labels, annotations = metadata
    body["metadata"]["labels"].update(labels)
    body["metadata"]["annotations"].update(annotations)
    applied = apply(kube, INFERENCESERVICE, body, live)
    print(
        f"applied InferenceService {namespace}/{serving.model_name} ({annotation}), "
        f"serving {storage_uri}",
        flush=True,
    )
    generation = applied["metadata"].get("generation", 1)
    watch = RolloutWatch(kube, namespace, serving, storage_uri, generation)
    try:
        with terminate_on_sigterm():
            ready = follow(watch, serving.serving_timeout_seconds, poll_seconds=POLL_SECONDS)
            if check is not None:
                check(cluster_url(ready))
    except CheckFailed as failed:
        from components.runtime.rollback import roll_back

        raise roll_back(kube, namespace, live, serving, storage_uri, str(failed)) from None
    except BaseException:
        if live is not None:
            restore(kube, live)
        raise
    url = ready["status"].get("url", "")
    print(f"{watch.what} serves the new model at {url}", flush=True)
    return url


def check_ours(live: dict | None, serving: Serving) -> None:
    """Refuse to replace an InferenceService this project did not create, unless told to.

    Raises:
        DeployFailed: ``live`` lacks our label and ``take_over_service`` is not set.
    """
    labels = (live or {}).get("metadata", {}).get("labels") or {}
    if live is None or labels.get(MANAGED_BY_LABEL) == MANAGED_BY or serving.take_over_service:
        return
    raise DeployFailed(
        f"InferenceService {live['metadata']['namespace']}/{serving.model_name} exists and was "
        f"not created by this project (no label {MANAGED_BY_LABEL}={MANAGED_BY}); deploy under "
        "another model_name, or set take_over_service=true to replace it"
    )


def cluster_url(isvc: dict) -> str:
    """The address a pod in the cluster reaches the service at: ``status.address.url``.

    ``status.url`` when KServe gives no cluster-local address.
    """
    status = isvc.get("status") or {}
    return ((status.get("address") or {}).get("url")) or status.get("url", "")


def restore(kube: KubeClient, previous: dict, why: str = "rollout failed") -> dict | None:
    """Put back ``previous``, the service as it was before the deploy, and say so in one line.

    Its spec, labels and annotations return; a restore that fails is said, not raised.
    Returns the service as put back, or None.
    """
    namespace, name = previous["metadata"]["namespace"], previous["metadata"]["name"]
    what = f"InferenceService {namespace}/{name}"
    try:
        current = kube.get(INFERENCESERVICE, namespace, name)
        if current is None:
            print(f"{why}; {what} is gone, nothing to restore", flush=True)
            return None
        metadata = {
            **current["metadata"],
            "labels": previous["metadata"].get("labels") or {},
            "annotations": previous["metadata"].get("annotations") or {},
        }
        body = {key: previous[key] for key in ("apiVersion", "kind") if key in previous}
        restored = kube.replace(
            INFERENCESERVICE,
            namespace,
            name,
            {**body, "metadata": metadata, "spec": previous["spec"]},
        )
    except Exception as error:  # noqa: BLE001 - the rollout's failure is the step's error
        print(f"{why}; could not restore {what}: {short_reason(error)}", flush=True)
        return None
    print(
        f"{why}; restored {what} to the spec that was serving "
        f"({storage_uri_of(previous) or 'its previous model'})",
        flush=True,
    )
    return restored


def storage_uri_of(isvc: dict) -> str | None:
    """The STORAGE_URI the service's predictor container serves, if it names one."""
    for container in isvc.get("spec", {}).get("predictor", {}).get("containers") or []:
        if container.get("name") == PREDICTOR_CONTAINER:
            env = {item.get("name"): item.get("value") for item in container.get("env") or []}
            return env.get("STORAGE_URI")
    return None
