"""Kubeflow Model Registry: register a model that passed the gate, find its versions.

A model is a RegisteredModel (the ``model_name`` parameter); each run that passes the gate
adds a ModelVersion named after the run, whose ModelArtifact holds the model's storage URI
(``pvc://<model_pvc>/<model_name>/<run>`` on a cluster, the model directory locally) and
whose custom properties hold the test metrics, the training recipe and the run id.
On a cluster the artifact also names its pipeline run in the ``model_source_*`` fields of
the KFP <-> Model Registry proposal (kubeflow/pipelines
``proposals/12020-model-registry-integration/README.md``), which the registry UI links to.

Through the ``model-registry`` client (0.3.8 to 0.3.11: the ``v1alpha3`` REST API of Model
Registry v0.2 and v0.3 servers). What is served is recorded the way Kubeflow's Model
Registry <-> KServe integration does it (kubeflow/model-registry v0.3.8
``pkg/inferenceservice-controller/controller.go``): a ServingEnvironment named after the
namespace holds an InferenceService record (registered model, model version), and the
KServe InferenceService carries its ids in the ``modelregistry.kubeflow.org/*`` labels of
``manifests/kustomize/options/controller/overlays/base/params.env``. The record is made
here, before the InferenceService is applied: that controller, given only the model ids,
creates it from ``spec.predictor.model``, which a custom predictor such as ours lacks.

The client sends only the token it is given (components/runtime/registry_credentials.py).
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass
from datetime import datetime, timezone
from urllib.parse import urlparse

from components.runtime.registry_credentials import (
    Credentials,
    RegistryError,
    check_transport,
    client_class,
)

MODEL_FORMAT = "pytorch"
LABEL_PREFIX = "modelregistry.kubeflow.org/"
REGISTERED_MODEL_LABEL = LABEL_PREFIX + "registered-model-id"
MODEL_VERSION_LABEL = LABEL_PREFIX + "model-version-id"
INFERENCE_SERVICE_LABEL = LABEL_PREFIX + "inference-service-id"
URL_ANNOTATION = LABEL_PREFIX + "url"
AUTHOR = "fmnist-pipeline"
# The proposal's fields naming where a version comes from (model-registry's ModelArtifact).
SOURCE_FIELDS = tuple(f"model_source_{part}" for part in ("kind", "class", "group", "name", "id"))
# model.json's training config: the recipe recorded with each version.
RECIPE_KEYS = (
    "epochs",
    "batch_size",
    "lr",
    "momentum",
    "optimizer",
    "scheduler",
    "weight_decay",
    "seed",
)


@dataclass(frozen=True)
class Served:
    """The version an InferenceService serves, by the registry's record, and its URL."""

    version_id: str
    url: str


@dataclass(frozen=True)
class Version:
    """One registered version of a model, with what it was made from."""

    id: str
    name: str
    registered_model_id: str
    uri: str
    created: datetime
    properties: dict
    source: dict  # the artifact's SOURCE_FIELDS that are set

    @property
    def accuracy(self) -> float | None:
        """The test accuracy recorded at registration."""
        return self.properties.get("accuracy")


def _created(milliseconds: str | None) -> datetime:
    return datetime.fromtimestamp(int(milliseconds or 0) / 1000, tz=timezone.utc)


def version_properties(metrics: dict, model_info: dict, run_id: str) -> dict:
    """The custom properties of a new version: metrics, recipe, world size, run id."""
    training = model_info.get("training", {})
    config = training.get("config", {})
    properties = {name: float(metrics[name]) for name in ("accuracy", "loss") if name in metrics}
    properties.update({key: config[key] for key in RECIPE_KEYS if config.get(key) is not None})
    if "world_size" in training:
        properties["world_size"] = int(training["world_size"])
    properties["kfp_run_id"] = run_id
    return properties


def run_source(run_id: str, run_name: str, namespace: str) -> dict:
    """The ``model_source_*`` arguments that name a KFP pipeline run, as the proposal does."""
    return {
        "model_source_kind": "kfp",
        "model_source_class": "pipelinerun",
        "model_source_group": namespace,
        "model_source_name": run_name,
        "model_source_id": run_id,
    }


def format_version(model_info: dict) -> str:
    """The model format's version: the torch release that saved it (``2.9``)."""
    torch = str(model_info.get("versions", {}).get("torch", ""))
    return ".".join(torch.split("+")[0].split(".")[:2]) or "2"


class Registry:
    """A Model Registry server, reached at ``address`` (``http://host:port``)."""

    def __init__(self, address: str, credentials: Credentials | None = None):
        credentials = credentials or Credentials()
        self.address = address.rstrip("/")
        parsed = urlparse(self.address)
        check_transport(self.address, credentials)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "User access token is missing": none needed
                self.client = client_class()(
                    self.address,
                    parsed.port,
                    author=AUTHOR,
                    is_secure=parsed.scheme == "https",
                    user_token=credentials.token or None,
                    custom_ca=credentials.ca_file,
                    log_level=logging.ERROR,
                )
        except Exception as error:  # noqa: BLE001 (aiohttp, the client's StoreError, ...)
            raise RegistryError(
                f"the model registry at {self.address} does not answer: {_reason(error)}"
            ) from None

    def _run(self, call, what: str):
        """``call()``; a failure as RegistryError naming ``what``."""
        try:
            return call()
        except RegistryError:
            raise
        except Exception as error:  # noqa: BLE001
            raise RegistryError(
                f"model registry {self.address}: {what} failed: {_reason(error)}"
            ) from None

    def _run_async(self, coroutine, what: str):
        """``_run`` of a coroutine on the client's event loop."""
        return self._run(lambda: self.client.async_runner(coroutine), what)

    def register(
        self,
        model_name: str,
        version_name: str,
        uri: str,
        model_info: dict,
        properties: dict,
        source: dict,
    ) -> Version:
        """Register ``uri`` as version ``version_name`` of ``model_name``; return it.

        ``source``: the artifact's ``model_source_*`` fields (``run_source``), or none.

        A version of that name that already holds ``uri`` (a retried step) is returned as is;
        one with no artifact yet (a step that failed between the two writes) gets it now.
        """
        existing = self.find(model_name, version_name)
        if existing is not None and not existing.uri:
            self._write_artifact(model_name, existing, uri, model_info, source)
            return self.version(model_name, version_name)
        if existing is not None:
            if existing.uri != uri:
                raise RegistryError(
                    f"model registry {self.address}: {model_name} already has a version "
                    f"{version_name} at {existing.uri}, not {uri}"
                )
            return existing
        self._run(
            lambda: self.client.register_model(
                model_name,
                uri,
                version=version_name,
                model_format_name=MODEL_FORMAT,
                model_format_version=format_version(model_info),
                version_description=f"trained by pipeline run {properties.get('kfp_run_id')}",
                metadata=properties,
                **source,
            ),
            f"registering {model_name} {version_name}",
        )
        return self.version(model_name, version_name)

    def _write_artifact(
        self, model_name: str, version: Version, uri: str, model_info: dict, source: dict
    ):
        """Give ``version`` its ModelArtifact, as ``register_model`` does after the version.

        model-registry 0.3.8 to 0.3.11 ``_client.py``: ``register_model`` creates the version,
        then ``_register_model_artifact`` upserts the artifact on it, named after the model.
        """
        from model_registry.types import ModelArtifact

        artifact = ModelArtifact(
            name=model_name,
            uri=uri,
            model_format_name=MODEL_FORMAT,
            model_format_version=format_version(model_info),
            **source,
        )
        self._run_async(
            self.client._api.upsert_model_version_artifact(artifact, version.id),
            f"writing the artifact of {model_name} {version.name}",
        )

    def find(self, model_name: str, version_name: str) -> Version | None:
        """Version ``version_name`` of ``model_name``, or None if there is none."""
        if self._model(model_name) is None:  # the client raises for an unknown model
            return None
        version = self._run(
            lambda: self.client.get_model_version(model_name, version_name),
            f"looking up {model_name} {version_name}",
        )
        return None if version is None else self._with_artifact(model_name, version)

    def _with_artifact(self, model_name: str, version) -> Version:
        """A client ModelVersion as a Version, with its artifact's URI."""
        artifact = self._run(
            lambda: self.client.get_model_artifact(model_name, version.name),
            f"reading the artifact of {model_name} {version.name}",
        )
        return Version(
            id=version.id,
            name=version.name,
            registered_model_id=version.registered_model_id,
            uri=artifact.uri if artifact else "",
            created=_created(version.create_time_since_epoch),
            properties=dict(version.custom_properties or {}),
            source={
                field: getattr(artifact, field)
                for field in SOURCE_FIELDS
                if artifact and getattr(artifact, field)
            },
        )

    def version(self, model_name: str, version_name: str) -> Version:
        """Version ``version_name`` of ``model_name``; RegistryError naming the known ones."""
        found = self.find(model_name, version_name)
        if found is None:
            known = ", ".join(version.name for version in self.versions(model_name))
            raise RegistryError(
                f"model registry {self.address}: {model_name} has no version {version_name!r}"
                f" (it has: {known or 'none'})"
            )
        return found

    def versions(self, model_name: str) -> list[Version]:
        """Every version of ``model_name``, oldest first; RegistryError if it is unknown."""
        if self._model(model_name) is None:
            raise RegistryError(f"model registry {self.address} has no model named {model_name!r}")
        pages = self._run(
            lambda: list(self.client.get_model_versions(model_name)),
            f"listing the versions of {model_name}",
        )
        found = [self._with_artifact(model_name, version) for version in pages]
        return sorted(found, key=lambda version: version.created)

    def _model(self, model_name: str):
        return self._run(
            lambda: self.client.get_registered_model(model_name), f"looking up {model_name}"
        )

    def serving_record(self, version: Version, namespace: str, service: str) -> str:
        """The id of the record of InferenceService ``namespace/service``, made if missing.

        The ServingEnvironment is named after the namespace, the record after the service.
        A new record is UNDEPLOYED and names no version; an existing one is left as it is,
        until ``record_serving`` says the rollout is done.
        """
        return self._run_async(
            self._ensure_record(version, namespace, service),
            f"looking up the record of {namespace}/{service}",
        )

    async def _ensure_record(self, version: Version, namespace: str, service: str) -> str:
        from mr_openapi import (
            InferenceServiceCreate,
            InferenceServiceState,
            ServingEnvironmentCreate,
        )

        async with self.client._api.get_client() as api:
            environment, record = await _serving_record(api, namespace, service)
            if record is not None:
                return record.id
            if environment is None:
                environment = await api.create_serving_environment(
                    ServingEnvironmentCreate(name=namespace)
                )
            await api.create_inference_service(
                InferenceServiceCreate(
                    name=service,
                    registered_model_id=version.registered_model_id,
                    serving_environment_id=environment.id,
                    desired_state=InferenceServiceState.UNDEPLOYED,
                )
            )
            # The client reads only a 200 answer, and the server answers 201 Created
            # (model-registry 0.3.11's response map; server v0.3.8): look it up.
            _, record = await _serving_record(api, namespace, service)
            return record.id

    def record_serving(self, record_id: str, version: Version, url: str) -> None:
        """Record, once its rollout is done, that the service serves ``version`` at ``url``.

        One update: the version, DEPLOYED, and the ``url`` property the controller writes.
        """
        self._run_async(
            self._deployed(record_id, version, url),
            f"recording record {record_id} as serving {version.name}",
        )

    async def _deployed(self, record_id: str, version: Version, url: str) -> None:
        from mr_openapi import (
            InferenceServiceState,
            InferenceServiceUpdate,
            MetadataStringValue,
            MetadataValue,
        )

        value = MetadataStringValue(string_value=url, metadataType="MetadataStringValue")
        update = InferenceServiceUpdate(
            model_version_id=version.id,
            desired_state=InferenceServiceState.DEPLOYED,
            custom_properties={"url": MetadataValue(value)},
        )
        async with self.client._api.get_client() as api:
            await api.update_inference_service(record_id, update)

    def served(self, namespace: str, service: str) -> Served | None:
        """What the record of ``namespace/service`` says it serves, if there is one."""
        return self._run_async(
            self._served(namespace, service),
            f"looking up what {namespace}/{service} serves",
        )

    async def _served(self, namespace: str, service: str) -> Served | None:
        async with self.client._api.get_client() as api:
            _, record = await _serving_record(api, namespace, service)
        if record is None:
            return None
        url = (record.custom_properties or {}).get("url")
        url = url.actual_instance.string_value if url else ""
        return Served(record.model_version_id, url)


async def _serving_record(api, namespace: str, service: str) -> tuple:
    """(the namespace's ServingEnvironment, the service's record in it); None where missing.

    ``api`` is the client's own connection (model-registry 0.3.x keeps it in ``_api``).
    """
    from mr_openapi.exceptions import NotFoundException

    try:
        environment = await api.find_serving_environment(name=namespace)
    except NotFoundException:
        return None, None
    try:
        return environment, await api.find_inference_service(
            name=service, parent_resource_id=environment.id
        )
    except NotFoundException:
        return environment, None


def serving_metadata(version: Version, record_id: str, address: str) -> tuple[dict, dict]:
    """The labels and annotations that tie an InferenceService to ``version``."""
    labels = {
        REGISTERED_MODEL_LABEL: version.registered_model_id,
        MODEL_VERSION_LABEL: version.id,
        INFERENCE_SERVICE_LABEL: record_id,
    }
    return labels, {URL_ANNOTATION: address}


def _reason(error: Exception) -> str:
    """An exception as one line: its first line, or its type."""
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__
