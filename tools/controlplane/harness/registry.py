"""The tier's image registry: podman pushes the images here, each node's containerd pulls them.

A CNCF distribution registry (github.com/distribution/distribution/v3, pinned in
tools/controlplane/registry/go.mod; its main.go keeps only the filesystem driver) keeps its
blobs in the machine cache, so a fresh clone finds them. It listens on ``ADDRESS``, an
address of the Service range's static band that this machine holds on its loopback
interface (as CoreDNS's, harness/dns.py): the nodes' containerds reach it from any network
namespace, and the apiserver never hands it to a Service (k8s.io/kubernetes v1.36.3
pkg/registry/core/service/ipallocator: dynamic allocation takes the upper band first).

Pods keep the names they have on a cluster (``ghcr.io/fmnist-pipeline/trainer:0.1.0``,
``registry.k8s.io/pause:3.10.2``, ...). Each node's containerd has a hosts.toml per upstream
registry that names this one as its mirror (containerd v2.4.2 core/remotes/docker/config),
and the upstream path without its host is the path here (no two images share one).

Only what changed moves: podman reuses a blob the registry has (its blob-info cache knows
the compressed digest of each layer it pushed), and containerd's unpacker fetches no layer
whose snapshot it has (core/unpack/unpacker.go). After a source change that is our images'
last layers, not the 7 GB torch layer. Once unpacked, a node keeps only the snapshots: the
compressed layers leave its content store (``ctr content prune references``).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from harness.dns import hold_address
from harness.image_builds import PODMAN
from harness.images import ImageSet
from harness.paths import BIN, CACHE, RUN
from harness.processes import Process, http_ok, wait_for

HOST = "10.96.0.5"  # in dns.SERVICE_RANGE's static band, below the kube-dns address
PORT = 5000
ADDRESS = f"{HOST}:{PORT}"
STORAGE = CACHE / "registry"  # the registry's blobs, kept across clones like containerd's
DEFAULT_REGISTRY = "docker.io"  # where a name without a host comes from


def _config(storage: Path) -> str:
    """The registry's configuration: filesystem storage, plain HTTP on ADDRESS, quiet logs."""
    return json.dumps(
        {
            "version": 0.1,
            "log": {"level": "warn", "accesslog": {"disabled": True}},
            "storage": {"filesystem": {"rootdirectory": str(storage)}, "delete": {"enabled": True}},
            "http": {"addr": ADDRESS},
        }
    )


def answers() -> bool:
    """Whether the registry serves its API."""
    return http_ok(f"http://{ADDRESS}/v2/")


def start(bin_dir: Path = BIN) -> int | None:
    """Start the registry on ADDRESS unless one answers there; its pid (None: already up)."""
    hold_address(HOST)
    if answers():
        return None
    STORAGE.mkdir(parents=True, exist_ok=True)
    config = RUN / "registry.yaml"  # JSON is YAML
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(_config(STORAGE))
    pid = Process("registry", [str(bin_dir / "registry"), "serve", str(config)]).start()
    wait_for(f"the image registry on {ADDRESS}", answers, 30, "registry")
    return pid


def split_name(image: str) -> tuple[str, str]:
    """(upstream registry host, path and tag there) of an image name."""
    first, _, rest = image.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return first, rest
    return DEFAULT_REGISTRY, image if "/" in image else f"library/{image}"


def local_name(image: str) -> str:
    """The image's name in this registry."""
    return f"{ADDRESS}/{split_name(image)[1]}"


def push(images: ImageSet, stamps: Path) -> None:
    """Push a set of images from podman's store, once per set key.

    zstd: containerd v2 pulls it, and it compresses the torch layer several times faster
    than gzip on two cores. Layers the registry has are not sent again.
    """
    stamp = stamps / f"pushed-{images.kind}-{images.key}"
    if stamp.exists():
        return
    started = time.monotonic()
    for name in images.names:
        command = [*PODMAN, "push", "--tls-verify=false", "--compression-format", "zstd"]
        result = subprocess.run(
            [*command, name, f"docker://{local_name(name)}"], capture_output=True, text=True
        )
        if result.returncode:
            raise SystemExit(f"pushing {name} to {ADDRESS} failed:\n{result.stderr[-2000:]}")
    for old in stamps.glob(f"pushed-{images.kind}-*"):
        old.unlink()
    stamp.write_text("\n".join(images.names))
    print(f"pushed {images.kind} to {ADDRESS} in {time.monotonic() - started:.1f} s", flush=True)


def write_hosts(folder: Path, images: list[str]) -> Path:
    """A containerd hosts directory: this registry as the mirror of each upstream host."""
    for host in sorted({split_name(image)[0] for image in images}):
        (folder / host).mkdir(parents=True, exist_ok=True)
        (folder / host / "hosts.toml").write_text(
            f'server = "https://{host}"\n\n'
            f'[host."http://{ADDRESS}"]\n'
            '  capabilities = ["pull", "resolve"]\n'
        )
    return folder


def pull(images: ImageSet, ctr: list[str], hosts: Path, stamps: Path) -> None:
    """Pull a set into a node's containerd (CRI namespace) through the mirror, once per key."""
    stamp = stamps / f"pulled-{images.kind}-{images.key}"
    if stamp.exists():
        return
    started = time.monotonic()
    for name in images.names:
        command = [*ctr, "-n", "k8s.io", "images", "pull", "--hosts-dir", str(hosts), name]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode:
            raise SystemExit(f"containerd could not pull {name}:\n{result.stderr[-2000:]}")
    # The layers are unpacked: drop their compressed copies, as CRI's discard_unpacked_layers
    # does (a later pull fetches no layer whose snapshot is there).
    subprocess.run([*ctr, "-n", "k8s.io", "content", "prune", "references"], capture_output=True)
    for old in stamps.glob(f"pulled-{images.kind}-*"):
        old.unlink()
    stamp.write_text("\n".join(images.names))
    seconds = time.monotonic() - started
    print(f"pulled {images.kind} ({len(images.names)} images) in {seconds:.1f} s", flush=True)
