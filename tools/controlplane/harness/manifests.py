"""The controllers' rendered manifests, made to work with controllers running on loopback."""

from __future__ import annotations

import yaml

from harness.build import LOADER
from harness.paths import BUILD


def load(names) -> dict[str, list[dict]]:
    """The rendered manifests (build/cluster/manifests/<name>.yaml) of each component named."""
    folder = BUILD / "manifests"
    return {
        name: list(yaml.load_all((folder / f"{name}.yaml").read_text(), Loader=LOADER))
        for name in names
        if (folder / f"{name}.yaml").exists()
    }


def rewrite_webhooks(docs: list[dict], port: int, ca_bundle: str) -> list[dict]:
    """Point every webhook (admission and CRD conversion) at https://127.0.0.1:<port><path>."""
    for doc in docs:
        if doc["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            for webhook in doc["webhooks"]:
                path = webhook["clientConfig"]["service"].get("path", "/")
                webhook["clientConfig"] = {
                    "url": f"https://127.0.0.1:{port}{path}",
                    "caBundle": ca_bundle,
                }
        elif doc["kind"] == "CustomResourceDefinition":
            conversion = doc["spec"].get("conversion") or {}
            if conversion.get("strategy") == "Webhook":
                config = conversion["webhook"]["clientConfig"]
                path = config.get("service", {}).get("path", "/convert")
                conversion["webhook"]["clientConfig"] = {
                    "url": f"https://127.0.0.1:{port}{path}",
                    "caBundle": ca_bundle,
                }
    return docs


def config_map(docs: list[dict], name: str) -> dict:
    """The ConfigMap ``name`` among rendered manifests."""
    found = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == name]
    if not found:
        raise SystemExit(f"the rendered manifests have no ConfigMap {name}")
    return found[0]
