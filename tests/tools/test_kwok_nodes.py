"""The nodes kwok plays keep an address its kubelet API answers on (harness/control_plane.py).

kwok v0.8.0's node-initialize stage (kustomize/stage/node/fast/node-initialize.yaml) runs
again whenever a node is not Ready. For a node with a Hostname but no InternalIP, and kwok
given no ``--node-ip``, it writes ``addresses:`` empty: the apiserver then answered every
log request for that node's pods with a 500 ("no preferred addresses found"). In the
cluster tier that broke the MultiKueue tests whenever a worker's fake nodes had missed a
heartbeat under load.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "controlplane"))
from harness import control_plane  # noqa: E402


def kwok_flags(cluster: str) -> dict[str, str]:
    """kwok-controller's flags beyond kwokctl's own, the last of each name winning."""
    config = control_plane._kwokctl_config(cluster, [])
    (patch,) = [p for p in config["componentsPatches"] if p["name"] == "kwok-controller"]
    return {arg["key"]: arg["value"] for arg in patch["extraArgs"]}


@pytest.mark.parametrize("cluster", [control_plane.CLUSTER, "fmnist-worker-1"])
def test_every_clusters_kwok_gives_its_nodes_an_internal_ip(cluster):
    assert kwok_flags(cluster)["node-ip"] == "127.0.0.1"  # where kwok listens (bindAddress)
    assert control_plane._kwokctl_config(cluster, [])["options"]["bindAddress"] == "127.0.0.1"
