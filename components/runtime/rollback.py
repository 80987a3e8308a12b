"""Roll an InferenceService back after its new model failed the post-deploy check.

The rollout of the new model is done when the check runs (components/runtime/kserve.py,
``serve``), so the spec that was serving is put back as a rollout of its own: ``restore``
replaces the spec, labels and annotations, and the step waits, as for any rollout, until
the Deployment (Standard mode) or the revision (Knative) of the old ``STORAGE_URI`` serves
again. The error names what serves then, and why the new model went; with a registry, the
version's id from the restored labels (the registry's record was never moved off it:
components/runtime/model_versions.py writes it only after the check passed).

The check reaches the service at ``status.address.url``: in Standard mode
``http://<name>-predictor.<namespace>.svc.cluster.local`` (kserve v0.15.2
``pkg/controller/v1beta1/inferenceservice/reconcilers/ingress/kube_ingress_reconciler.go``,
``Reconcile``; ``getRawServiceHost`` in ``httproute_reconciler.go``).
"""

from __future__ import annotations

import dataclasses

from components.runtime import kserve
from components.runtime.kube import KubeClient
from components.runtime.registry import MODEL_VERSION_LABEL
from components.runtime.waiting import follow, short_reason
from components.specs.params import Serving


def roll_back(
    kube: KubeClient,
    namespace: str,
    previous: dict | None,
    serving: Serving,
    new_uri: str,
    reason: str,
) -> kserve.DeployFailed:
    """After a failed post-deploy check: put ``previous`` back, wait until it serves; the error.

    The error is one line naming what serves now and why the new model was rolled back. A
    first deploy (``previous`` None) has nothing to go back to: the new service stays, to be
    inspected or deleted by hand (the steps' Role cannot delete InferenceServices).
    """
    what = f"InferenceService {namespace}/{serving.model_name}"
    why = f"the new model {new_uri} failed its post-deploy check: {reason}"
    if previous is None:
        return kserve.DeployFailed(
            f"{what} serves nothing else, so it stays on the new model, which failed its "
            f"post-deploy check ({reason}); kubectl delete inferenceservice "
            f"{serving.model_name} removes it"
        )
    restored = kserve.restore(kube, previous, "post-deploy check failed")
    if restored is None:
        return kserve.DeployFailed(f"{what} could not be rolled back (see the log); {why}")
    old = kserve.storage_uri_of(previous) or "the spec that was serving"
    version = (previous["metadata"].get("labels") or {}).get(MODEL_VERSION_LABEL)
    old += f" (model version id {version})" if version else ""
    try:
        wait_restored(kube, restored, serving)
    except Exception as error:  # noqa: BLE001 - one line: the reason of the wait that failed
        again = short_reason(error).splitlines()[0]
        return kserve.DeployFailed(
            f"{what} was rolled back to {old}, not serving yet ({again}); {why}"
        )
    return kserve.DeployFailed(f"{what} serves {old} again; {why}")


def wait_restored(kube: KubeClient, restored: dict, serving: Serving) -> None:
    """Wait until the put-back spec of ``restored`` serves, as a rollout of its own."""
    uri = kserve.storage_uri_of(restored)
    if uri is None:  # a service taken over, without our STORAGE_URI: nothing to wait for
        return
    replicas = restored["spec"].get("predictor", {}).get("minReplicas", 1)
    served = dataclasses.replace(
        serving,
        serving_min_replicas=replicas,
        serving_max_replicas=max(replicas, serving.serving_max_replicas),
    )
    generation = restored["metadata"].get("generation", 1)
    namespace = restored["metadata"]["namespace"]
    watch = kserve.RolloutWatch(kube, namespace, served, uri, generation)
    follow(watch, serving.serving_timeout_seconds, poll_seconds=kserve.POLL_SECONDS)
