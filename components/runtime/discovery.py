"""What the cluster serves, asked the cluster, never guessed from a version string.

Which training job API, which Trainer generation, which KServe naming:

- Job API: the discovery documents of ``kubeflow.org/v1`` (``pytorchjobs``) and
  ``trainer.kubeflow.org/v1alpha1`` (``trainjobs``).
- Trainer generation: the served TrainJob schema has ``spec.podTemplateOverrides``
  (v2.1) or ``spec.runtimePatches`` (v2.2 and later).
- Kueue API version: ``kueue.x-k8s.io/v1beta2`` when served, else ``v1beta1``.
- KServe naming: the served InferenceService schema gained ``spec.predictor.storageUris``
  in v0.16.0, the release that renamed the deployment modes to Standard/Knative.

The fields and versions looked for, and their upstream sources, are in
``components/specs/compat.py``.
"""

from __future__ import annotations

import functools

from components.runtime.kube import KubeClient
from components.specs.compat import (
    DEFAULT_TRAINER_GENERATION,
    KSERVE_NEW_NAMES_FIELD,
    KUEUE_VERSIONS,
    TRAINER_GENERATION_FIELDS,
)
from components.specs.kinds import INFERENCESERVICE, PYTORCHJOB, TRAINJOB, CustomResource, Target

INSTALL_HINT = (
    "install the Kubeflow Training Operator v1.9 (PyTorchJob) or Kubeflow Trainer v2 "
    "(TrainJob): docs/install.md, step 2"
)


class ClusterMismatch(RuntimeError):
    """The cluster does not serve what the parameters need."""


def serves(kube: KubeClient, resource: CustomResource) -> bool:
    """Whether the API server serves ``resource`` (its CRD is installed)."""
    return resource.plural in (kube.served_resources(resource.api_version) or set())


def choose_job_api(kube: KubeClient, job_api: str) -> str:
    """``pytorchjob`` or ``trainjob``: the one asked for, or for ``auto`` the one served.

    PyTorchJob wins when both are served.

    Raises:
        ClusterMismatch: the API asked for, or both, are not served.
    """
    wanted = ("pytorchjob", "trainjob") if job_api == "auto" else (job_api,)
    resources = {"pytorchjob": PYTORCHJOB, "trainjob": TRAINJOB}
    for api in wanted:
        if serves(kube, resources[api]):
            return api
    if job_api == "auto":
        missing = f"neither {_crd(PYTORCHJOB)} nor {_crd(TRAINJOB)}"
    else:
        missing = f"no {_crd(resources[job_api])} (job_api={job_api})"
    raise ClusterMismatch(f"this cluster serves {missing}; {INSTALL_HINT}")


def find_target(kube: KubeClient, job_api: str) -> Target:
    """The job API to use (``auto`` asks the cluster) and, for TrainJob, its generation."""
    api = choose_job_api(kube, job_api)
    generation = trainjob_generation(kube) if api == "trainjob" else DEFAULT_TRAINER_GENERATION
    return Target(api, generation)


@functools.cache  # one discovery per client: what a cluster serves holds for a step's life
def kueue_resource(kube: KubeClient, resource: CustomResource) -> CustomResource:
    """``resource`` (a Kueue kind) at the newest version served; as given if none is."""
    for version in KUEUE_VERSIONS:
        candidate = resource.at(version)
        if serves(kube, candidate):
            return candidate
    return resource


def _crd(resource: CustomResource) -> str:
    return f"{resource.plural}.{resource.group} ({resource.api_version})"


def _schema(kube: KubeClient, resource: CustomResource) -> dict:
    document = kube.openapi_schema(resource.api_version)
    for schema in document.get("components", {}).get("schemas", {}).values():
        kinds = schema.get("x-kubernetes-group-version-kind", [])
        if any(item.get("kind") == resource.kind for item in kinds):
            return schema
    raise ClusterMismatch(f"the API server publishes no schema for {resource.kind}")


def _has(schema: dict, *path: str) -> bool:
    for name in path:
        schema = schema.get("properties", {}).get(name)
        if schema is None:
            return False
    return True


def trainjob_generation(kube: KubeClient) -> str:
    """``v2.1`` (podTemplateOverrides) or ``v2.2`` (runtimePatches, v2.2 and later)."""
    schema = _schema(kube, TRAINJOB)
    for generation, field in TRAINER_GENERATION_FIELDS.items():
        if _has(schema, "spec", field):
            return generation
    fields = " nor ".join(TRAINER_GENERATION_FIELDS.values())
    raise ClusterMismatch(f"the served TrainJob schema has neither {fields}")


def kserve_uses_legacy_names(kube: KubeClient) -> bool:
    """Whether the installed KServe predates 0.16 (RawDeployment/Serverless naming)."""
    return not _has(_schema(kube, INFERENCESERVICE), *KSERVE_NEW_NAMES_FIELD)
