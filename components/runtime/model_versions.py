"""Model versions: register a run's model in Model Registry, serve a registered version.

The register step and the deploy step of a pipeline with ``model_registry`` set, and
``fmnist models deploy`` (a roll back) all go through here, so a version is served the same
way whether it was just trained or is months old.
"""

from __future__ import annotations

import json
from pathlib import Path

from components.runtime.registry import (
    SOURCE_FIELDS,
    Registry,
    RegistryError,
    Version,
    run_source,
    version_properties,
)
from components.runtime.registry_credentials import Credentials
from components.specs.kinds import INFERENCESERVICE
from components.specs.params import Serving
from trainer.model_dir import CARD_FILE, pvc_uri


def registry_of(serving: Serving) -> Registry:
    """The registry of ``serving``, with the credentials of its mounted Secret, if any."""
    credentials = Credentials.from_dir(insecure=serving.model_registry_insecure)
    return Registry(serving.model_registry, credentials)


def register_run_model(
    serving: Serving, model_dir: str, metrics: dict, target: str, run_id: str, run_name: str
) -> Version:
    """Register the run's model as version ``run_id`` of ``serving.model_name``.

    On a cluster the model is published to the model volume first and the version's URI is
    its ``STORAGE_URI`` there, and the version names its run (id, name, this pod's
    namespace) for the registry UI; locally the URI is the model directory, and there is
    no run in any KFP server to name.
    The registry is asked first, so a registry that does not answer changes nothing.
    """
    registry = registry_of(serving)
    model_info = json.loads((Path(model_dir) / CARD_FILE).read_text())
    properties = version_properties(metrics, model_info, run_id)
    if target == "cluster":
        from components.runtime.kube import current_namespace
        from components.runtime.volumes import publish_model

        source = run_source(run_id, run_name, current_namespace())
        uri = pvc_uri(serving.model_pvc, publish_model(model_dir, serving.model_name, run_id))
    else:
        source, uri = {}, str(Path(model_dir).resolve())
    version = registry.register(serving.model_name, run_id, uri, model_info, properties, source)
    print(
        f"registered {serving.model_name} version {version.name} (id {version.id}) in "
        f"{registry.address}: {uri}, accuracy {properties.get('accuracy', float('nan')):.4f}"
        + (f", from {source_text(version.source)}" if version.source else ""),
        flush=True,
    )
    return version


def source_text(source: dict) -> str:
    """A Version's ``source`` as ``kfp pipelinerun <namespace>/<run name> (<run id>)``."""
    kind, kind_class, group, name, run = (source.get(field, "?") for field in SOURCE_FIELDS)
    return f"{kind} {kind_class} {group}/{name} ({run})"


def deploy_registered(
    serving: Serving, version_name: str, kube=None, namespace: str | None = None, check=None
) -> str:
    """Serve version ``version_name`` of ``serving.model_name`` from the registry; its URL.

    The InferenceService serves the version's URI and carries the registry's ids; only once
    its rollout is done and ``check`` (``kserve.serve``'s post-deploy check) passed does the
    registry record that the service serves the version, and at which URL. A rollout that
    fails, or a model rolled back, leaves the record naming the version that serves.
    """
    from components.runtime.kserve import serve
    from components.runtime.kube import KubeClient, current_namespace
    from components.runtime.registry import serving_metadata

    registry = registry_of(serving)
    version = registry.version(serving.model_name, version_name)
    if not version.uri.startswith("pvc://"):
        raise RegistryError(
            f"{serving.model_name} version {version.name} is stored at {version.uri!r}, not on "
            "a PVC (a local run registered it); only pvc:// versions can be served on a cluster"
        )
    kube = kube or KubeClient.connect()
    namespace = namespace or current_namespace()
    kube.get(INFERENCESERVICE, namespace, serving.model_name)  # the cluster answers: go on
    record = registry.serving_record(version, namespace, serving.model_name)
    metadata = serving_metadata(version, record, registry.address)
    print(f"serving {serving.model_name} version {version.name} (id {version.id})", flush=True)
    url = serve(serving, version.uri, kube, namespace, metadata, check)
    registry.record_serving(record, version, url)
    return url


def check_registered_locally(serving: Serving, version_name: str, dataset_dir: str) -> str:
    """Check a local predictor on the registered version's model directory; its URL."""
    from components.runtime.local_predictor import deploy_local

    version = registry_of(serving).version(serving.model_name, version_name)
    if not Path(version.uri).is_dir():
        raise RegistryError(
            f"{serving.model_name} version {version.name} is at {version.uri!r}, "
            "which is no model directory on this machine"
        )
    return deploy_local(serving, version.uri, dataset_dir)
