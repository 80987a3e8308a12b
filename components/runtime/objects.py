"""Objects a step owns: named after the run, created once, adopted by a retried step.

A step's job, Experiment or service is named from the pipeline run's id, so a retried
step (KFP ``set_retry``, a restarted step pod) finds what its first attempt created.
The object carries a hash of the spec the step meant to create; a live object of that
name with another hash is not ours to adopt, and the step says so instead of guessing.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable

from kubernetes.client.exceptions import ApiException

from components.runtime.kube import KubeClient
from components.specs.kinds import CustomResource

SPEC_HASH_ANNOTATION = "fmnist-pipeline/spec-hash"
RUN_CHARACTERS = 20  # of the run id: enough to tell runs apart, short enough for pod names


class NotOurs(RuntimeError):
    """An object of the step's name exists with a spec the step did not ask for."""


class Refused(RuntimeError):
    """The apiserver, or an admission webhook, refused to create the object."""


REFUSALS = (400, 403, 422)  # a webhook's denial (Katib: 400), RBAC, a schema's Invalid


def refusal(exc: ApiException) -> str:
    """The apiserver's own message of a refusal (its Status body), else the HTTP reason."""
    try:
        return json.loads(exc.body)["message"]
    except (TypeError, ValueError, KeyError):
        return f"{exc.status} {exc.reason}"


def run_object_name(prefix: str, run_id: str) -> str:
    """``<prefix>-<first 20 letters and digits of the run id>``: a DNS label per run."""
    run = "".join(ch for ch in run_id.lower() if ch.isalnum())[:RUN_CHARACTERS] or "run"
    return f"{prefix}-{run}"


def spec_hash(body: dict) -> str:
    """A short hash of what the step asks for: labels and spec."""
    wanted = {"labels": body["metadata"].get("labels", {}), "spec": body["spec"]}
    text = json.dumps(wanted, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def with_spec_hash(body: dict) -> dict:
    """``body`` with its spec hash annotation."""
    annotations = {**body["metadata"].get("annotations", {}), SPEC_HASH_ANNOTATION: spec_hash(body)}
    return {**body, "metadata": {**body["metadata"], "annotations": annotations}}


def create_or_adopt(
    kube: KubeClient,
    resource: CustomResource,
    body: dict,
    before_create: Callable[[], None] = lambda: None,
) -> tuple[dict, bool]:
    """Create ``body`` (after ``before_create``), or adopt the live object it would be.

    Returns:
        (the live object, whether it was adopted).

    Raises:
        NotOurs: an object of that name exists with another spec.
        Refused: the apiserver or a webhook refused it (one line: their message).
    """
    body = with_spec_hash(body)
    namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
    live = kube.get(resource, namespace, name)
    if live is None:
        before_create()
        try:
            return kube.create(resource, namespace, body), False
        except ApiException as exc:
            if exc.status in REFUSALS:
                raise Refused(
                    f"{resource.kind} {namespace}/{name} was refused: {refusal(exc)}"
                ) from None
            if exc.status != 409:
                raise
        live = kube.get(resource, namespace, name)  # created by a parallel attempt
    _check_ours(resource, live, body)
    return live, True


def _check_ours(resource: CustomResource, live: dict | None, body: dict) -> None:
    meta = body["metadata"]
    found = ((live or {}).get("metadata", {}).get("annotations") or {}).get(SPEC_HASH_ANNOTATION)
    if live is None or found != meta["annotations"][SPEC_HASH_ANNOTATION]:
        raise NotOurs(
            f"a {resource.kind} {meta['namespace']}/{meta['name']} exists with another spec "
            f"(spec hash {found or 'none'}, "
            f"this step's {meta['annotations'][SPEC_HASH_ANNOTATION]});"
            f" it was not created by this run's step: delete it "
            f"(kubectl delete {resource.plural}.{resource.group} -n {meta['namespace']} "
            f"{meta['name']}) or rerun the pipeline"
        )
