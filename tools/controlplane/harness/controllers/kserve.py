"""KServe: flags (cmd/manager/main.go) and its release inferenceservice-config ConfigMap."""

from __future__ import annotations

from harness.controllers.setup import Setup, ports
from harness.paths import BIN
from harness.pki import install_certs
from harness.processes import Process

NAMESPACE = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kserve"}}


def configure(setup: Setup) -> tuple[list[Process], list[dict]]:
    """The webhook server reads controller-runtime's default folder under TMPDIR."""
    webhook, health = ports()
    docs = setup.webhooks(f"kserve-{setup.kserve}", webhook)
    if not any(d["kind"] == "Namespace" and d["metadata"]["name"] == "kserve" for d in docs):
        docs.insert(0, NAMESPACE)
    tmpdir = setup.folder("kserve") / "tmp"
    install_certs(tmpdir / "k8s-webhook-server" / "serving-certs", setup.pki)
    process = setup.process(
        "kserve",
        [
            str(BIN / "kserve-manager"),
            "--metrics-addr=0",
            f"--webhook-port={webhook}",
            f"--health-probe-addr=127.0.0.1:{health}",
            "--leader-elect=false",
        ],
        env={"POD_NAMESPACE": "kserve", "TMPDIR": str(tmpdir)},
        health=f"http://127.0.0.1:{health}/readyz",
        webhook_port=webhook,
    )
    return [process], docs
