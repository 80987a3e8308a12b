"""What every controller module is given: manifests, certificates, versions, helpers."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path

import yaml

from harness.manifests import rewrite_webhooks
from harness.paths import RUN
from harness.processes import free_port


@dataclass(frozen=True)
class Setup:
    """The rendered manifests by component, the harness's PKI, the selected versions."""

    manifests: dict[str, list[dict]]
    pki: dict[str, Path]
    trainer: str
    kserve: str

    def webhooks(self, component: str, port: int) -> list[dict]:
        """The component's manifests with every webhook pointed at 127.0.0.1:``port``."""
        ca_bundle = base64.b64encode(self.pki["ca.crt"].read_bytes()).decode()
        return rewrite_webhooks(self.manifests[component], port, ca_bundle)


def ports() -> tuple[int, int]:
    """A webhook port and a health-probe port."""
    return free_port(), free_port()


def config_file(name: str, content: dict | str) -> Path:
    """Write run/<name>/config.yaml (a dict is dumped as YAML); return its path."""
    path = RUN / name / "config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        content if isinstance(content, str) else yaml.safe_dump(content, sort_keys=False)
    )
    return path
