"""What the validate steps check beyond the parameters' ranges: that the cluster can run them.

On a cluster, before any data is packed: the training job API asked for (or, for
``auto``, one of the two) is served, and the run's namespace is one where KServe can
mount the model. Locally there is nothing more to check.
"""

from __future__ import annotations

from kubernetes.client.exceptions import ApiException

from components.runtime.discovery import choose_job_api
from components.runtime.kube import KubeClient, current_namespace
from components.specs.params import Serving, TrainingJob

CONTROL_PLANE_LABEL = "control-plane"


class UnusableCluster(RuntimeError):
    """The cluster (or the run's namespace) cannot run these parameters."""


def check_training_on_cluster(job: TrainingJob, kube: KubeClient | None = None) -> str:
    """The job API the train step will use; raises ClusterMismatch when none is served."""
    return choose_job_api(kube or KubeClient.connect(), job.job_api)


def check_serving_on_cluster(serving: Serving, kube: KubeClient | None = None) -> str:
    """The run's namespace, if KServe can serve a model there.

    KServe's pod mutator skips namespaces labelled ``control-plane`` (kserve v0.15.2
    ``config/webhook/manifests.yaml``: the pod mutator's ``namespaceSelector``), so a
    predictor there would never get its model volume. A full Kubeflow install labels its
    ``kubeflow`` namespace so.

    Raises:
        UnusableCluster: the namespace carries that label, its labels cannot be read, or it
            has no ServiceAccount ``serving_service_account``.
    """
    kube = kube or KubeClient.connect()
    namespace = current_namespace()
    try:
        labels = kube.namespace_labels(namespace)
    except ApiException as exc:
        raise UnusableCluster(
            f"cannot read the labels of namespace {namespace} ({exc.status} {exc.reason}); "
            "apply k8s/rbac, whose Role lets the steps read their own namespace"
        ) from None
    account = serving.serving_service_account
    if not kube.has_service_account(namespace, account):
        raise UnusableCluster(
            f"namespace {namespace} has no ServiceAccount {account} for the predictor; apply "
            "k8s/rbac (it makes fmnist-predictor), or set serving_service_account to one "
            "that exists"
        )
    if CONTROL_PLANE_LABEL in labels:
        raise UnusableCluster(
            f"namespace {namespace} is labelled {CONTROL_PLANE_LABEL}="
            f"{labels[CONTROL_PLANE_LABEL]}: KServe's pod mutator skips such namespaces, so "
            f"the predictor of {serving.model_name} would never get its model; run the "
            "pipeline in a profile namespace (multi-user Kubeflow) or another namespace"
        )
    return namespace
