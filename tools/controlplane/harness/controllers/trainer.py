"""Kubeflow Trainer v2 (TrainJob): its release configuration file, cert management off."""

from __future__ import annotations

import yaml

from harness.controllers.setup import Setup, ports
from harness.paths import BIN, BUILD
from harness.pki import install_certs
from harness.processes import Process, free_port


def configure(setup: Setup) -> tuple[list[Process], list[dict]]:
    """The webhook server reads controller-runtime's default folder under TMPDIR."""
    name = f"trainer-{setup.trainer}"
    webhook, health = ports()
    docs = setup.webhooks(name, webhook)
    config = yaml.safe_load((BUILD / "files" / name / "controller_manager_config.yaml").read_text())
    config.update(
        health={**config.get("health", {}), "healthProbeBindAddress": f"127.0.0.1:{health}"},
        metrics={**config.get("metrics", {}), "bindAddress": "0"},
        webhook={**config.get("webhook", {}), "port": webhook},
        certManagement={**config["certManagement"], "enable": False},
    )
    config["leaderElection"]["leaderElect"] = False
    if "statusServer" in config:  # v2.3.0: the TrainJobStatus server (feature gate, off by default)
        config["statusServer"]["port"] = free_port()
    tmpdir = setup.folder("trainer") / "tmp"
    install_certs(tmpdir / "k8s-webhook-server" / "serving-certs", setup.pki)
    process = setup.process(
        "trainer",
        [
            str(BIN / "trainer-controller-manager"),
            "--config",
            str(setup.config_file("trainer", config)),
        ],
        env={"TMPDIR": str(tmpdir)},
        health=f"http://127.0.0.1:{health}/readyz",
        webhook_port=webhook,
    )
    return [process], docs
