"""Kueue: OUR k8s/kueue/config, plus what running it here needs.

A MultiKueue manager (the main cluster when workers run) gets k8s/kueue/multikueue/config.
"""

from __future__ import annotations

import yaml

from harness.controllers.setup import Setup, ports
from harness.paths import BIN, REPO
from harness.pki import cert_secret, install_certs
from harness.processes import Process


def configure(setup: Setup) -> tuple[list[Process], list[dict]]:
    """Our configuration on local ports, with internal cert management on.

    Off, Kueue reads metrics certificates from /etc/kueue/metrics/certs; on, its rotator is
    handed our certificate in its Secret, and reads it from webhook.certDir.
    """
    webhook, health = ports()
    docs = setup.webhooks("kueue", webhook)
    kit = "kueue/multikueue/config" if setup.multikueue_manager else "kueue/config"
    config = yaml.safe_load((REPO / "k8s" / kit / "controller_manager_config.yaml").read_text())
    config.update(
        namespace="kueue-system",
        health={**config.get("health", {}), "healthProbeBindAddress": f"127.0.0.1:{health}"},
        metrics={**config.get("metrics", {}), "bindAddress": "0"},
        webhook={
            **config.get("webhook", {}),
            "port": webhook,
            "certDir": str(setup.folder("kueue") / "certs"),
        },
        leaderElection={**config.get("leaderElection", {}), "leaderElect": False},
        internalCertManagement={
            "enable": True,
            "webhookServiceName": "kueue-webhook-service",
            "webhookSecretName": "kueue-webhook-server-cert",
        },
    )
    install_certs(setup.folder("kueue") / "certs", setup.pki)
    process = setup.process(
        "kueue",
        [
            str(BIN / "kueue"),
            "--config",
            str(setup.config_file("kueue", config)),
            "--feature-gates=VisibilityOnDemand=false",
        ],
        health=f"http://127.0.0.1:{health}/readyz",
        webhook_port=webhook,
    )
    return [process], docs + [cert_secret("kueue-system", "kueue-webhook-server-cert", setup.pki)]
