"""What every controller module is given: manifests, certificates, versions, helpers."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from harness.manifests import rewrite_webhooks
from harness.paths import KUBECONFIG, RUN
from harness.processes import Process, free_port


@dataclass(frozen=True)
class Cluster:
    """The control plane a controller runs against: the main one, or a MultiKueue worker."""

    name: str = ""  # "" for the main cluster; a worker's name prefixes its files and processes
    kubeconfig: Path = KUBECONFIG


@dataclass(frozen=True)
class Setup:
    """The rendered manifests by component, the harness's PKI, the versions, the cluster."""

    manifests: dict[str, list[dict]]
    pki: dict[str, Path]
    trainer: str
    kserve: str
    cluster: Cluster = field(default_factory=Cluster)
    multikueue_manager: bool = False  # Kueue here dispatches to the workers (harness/workers.py)

    def folder(self, controller: str) -> Path:
        """build/cluster/run/[<worker>/]<controller>: its configuration and certificates."""
        return RUN / self.cluster.name / controller

    def config_file(self, controller: str, content: dict | str) -> Path:
        """Write the controller's config.yaml (a dict is dumped as YAML); return its path."""
        path = self.folder(controller) / "config.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            content if isinstance(content, str) else yaml.safe_dump(content, sort_keys=False)
        )
        return path

    def process(self, controller: str, command: list[str], **options) -> Process:
        """The controller's process, against this cluster (a worker's: named <worker>-<name>)."""
        name = f"{self.cluster.name}-{controller}" if self.cluster.name else controller
        env = {"KUBECONFIG": str(self.cluster.kubeconfig), **options.pop("env", {})}
        return Process(name, command, env=env, **options)

    def webhooks(self, component: str, port: int) -> list[dict]:
        """The component's manifests with every webhook pointed at 127.0.0.1:``port``."""
        ca_bundle = base64.b64encode(self.pki["ca.crt"].read_bytes()).decode()
        return rewrite_webhooks(self.manifests[component], port, ca_bundle)


def ports() -> tuple[int, int]:
    """A webhook port and a health-probe port."""
    return free_port(), free_port()
