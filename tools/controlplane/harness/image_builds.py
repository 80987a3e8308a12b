"""Building the tier's images (harness/images.py) with podman, each only when it changed.

An image is rebuilt only when its key changes: a hash of its Containerfile, its build
arguments, the files it copies and its bases' keys (podman's layer cache then rebuilds
only the layers after the change). ``built.json`` in the image store records each key and
the id it gave.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from harness.images import (
    STORE,
    Image,
    ImageSet,
    base_images,
    image_set,
    image_sets,
    images,
    our_images,
)
from harness.processes import run

RECIPE = "1"  # bump when the way an image is made changes
PODMAN = ("podman", "--runtime", "/usr/sbin/runc")  # crun fails on hybrid cgroups
# podman copies its own (higher) limits into the container, which runc may not set.
LIMITS = ("--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024")
BUILD_FLAGS = ("build", "--network", "host", *LIMITS)
DEBIAN_MIRROR = "http://deb.debian.org/debian"


def copied_sources(containerfile: Path) -> list[str]:
    """The context paths a Containerfile's COPY/ADD lines name (not those --from a stage)."""
    sources = []
    for line in re.sub(r"\\\n", " ", containerfile.read_text()).splitlines():
        words = line.split()
        if words and words[0].upper() in ("COPY", "ADD"):
            if not any(word.startswith("--from") for word in words):
                sources += [word for word in words[1:-1] if not word.startswith("--")]
    return sources


def _ignored(relative: str, patterns: list[str]) -> bool:
    """Whether .dockerignore keeps ``relative`` (or a folder above it) out of the context."""
    parts = relative.split("/")
    for pattern in patterns:
        anywhere = pattern.startswith("**/")  # at any depth
        plain = pattern.removeprefix("**/")
        for end in range(1, len(parts) + 1):
            starts = range(end) if anywhere else (0,)
            if any(fnmatch.fnmatch("/".join(parts[i:end]), plain) for i in starts):
                return True
    return False


def context_digest(containerfile: Path, context: Path) -> str:
    """A hash of every file the Containerfile copies from the context (names and bytes)."""
    ignore = context / ".dockerignore"
    patterns = [
        line.strip().rstrip("/")
        for line in (ignore.read_text().splitlines() if ignore.exists() else [])
        if line.strip() and not line.startswith("#")
    ]
    digest = hashlib.sha256()
    for source in copied_sources(containerfile):
        root = context / source
        files = sorted(root.rglob("*")) if root.is_dir() else [root]
        for path in files:
            relative = path.relative_to(context).as_posix()
            if path.is_file() and not _ignored(relative, patterns):
                digest.update(relative.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def image_key(image: Image, context: Path, base_keys: dict[str, str]) -> str:
    """What the image is made from, hashed: recipe, Containerfile, arguments, files, bases."""
    parts = [RECIPE, image.name, list(image.args), [base_keys[b] for b in image.bases]]
    if image.containerfile is None:
        parts += [DEBIAN_MIRROR, "bookworm", "minbase"]
    else:
        parts += [image.containerfile.read_text(), context_digest(image.containerfile, context)]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]


def podman(*args: str, capture: bool = True) -> subprocess.CompletedProcess:
    """Run podman with runc; the result, whatever the exit status."""
    return subprocess.run([*PODMAN, *args], capture_output=capture, text=True)


def image_id(name: str) -> str:
    """The id of a local image, or "" when there is none of that name."""
    result = podman("image", "inspect", "--format", "{{.Id}}", name)
    return result.stdout.strip() if result.returncode == 0 else ""


def image_size(name: str) -> int:
    """The size in bytes of a local image (every layer, shared ones too)."""
    return int(podman("image", "inspect", "--format", "{{.Size}}", name).stdout.strip())


def _host_ca_mount() -> tuple[str, ...]:
    """The host's CA bundle mounted over the build's (in no layer).

    pip then trusts what the host trusts: a proxy that inspects TLS, say.
    """
    bundle = Path(
        os.environ.get("PIP_CERT")
        or os.environ.get("SSL_CERT_FILE")
        or "/etc/ssl/certs/ca-certificates.crt"
    )
    mount = f"{bundle}:/etc/ssl/certs/ca-certificates.crt:ro"
    return ("--volume", mount) if bundle.is_file() else ()


def debootstrap(name: str, arch: str | None = None) -> None:
    """Debian bookworm's minimal base, made by debootstrap and imported as ``name``.

    ``arch`` (a Debian architecture: arm64) makes another machine's: debootstrap runs its
    programs through qemu-user-static, which binfmt_misc must have registered.
    """
    STORE.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix=".debian-", dir=STORE))
    foreign = ("--arch", arch) if arch else ()
    try:
        run(["debootstrap", *foreign, "--variant=minbase", "bookworm", str(root), DEBIAN_MIRROR])
        tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
        imported = subprocess.run(
            [*PODMAN, "import", *foreign, "--change", 'CMD ["bash"]', "-", name],
            stdin=tar.stdout,
            capture_output=True,
            text=True,
        )
        if tar.wait() or imported.returncode:
            raise SystemExit(f"podman import of {root} failed:\n{imported.stderr.strip()}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def build_image(image: Image, context: Path, *flags: str) -> None:
    """``podman build`` of one image, with any further ``flags`` (``--platform``, say)."""
    command = [*BUILD_FLAGS, *(_host_ca_mount() if image.pypi else ()), *flags]
    for key, value in image.args:
        command += ["--build-arg", f"{key}={value}"]
    command += ["-f", str(image.containerfile), "-t", image.name, str(context)]
    result = podman(*command)
    if result.returncode:
        output = (result.stdout + result.stderr).strip()[-4000:]
        raise SystemExit(f"building {image.name} failed:\n{output}")


def _load_state() -> dict:
    """What was built: name -> key, id, seconds of its last build."""
    path = STORE / "built.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _save_state(state: dict) -> None:
    """Write built.json atomically."""
    STORE.mkdir(parents=True, exist_ok=True)
    tmp = STORE / f".built-{os.getpid()}.json"
    tmp.write_text(json.dumps(state, indent=1, sort_keys=True))
    tmp.replace(STORE / "built.json")


def ensure(image: Image, state: dict, keys: dict[str, str]) -> dict:
    """Build one image unless its key and id are those recorded; print a line; its record."""
    context = image.context()
    keys[image.name] = key = image_key(image, context, keys)
    recorded = state.get(image.name, {})
    if recorded.get("key") == key and recorded.get("id") and recorded["id"] == image_id(image.name):
        print(f"image {image.name}: cached ({gb(image_size(image.name))})", flush=True)
        return {**recorded, "built": False}
    print(f"image {image.name}: building", flush=True)
    started = time.monotonic()
    if image.containerfile is None:
        debootstrap(image.name)
    else:
        build_image(image, context)
    seconds = round(time.monotonic() - started, 1)
    record = {"key": key, "id": image_id(image.name), "seconds": seconds}
    state[image.name] = record
    _save_state(state)
    print(f"image {image.name}: built in {seconds} s ({gb(image_size(image.name))})", flush=True)
    return {**record, "built": True}


def ensure_all() -> dict[str, dict]:
    """Build (or find) every image; name -> its record (key, id, seconds, built)."""
    state, keys = _load_state(), {}
    return {image.name: ensure(image, state, keys) for image in images()}


def ensure_bases() -> None:
    """Build (or find) the stand-in bases: Debian, Python on it, torch on that."""
    state, keys = _load_state(), {}
    for image in base_images():
        ensure(image, state, keys)


def ensure_torch_images() -> ImageSet:
    """Build (or find) the bases and our images, the ones that need no Go build; our set.

    ``cluster.py build`` runs this beside the Go builds (torch's download and install wait on
    the network, the compiler on the CPUs); the stand-ins follow, from Katib's programs.
    """
    state, keys = _load_state(), {}
    records = {image.name: ensure(image, state, keys) for image in base_images() + our_images()}
    return image_set("ours", [image.name for image in our_images()], records)


def ensure_images() -> tuple[ImageSet, ImageSet]:
    """Every image a pod of the tier uses, built where it changed."""
    for old in STORE.glob("images-*.tar"):  # archives of earlier versions of the harness
        old.unlink()
    return image_sets(ensure_all())


def gb(size: int) -> str:
    """A size in bytes, for people."""
    return f"{size / 1e9:.2f} GB" if size >= 1e8 else f"{size / 1e6:.1f} MB"


def report() -> None:
    """``cluster.py images``: build what changed, then each image's name, size and seconds."""
    records = ensure_all()
    print(f"{'image':64} {'size':>8}  seconds")
    for name, record in records.items():
        how = "built" if record["built"] else "cached; last build"
        print(f"{name:64} {gb(image_size(name)):>8}  {how} {record['seconds']} s")
    for pod_images in image_sets(records):
        print(f"pod images, {pod_images.kind} {pod_images.key}: {', '.join(pod_images.names)}")
