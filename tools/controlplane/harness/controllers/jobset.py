"""JobSet (sigs.k8s.io/jobset main.go): Trainer v2 runs TrainJobs as JobSets."""

from __future__ import annotations

import yaml

from harness.controllers.setup import Setup, ports
from harness.manifests import config_map
from harness.paths import BIN
from harness.pki import install_certs
from harness.processes import Process


def configure(setup: Setup) -> tuple[list[Process], list[dict]]:
    """The release ConfigMap's configuration, leader election and cert management off."""
    webhook, health = ports()
    docs = setup.webhooks("jobset", webhook)
    config = yaml.safe_load(
        config_map(docs, "jobset-manager-config")["data"]["controller_manager_config.yaml"]
    )
    config.update(
        leaderElection={"leaderElect": False},
        internalCertManagement={"enable": False},
        webhook={"port": webhook, "certDir": str(setup.folder("jobset") / "certs")},
        metrics={"bindAddress": "0"},
        health={"healthProbeBindAddress": f"127.0.0.1:{health}"},
    )
    install_certs(setup.folder("jobset") / "certs", setup.pki)
    process = setup.process(
        "jobset",
        [str(BIN / "jobset"), "--config", str(setup.config_file("jobset", config))],
        health=f"http://127.0.0.1:{health}/readyz",
        webhook_port=webhook,
    )
    return [process], docs
