"""Getting a namespace ready for ``fmnist sweep --apply``: check it, stage the packed data.

A pipeline run stages its data itself (the tune step copies the packed dataset into the
run's workspace). A sweep started from the shell has no step to do that, so a short pod
from the trainer image packs FashionMNIST onto the workspace PVC (``train/data``, where
every trial reads it), unless it is already there (the pod:
``components/specs/staging_pod.py``). These calls run with the user's
credentials, not the pipeline's service account.
"""

from __future__ import annotations

import secrets

from kubernetes.client.exceptions import ApiException

from components.runtime.discovery import kueue_resource
from components.runtime.kube import KubeClient
from components.runtime.waiting import wait_until
from components.specs.kinds import LOCALQUEUE
from components.specs.params import DataSlice
from components.specs.staging_pod import staging_pod

KATIB_INJECTION_LABEL = "katib.kubeflow.org/metrics-collector-injection"
STAGE_TIMEOUT_SECONDS = 900


class NamespaceNotReady(RuntimeError):
    """The namespace lacks what the Experiment needs."""


class StagingFailed(RuntimeError):
    """The staging pod did not succeed."""


def check_namespace(kube: KubeClient, namespace: str, queue: str, pvc: str) -> None:
    """The namespace has the LocalQueue, the workspace PVC and Katib's injection label.

    Raises:
        NamespaceNotReady: naming everything that is missing and how to add it.
    """
    missing = []
    if kube.get(kueue_resource(kube, LOCALQUEUE), namespace, queue) is None:
        missing.append(f"the Kueue LocalQueue {queue} (k8s/kueue, with this namespace)")
    try:
        kube.core_api.read_namespaced_persistent_volume_claim(pvc, namespace)
    except ApiException as exc:
        if exc.status != 404:
            raise
        missing.append(f"the PVC {pvc} (k8s/storage, with this namespace)")
    labels = _readable_labels(kube, namespace)
    if labels is not None and labels.get(KATIB_INJECTION_LABEL) != "enabled":
        missing.append(
            f"the label {KATIB_INJECTION_LABEL}=enabled (kubectl label namespace {namespace} "
            f"{KATIB_INJECTION_LABEL}=enabled): without it Katib collects no metrics"
        )
    if missing:
        raise NamespaceNotReady(
            f"namespace {namespace} is not ready for the sweep; it lacks: "
            + "; ".join(missing)
            + " (see docs/sweeps.md)"
        )


def _readable_labels(kube: KubeClient, namespace: str) -> dict | None:
    """The namespace's labels; None (and a note) where the user may not read namespaces."""
    try:
        return kube.namespace_labels(namespace)
    except ApiException as exc:
        if exc.status != 403:
            raise
    print(f"note: cannot read namespace {namespace} (403); not checking its Katib label")
    return None


def run_staging_pod(
    kube: KubeClient, namespace: str, pvc: str, image: str, data: DataSlice
) -> None:
    """Run the staging pod (``staging_pod``) to its end, print its log, delete it.

    Raises:
        StagingFailed: the pod failed or did not finish in STAGE_TIMEOUT_SECONDS.
    """
    name = f"fmnist-stage-{secrets.token_hex(3)}"
    kube.core_api.create_namespaced_pod(namespace, staging_pod(name, namespace, pvc, image, data))
    print(f"staging the data on PVC {pvc} with pod {namespace}/{name}", flush=True)

    def finished():
        phase = kube.core_api.read_namespaced_pod(name, namespace).status.phase
        return phase if phase in ("Succeeded", "Failed") else None

    try:
        phase = wait_until(
            finished,
            what=f"pod {namespace}/{name}",
            timeout_seconds=STAGE_TIMEOUT_SECONDS,
            poll_seconds=3,
        )
        log = kube.pod_log(namespace, name, "stage")
    except TimeoutError as exc:
        raise StagingFailed(str(exc)) from None
    finally:
        kube.core_api.delete_namespaced_pod(name, namespace)
    print(log.rstrip(), flush=True)
    if phase != "Succeeded":
        raise StagingFailed(f"staging pod {namespace}/{name} failed:\n{log}")
