"""Where the harness keeps its build, logs, state and the machine-level binary cache."""

from __future__ import annotations

import os
from pathlib import Path

CONTROLPLANE = Path(__file__).resolve().parents[1]  # tools/controlplane: one folder a module
CONFIG = CONTROLPLANE / "config"
REPO = CONTROLPLANE.parents[1]

BUILD = REPO / "build" / "cluster"
BIN, LOGS, RUN, PIDS = BUILD / "bin", BUILD / "logs", BUILD / "run", BUILD / "pids"
KUBECONFIG, STATE, PKI = BUILD / "kubeconfig", BUILD / "state.json", BUILD / "pki"
KWOK_WORKDIR = BUILD / "kwok"
CONTROL_PLANE_BUILT = BUILD / "control-plane.built"  # `build` made what `up --without-nodes` runs
CLUSTER = "fmnist"  # kwokctl's cluster name
CACHE = Path(
    os.environ.get("FMNIST_CONTROLPLANE_CACHE")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "fmnist-controlplane"
)
