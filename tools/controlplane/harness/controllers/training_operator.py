"""Training Operator v1.9.4 (PyTorchJob): flags only (cmd/training-operator.v1/main.go)."""

from __future__ import annotations

from pathlib import Path

from harness.controllers.setup import Setup, ports
from harness.paths import BIN
from harness.pki import cert_secret, install_certs
from harness.processes import Process

# The fixed folder its certificate rotator checks (pkg/cert/cert.go; no flag changes it).
CERTS = Path("/tmp/k8s-webhook-server/serving-certs")


def configure(setup: Setup) -> tuple[list[Process], list[dict]]:
    """Its cert rotator always runs: it gets our certificate in its Secret and in CERTS."""
    webhook, health = ports()
    docs = setup.webhooks("training-operator", webhook)
    install_certs(CERTS, setup.pki)
    process = setup.process(
        "training-operator",
        [
            str(BIN / "training-operator"),
            "--metrics-bind-address=0",
            f"--health-probe-bind-address=127.0.0.1:{health}",
            f"--webhook-server-port={webhook}",
            "--leader-elect=false",
        ],
        env={"MY_POD_NAMESPACE": "kubeflow", "TMPDIR": "/tmp"},
        health=f"http://127.0.0.1:{health}/readyz",
        webhook_port=webhook,
    )
    return [process], docs + [cert_secret("kubeflow", "training-operator-webhook-cert", setup.pki)]
