"""Moving the tier's images from podman's store into a node's containerd, once per set key.

``podman save -m`` streams a set (harness/images.py ``ImageSet``) as one docker-archive into
the node's ``ctr images import -``: no archive on the disk, the shared torch layer once.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from harness.image_builds import PODMAN
from harness.images import ImageSet


def save_command(names: tuple[str, ...]) -> list[str]:
    """``podman save -m`` of ``names`` as one docker-archive on stdout (shared layers once)."""
    return [*PODMAN, "save", "-m", "--format", "docker-archive", *names]


def import_images(images: ImageSet, ctr: list[str], stamps: Path) -> None:
    """Stream a set of images from podman into containerd's CRI namespace, once per key.

    Args:
        images: the set, keyed by its images' ids.
        ctr: the ``ctr`` command that talks to the node's containerd.
        stamps: where a file records the key imported last (containerd's root).

    containerd keeps the layers it already has (the torch layer, 7 GB), so a changed
    source costs the new layers' unpacking, not a second copy.
    """
    stamp = stamps / f"imported-{images.kind}-{images.key}"
    if stamp.exists():
        return
    started = time.monotonic()
    save = subprocess.Popen(save_command(images.names), stdout=subprocess.PIPE)
    load = subprocess.run(
        [*ctr, "-n", "k8s.io", "images", "import", "-"],
        stdin=save.stdout,
        capture_output=True,
        text=True,
    )
    save.stdout.close()
    if save.wait() or load.returncode:
        raise SystemExit(f"importing the images into containerd failed:\n{load.stderr[-2000:]}")
    for old in stamps.glob(f"imported-{images.kind}-*"):
        old.unlink()
    stamp.write_text("\n".join(images.names))
    seconds = time.monotonic() - started
    print(f"imported {images.kind} ({len(images.names)} images) into containerd in {seconds:.1f} s")
