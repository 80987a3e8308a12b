"""The few REST calls the harness makes to create a fresh cluster's first objects."""

from __future__ import annotations

import concurrent.futures
import json
import ssl
import urllib.error
import urllib.request
from pathlib import Path

import yaml

from harness.paths import RUN

# The kinds the harness creates in a namespace (every other one is cluster-scoped).
NAMESPACED = {"ConfigMap", "Secret", "Service", "ServiceAccount"}


def plural(kind: str) -> str:
    """The resource name of ``kind`` in the API: ``StorageClass`` -> ``storageclasses``."""
    name = kind.lower()
    if name.endswith("logs"):  # kwok's ClusterLogs is plural already
        return name
    return name + ("es" if name.endswith("ss") else "s")


def condition_true(item: dict, kind: str) -> bool:
    """Whether ``item`` has condition ``kind`` with status True."""
    conditions = item.get("status", {}).get("conditions") or []
    return any(c["type"] == kind and c["status"] == "True" for c in conditions)


class Api:
    """Calls as admin (kwokctl's client certificate).

    Creating the ~50 objects of a fresh cluster with parallel POSTs takes a third of the
    time `kubectl apply --server-side` takes (one PATCH after another, managed fields).
    """

    def __init__(self, kubeconfig: Path):
        config = yaml.safe_load(kubeconfig.read_text())
        cluster = config["clusters"][0]["cluster"]
        user = config["users"][0]["user"]
        self.server = cluster["server"]
        self.context = ssl.create_default_context(cafile=cluster["certificate-authority"])
        self.context.load_cert_chain(user["client-certificate"], user["client-key"])

    def call(self, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
        """One request; returns (HTTP status, decoded body)."""
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.server + path, data=data, method=method)
        patch = method == "PATCH"  # a JSON merge patch
        request.add_header("Content-Type", f"application/{'merge-patch+' if patch else ''}json")
        try:
            with urllib.request.urlopen(request, context=self.context, timeout=60) as response:
                return response.status, json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"{}")

    def create(self, obj: dict) -> None:
        """POST ``obj``; an object that already exists is fine, any other error is not."""
        resource = plural(obj["kind"])
        prefix = "/api/v1" if obj["apiVersion"] == "v1" else f"/apis/{obj['apiVersion']}"
        namespace = obj["metadata"].get("namespace") if obj["kind"] in NAMESPACED else None
        scope = f"{prefix}/namespaces/{namespace}" if namespace else prefix
        path = f"{scope}/{resource}"
        status, answer = self.call("POST", path, obj)
        if status not in (200, 201, 409):
            raise SystemExit(
                f"creating {obj['kind']} {obj['metadata']['name']}: {status} "
                f"{answer.get('message', answer)}"
            )

    def create_all(self, objects: list[dict], name: str) -> None:
        """Namespaces first, then everything else in parallel (kept in run/<name>.json)."""
        (RUN / f"{name}.json").write_text(json.dumps(objects))
        first = [o for o in objects if o["kind"] == "Namespace"]
        rest = [o for o in objects if o["kind"] != "Namespace"]
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            for batch in (first, rest):
                list(pool.map(self.create, batch))

    def established(self, names: set[str]) -> bool:
        """Whether every CRD named is Established (served)."""
        _, answer = self.call("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions")
        items = answer.get("items", [])
        return names <= {i["metadata"]["name"] for i in items if condition_true(i, "Established")}

    def nodes_ready(self, count: int) -> bool:
        """Whether ``count`` nodes report Ready."""
        _, answer = self.call("GET", "/api/v1/nodes")
        return sum(condition_true(n, "Ready") for n in answer.get("items", [])) >= count
