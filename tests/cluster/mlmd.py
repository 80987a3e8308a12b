"""Read what Kubeflow Pipelines recorded of a run in ML Metadata, over MLMD's gRPC API.

KFP v2 keeps a run's artifacts in MLMD: the launcher records each output artifact with its URI
and, for Metrics and ClassificationMetrics, the values as custom properties (kubeflow/pipelines
2.15.0 backend/src/v2/metadata/client.go ``RecordArtifact``; the run is a context of type
``system.PipelineRun`` named by the run id, ``GetPipelineFromExecution``/``getOrInsertContext``).
The KFP UI reads them from there; so does this module.

ml-metadata's own Python client cannot sit beside kfp (it pins protobuf<5), so the few MLMD
messages used here are declared in code, with the names and field numbers of MLMD's
``ml_metadata/proto/metadata_store.proto`` and ``metadata_store_service.proto`` (the copy in
kubeflow/pipelines 2.15.0 third_party/ml-metadata; ml-metadata 1.14.0 is the server of KFP
2.15's manifests). Fields not declared are kept as unknown fields and never read.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc
from google.protobuf import (
    descriptor_pb2,
    descriptor_pool,
    json_format,
    message_factory,
    struct_pb2,
)

SERVICE = "/ml_metadata.MetadataStoreService/"
RUN_CONTEXT_TYPE = "system.PipelineRun"
_F = descriptor_pb2.FieldDescriptorProto

# message -> [(field, number, type, label, message type)]; label "r" repeated, "m" a map
_MESSAGES = {
    "Value": [
        ("int_value", 1, _F.TYPE_INT64, "", ""),
        ("double_value", 2, _F.TYPE_DOUBLE, "", ""),
        ("string_value", 3, _F.TYPE_STRING, "", ""),
        ("struct_value", 4, _F.TYPE_MESSAGE, "", ".google.protobuf.Struct"),
        ("bool_value", 6, _F.TYPE_BOOL, "", ""),
    ],
    "Artifact": [
        ("id", 1, _F.TYPE_INT64, "", ""),
        ("type_id", 2, _F.TYPE_INT64, "", ""),
        ("uri", 3, _F.TYPE_STRING, "", ""),
        ("custom_properties", 5, _F.TYPE_MESSAGE, "m", ".ml_metadata.Value"),
        ("name", 7, _F.TYPE_STRING, "", ""),
        ("type", 8, _F.TYPE_STRING, "", ""),
    ],
    "Context": [
        ("id", 1, _F.TYPE_INT64, "", ""),
        ("name", 3, _F.TYPE_STRING, "", ""),
    ],
    "GetContextByTypeAndNameRequest": [
        ("type_name", 1, _F.TYPE_STRING, "", ""),
        ("context_name", 2, _F.TYPE_STRING, "", ""),
    ],
    "GetContextByTypeAndNameResponse": [
        ("context", 1, _F.TYPE_MESSAGE, "", ".ml_metadata.Context"),
    ],
    "GetArtifactsByContextRequest": [("context_id", 1, _F.TYPE_INT64, "", "")],
    "GetArtifactsByContextResponse": [
        ("artifacts", 1, _F.TYPE_MESSAGE, "r", ".ml_metadata.Artifact"),
        ("next_page_token", 2, _F.TYPE_STRING, "", ""),
    ],
}


def _message_classes() -> dict[str, type]:
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(struct_pb2.DESCRIPTOR.serialized_pb)
    file = descriptor_pb2.FileDescriptorProto(
        name="fmnist_tests/mlmd_subset.proto",
        package="ml_metadata",
        syntax="proto2",
        dependency=["google/protobuf/struct.proto"],
    )
    for name, fields in _MESSAGES.items():
        message = file.message_type.add(name=name)
        for field, number, kind, label, type_name in fields:
            entry = None
            if label == "m":  # map<string, V>: a repeated nested MapEntry
                entry = message.nested_type.add(name=f"{field.title().replace('_', '')}Entry")
                entry.options.map_entry = True
                entry.field.add(name="key", number=1, type=_F.TYPE_STRING, label=_F.LABEL_OPTIONAL)
                entry.field.add(
                    name="value", number=2, type=kind, label=_F.LABEL_OPTIONAL, type_name=type_name
                )
                kind, type_name = _F.TYPE_MESSAGE, f".ml_metadata.{name}.{entry.name}"
            message.field.add(
                name=field,
                number=number,
                type=kind,
                type_name=type_name or None,
                label=_F.LABEL_REPEATED if label in ("r", "m") else _F.LABEL_OPTIONAL,
            )
    pool.Add(file)
    return {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"ml_metadata.{name}"))
        for name in _MESSAGES
    }


_CLASSES = _message_classes()


@dataclass(frozen=True)
class Artifact:
    """An artifact as MLMD has it: its type, URI and custom properties (plain values)."""

    type: str
    uri: str
    properties: dict

    @property
    def display_name(self) -> str:
        """The output's name: KFP records it as the ``display_name`` property."""
        return self.properties.get("display_name", "")


def _plain(value) -> object:
    """A Value's content: the one field set (declared here without MLMD's oneof)."""
    for field in ("double_value", "int_value", "string_value", "bool_value"):
        if value.HasField(field):
            return getattr(value, field)
    if value.HasField("struct_value"):
        return json_format.MessageToDict(value.struct_value)
    return None


class MetadataStore:
    """The run-level reads of MLMD's MetadataStoreService at ``address`` (host:port)."""

    def __init__(self, address: str):
        self.channel = grpc.insecure_channel(address)

    def _call(self, method: str, **request):
        call = self.channel.unary_unary(
            SERVICE + method,
            request_serializer=lambda message: message.SerializeToString(),
            response_deserializer=_CLASSES[f"{method}Response"].FromString,
        )
        return call(_CLASSES[f"{method}Request"](**request), timeout=30)

    def run_artifacts(self, run_id: str) -> list[Artifact]:
        """Every artifact recorded in the context of KFP run ``run_id``."""
        found = self._call(
            "GetContextByTypeAndName", type_name=RUN_CONTEXT_TYPE, context_name=run_id
        )
        if not found.HasField("context"):
            return []
        listed = self._call("GetArtifactsByContext", context_id=found.context.id)
        assert not listed.next_page_token, "more artifacts than one page"
        return [
            Artifact(a.type, a.uri, {k: _plain(v) for k, v in a.custom_properties.items()})
            for a in listed.artifacts
        ]
