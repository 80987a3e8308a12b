"""The real nodes: images preloaded, CoreDNS, the registry, the kubelets, kube-router."""

from __future__ import annotations

from pathlib import Path

import yaml

from harness import (
    api_service,
    control_plane,
    dns,
    enforcer,
    image_builds,
    images,
    node,
    registry,
    volumes,
)
from harness.api import Api
from harness.paths import BIN, KUBECONFIG, LOGS, PIDS, RUN
from harness.processes import terminate

LOCAL_VOLUMES = 32  # the real node's local PersistentVolumes (one per test workspace)


def start_nodes(api: Api, pod_images: tuple[images.ImageSet, ...]) -> dict:
    """CoreDNS, the API's Service, the registry with the images, the volumes, the real nodes.

    Returns their pids and (for the nodes' programs) how each was started.
    """
    kubeconfig = yaml.safe_load(KUBECONFIG.read_text())
    server = kubeconfig["clusters"][0]["cluster"]["server"]
    pids = dns.start() | api_service.start(server) | start_registry()
    for image_set in pod_images:
        registry.push(image_set, registry.STORAGE)
    api.create_all([dns.service(), *volumes.local_volumes(LOCAL_VOLUMES)], "real-nodes")
    api_service.keep_from_kube_proxy(api)
    ca_dir = control_plane.kwok_cluster_dir() / "pki"
    records = []
    for real in node.NODES:
        started = node.start(real, ca_dir, server, dns.DNS_IP, pod_images, images.SANDBOX_IMAGE)
        pids |= {process.name: pid for process, pid in started}
        records += [process.__dict__ for process, _ in started]
    for real in node.NODES:
        node.wait_ready(api, real)
    return {"pids": pids, "processes": records}


def start_enforcers(api: Api) -> dict:
    """kube-router's NetworkPolicy controller on each real node (harness/enforcer.py)."""
    server = yaml.safe_load(KUBECONFIG.read_text())["clusters"][0]["cluster"]["server"]
    ca_dir = control_plane.kwok_cluster_dir() / "pki"
    api.create_all(enforcer.rbac(), "enforcers")
    pids, records = {}, []
    for real in node.NODES:  # each reads its Node object when it starts
        process = enforcer.process(real, ca_dir, server if real.first else node.API_SERVICE)
        pids[process.name] = process.start()
        records.append(process.__dict__)
    for real in node.NODES:
        enforcer.wait_ready(real)
    return {"pids": pids, "processes": records}


def start_registry(bin_dir: Path = BIN) -> dict[str, int]:
    """The image registry, unless one already answers (its pid by name)."""
    pid = registry.start(bin_dir)
    return {"registry": pid} if pid else {}


def preload_torch_images(bin_dirs: tuple[Path, Path]) -> None:
    """Build the bases and our images, push them, and pull them into each node's containerd.

    All of it waits more on the network and the disk than on the CPUs, so beside the Go
    builds it takes cluster-up's longest step (7 GB unpacked per node) off it.
    """
    containerd, registry_bin = bin_dirs
    ours = image_builds.ensure_torch_images()
    for folder in (LOGS, PIDS, RUN):
        folder.mkdir(parents=True, exist_ok=True)
    pids = start_registry(registry_bin)
    try:
        registry.push(ours, registry.STORAGE)
        node.preload(ours, images.SANDBOX_IMAGE, containerd)
    finally:
        terminate(list(pids.values()), 15)
        (PIDS / "registry.pid").unlink(missing_ok=True)
