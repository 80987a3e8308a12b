"""Katib's DB manager on PostgreSQL: where trial metrics are reported and read.

The metrics collector sidecar in a trial pod reports each observation to
``katib-db-manager.kubeflow:6789`` (katib v0.19.0 pkg/webhook/v1beta1/pod/inject_webhook.go
passes ``-s-db katib-db-manager.kubeflow:6789``; cmd/metricscollector/v1beta1/
file-metricscollector/main.go reports over gRPC), and the controller reads them back
(pkg/controller.v1beta1/trial/trial_controller_util.go, GetObservationLog). Here the DB
manager (cmd/db-manager/v1beta1, its PostgreSQL driver: pkg/db/v1beta1/postgres) runs on
this machine, listening on the katib-db-manager Service's ClusterIP, which this machine holds
like cluster DNS's (harness/dns.py): pods reach it through their gateway, the controller
through the CONNECT proxy's route. It listens on LISTEN_PORT, since Katib's goptuna
suggestion service binds every address's 6789 (cmd/suggestion/goptuna/v1beta1/main.go); one
NAT rule, as a service proxy would write, maps the Service port to it. PostgreSQL is
Debian's (node-packages.txt).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from harness.controllers.setup import Setup
from harness.dns import SERVED_HERE, hold_address
from harness.paths import BIN
from harness.processes import Process, free_port

ADDRESS = "10.96.0.11"  # the katib-db-manager Service's ClusterIP (in dns.SERVICE_RANGE)
PORT = 6789  # the Service port the collector dials
LISTEN_PORT = 16789  # the goptuna suggestion service holds *:6789 on this machine
POSTGRES = Path("/usr/lib/postgresql/15/bin")
DATA = Path("/run/fmnist-katib-db")  # owned by the postgres user, who must reach it
USER = "katib"  # pkg/db/v1beta1/common/const.go DefaultPostgreSQLUser


def _as_postgres(*command: str) -> list[str]:
    """``command`` as Debian's postgres user (PostgreSQL refuses to run as root)."""
    return ["runuser", "-u", "postgres", "--", *command]


def _init_database() -> None:
    """A fresh cluster in DATA whose superuser is ``katib``, trusted on loopback."""
    shutil.rmtree(DATA, ignore_errors=True)
    DATA.mkdir(parents=True)
    shutil.chown(DATA, "postgres", "postgres")
    subprocess.run(
        _as_postgres(
            str(POSTGRES / "initdb"), "-D", str(DATA / "data"), "-U", USER, "--auth=trust"
        ),
        check=True,
        capture_output=True,
    )


def _forward_service_port() -> None:
    """DNAT ADDRESS:PORT to ADDRESS:LISTEN_PORT for pods' packets (kept across runs)."""
    rule = ["PREROUTING", "-d", f"{ADDRESS}/32", "-p", "tcp", "--dport", str(PORT)]
    rule += ["-j", "DNAT", "--to-destination", f"{ADDRESS}:{LISTEN_PORT}"]
    present = subprocess.run(["iptables", "-t", "nat", "-C", *rule], capture_output=True)
    if present.returncode:
        subprocess.run(["iptables", "-t", "nat", "-A", *rule], check=True)


def configure(setup: Setup) -> tuple[list[Process], list[dict]]:
    """PostgreSQL, the DB manager on ADDRESS, and the Service naming that address."""
    _init_database()
    hold_address(ADDRESS)
    _forward_service_port()
    port = free_port()
    postgres = setup.process(
        "katib-postgres",
        _as_postgres(
            str(POSTGRES / "postgres"),
            "-D",
            str(DATA / "data"),
            "-k",
            str(DATA),
            "-p",
            str(port),
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            "fsync=off",  # throwaway data
        ),
    )
    manager = setup.process(
        "katib-db-manager",
        [str(BIN / "katib-db-manager"), f"--listen-address={ADDRESS}:{LISTEN_PORT}"],
        env={
            "DB_NAME": "postgres",
            "DB_USER": USER,
            "DB_PASSWORD": "unused-with-trust",
            "KATIB_POSTGRESQL_DB_HOST": "127.0.0.1",
            "KATIB_POSTGRESQL_DB_PORT": str(port),
            "KATIB_POSTGRESQL_DB_DATABASE": "postgres",  # initdb's; the manager makes its tables
        },
    )
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        # Served by a program here, not by pods: kube-proxy must leave its address alone.
        "metadata": {"name": "katib-db-manager", "namespace": "kubeflow", "labels": SERVED_HERE},
        "spec": {"clusterIP": ADDRESS, "ports": [{"name": "api", "port": PORT}]},
    }
    return [postgres, manager], [service]
