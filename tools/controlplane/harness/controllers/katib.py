"""Katib: the controller, and its Go suggestion service (goptuna) reached through a proxy."""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from harness import images, node
from harness.controllers import katib_db
from harness.controllers.setup import Setup, ports
from harness.manifests import config_map
from harness.paths import BIN, CONTROLPLANE, KUBECONFIG
from harness.pki import install_certs
from harness.processes import Process, free_port, port_free

CERTS = Path("/tmp/cert")  # pkg/controller.v1beta1/consts/const.go CertDir (no flag)
SUGGESTION_PORT = 6789  # cmd/suggestion/goptuna/v1beta1/main.go listens on 0.0.0.0:6789


def configure(setup: Setup) -> tuple[list[Process], list[dict]]:
    """Its release katib-config with the cert generator off and local ports.

    The suggestion service runs here, reached through connect_proxy.py (see there why), for
    Experiments whose pods are kwok's; the proxy sends an Experiment whose suggestion pod runs
    on the real node to that pod, and the DB manager's Service to katib_db.py's address.
    """
    webhook, health = ports()
    proxy = free_port()
    docs = setup.webhooks("katib", webhook)
    katib_config = config_map(docs, "katib-config")
    config = yaml.safe_load(katib_config["data"]["katib-config.yaml"])
    config["init"]["certGenerator"] = {"enable": False}
    config["init"]["controller"].update(
        webhookPort=webhook, metricsAddr="0", healthzAddr=f"127.0.0.1:{health}"
    )
    # A real-pod namespace runs each Experiment's suggestion Deployment from the goptuna
    # stand-in (which serves random and tpe too) rather than Katib's Python images.
    for suggestion in config["runtime"]["suggestions"]:
        if suggestion["algorithmName"] in ("random", "tpe"):
            suggestion["image"] = images.GOPTUNA
    katib_config["data"]["katib-config.yaml"] = yaml.safe_dump(config, sort_keys=False)
    install_certs(CERTS, setup.pki)
    if not port_free(SUGGESTION_PORT):
        raise SystemExit(f"port {SUGGESTION_PORT} (Katib's suggestion service) is in use")
    proxy_url = f"http://127.0.0.1:{proxy}"
    processes = [
        setup.process("katib-suggestion", [str(BIN / "goptuna-suggestion")]),
        setup.process(
            "katib-proxy",
            [
                sys.executable,
                str(CONTROLPLANE / "connect_proxy.py"),
                str(proxy),
                f"127.0.0.1:{SUGGESTION_PORT}",
                f"katib-db-manager.={katib_db.ADDRESS}:{katib_db.LISTEN_PORT}",
                "--pods-on",
                ",".join(node.NAMES),
                "--kubeconfig",
                str(KUBECONFIG),
            ],
        ),
        setup.process(
            "katib",
            [
                str(BIN / "katib-controller"),
                "--katib-config",
                str(setup.config_file("katib", katib_config["data"]["katib-config.yaml"])),
            ],
            env={
                "KATIB_CORE_NAMESPACE": "kubeflow",
                "HTTPS_PROXY": proxy_url,
                "HTTP_PROXY": proxy_url,
                "NO_PROXY": "127.0.0.1,localhost",
            },
            health=f"http://127.0.0.1:{health}/readyz",
            webhook_port=webhook,
        ),
    ]
    return processes, docs
