"""The cluster tier's container images, built here with podman: no Docker, no registry.

Three kinds, built in the order of ``images()``:

- stand-in bases made here: Debian bookworm by debootstrap, Debian's Python 3.11 on it
  where python:3.11.11-slim-bookworm has its own, and torch 2.9.0 on that for
  pytorch/pytorch:2.9.0-cuda12.8-cudnn9-runtime (tools/controlplane/images/);
- ours, from images/*.Dockerfile with BASE (and TORCH_INDEX: PyPI) set to those bases;
  the torch layer is one and the same in all three (the Dockerfiles' `torch` stage);
- stand-ins, under their upstream names and users, for the images that upstream programs
  put into our pods: containerd's pause (sandbox) image, the Training Operator's
  init-pytorch image, Katib's StdOut/File metrics collector and its goptuna suggestion.

An image is rebuilt only when its key changes: a hash of its Containerfile, its build
arguments, the files it copies and its bases' keys (podman's layer cache then rebuilds
only the layers after the change). ``ensure_images()`` returns the set of images a pod uses
(``IMAGE_NAMES``) in two sets, each with a key of its images' ids; the node streams each set from
podman into containerd (``save_command``) once per key.
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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from components.images import Images
from harness.build import build
from harness.components import components
from harness.paths import CACHE, CONTROLPLANE, REPO
from harness.pins import upstream
from harness.processes import run

RECIPE = "1"  # bump when the way an image is made changes
STORE = CACHE / "images"  # built.json (the key and id of each image), build contexts
STANDINS = CONTROLPLANE / "images"  # the Containerfiles of the stand-ins
PODMAN = ("podman", "--runtime", "/usr/sbin/runc")  # crun fails on hybrid cgroups
# podman copies its own (higher) limits into the container, which runc may not set.
LIMITS = ("--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024")
BUILD_FLAGS = ("build", "--network", "host", *LIMITS)

TIER = "localhost/fmnist-tier"
DEBIAN = f"{TIER}/debian:bookworm"
PYTHON = f"{TIER}/python:3.11-bookworm"
PYTORCH = f"{TIER}/pytorch:2.9.0"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
PYPI = "https://pypi.org/simple"  # torch 2.9.0 there: the CUDA 12.8 build, which runs on CPU

# The upstream images our pods get from upstream programs (tests/tools/test_images.py reads
# each name from the pinned module's file named here):
SANDBOX_IMAGE = "registry.k8s.io/pause:3.10.2"  # containerd v2.4.2 internal/cri/config/config.go
INIT_PYTORCH = "docker.io/library/alpine:3.10"  # training-operator v1.9.4 pkg/config/config.go
COLLECTOR = "ghcr.io/kubeflow/katib/file-metrics-collector:v0.19.0"  # katib-config.yaml
GOPTUNA = "ghcr.io/kubeflow/katib/suggestion-goptuna:v0.19.0"  # katib-config.yaml (random)
PAUSE_SOURCE = ("k8s.io/kubernetes", "build/pause/linux/pause.c")
PAUSE_CFLAGS = ("-Os", "-Wall", "-Werror", "-static", "-DVERSION=v3.10.2-0")  # its Makefile's


@dataclass(frozen=True)
class Image:
    """One image of the tier and what it is made from."""

    name: str
    containerfile: Path | None  # None: Debian, made by debootstrap
    context: Callable[[], Path]  # the build context (made first where it is generated)
    args: tuple[tuple[str, str], ...] = ()  # --build-arg NAME=VALUE
    bases: tuple[str, ...] = ()  # the images of this list it is built on
    pypi: bool = False  # its build downloads from PyPI (and needs the host's CA bundle)


PYPI_BASE = (("BASE", PYTHON), ("TORCH_INDEX", PYPI))


def images() -> list[Image]:
    """Every image of the tier, each after its bases."""
    return base_images() + our_images() + standin_images()


def base_images() -> list[Image]:
    """The bases made here: Debian, Python on it, and torch from PyPI on that."""
    return [
        Image(DEBIAN, None, lambda: STANDINS),
        Image(
            PYTHON,
            STANDINS / "python.Containerfile",
            lambda: STANDINS,
            (("DEBIAN", DEBIAN),),
            (DEBIAN,),
        ),
        Image(
            PYTORCH,
            STANDINS / "pytorch.Containerfile",
            lambda: STANDINS,
            PYPI_BASE,
            (PYTHON,),
            pypi=True,
        ),
    ]


def our_images() -> list[Image]:
    """The project's three images, from images/*.Dockerfile on the bases made here."""
    ours = Images.resolve()
    return [
        Image(
            ours.trainer,
            REPO / "images" / "trainer.Dockerfile",
            lambda: REPO,
            (("BASE", PYTORCH),),
            (PYTORCH,),
        ),
        Image(
            ours.components,
            REPO / "images" / "components.Dockerfile",
            lambda: REPO,
            PYPI_BASE,
            (PYTHON,),
            pypi=True,
        ),
        Image(
            ours.serving,
            REPO / "images" / "serving.Dockerfile",
            lambda: REPO,
            PYPI_BASE,
            (PYTHON,),
            pypi=True,
        ),
    ]


def standin_images() -> list[Image]:
    """The images upstream controllers put into our pods, built here under their names."""
    return [
        Image(SANDBOX_IMAGE, STANDINS / "pause.Containerfile", pause_context),
        Image(
            INIT_PYTORCH,
            STANDINS / "alpine.Containerfile",
            lambda: STANDINS,
            (("DEBIAN", DEBIAN),),
            (DEBIAN,),
        ),
        Image(
            COLLECTOR,
            STANDINS / "file-metricscollector.Containerfile",
            lambda: katib_context("file-metricscollector"),
            (("ALPINE", INIT_PYTORCH),),
            (INIT_PYTORCH,),
        ),
        Image(
            GOPTUNA,
            STANDINS / "suggestion-goptuna.Containerfile",
            lambda: katib_context("goptuna-suggestion"),
            (("ALPINE", INIT_PYTORCH),),
            (INIT_PYTORCH,),
        ),
    ]


def pause_context() -> Path:
    """A folder with kubernetes' pause.c compiled as its Makefile does (gcc -static)."""
    source = upstream.module_file(PAUSE_SOURCE[0], None, PAUSE_SOURCE[1])
    folder = STORE / "context" / "pause"
    folder.mkdir(parents=True, exist_ok=True)
    run(["gcc", *PAUSE_CFLAGS, "-o", str(folder / "pause"), str(source)])
    run(["strip", str(folder / "pause")])
    return folder


def katib_context(program: str) -> Path:
    """A folder with one of Katib's programs, built with the katib component."""
    katib = components("v2.1.0", "v0.15.2")["katib"]  # the same for every Trainer and KServe
    folder = STORE / "context" / program
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy2(build(katib) / "bin" / program, folder)
    return folder


def _pod_images() -> list[str]:
    """The names of the images that pods run: every image but the stand-in bases."""
    return [image.name for image in images() if not image.name.startswith(f"{TIER}/")]


IMAGE_NAMES = _pod_images()


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


def _debootstrap(name: str) -> None:
    """Debian bookworm's minimal base, made by debootstrap and imported as ``name``."""
    STORE.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix=".debian-", dir=STORE))
    try:
        run(["debootstrap", "--variant=minbase", "bookworm", str(root), DEBIAN_MIRROR])
        tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
        imported = subprocess.run(
            [*PODMAN, "import", "--change", 'CMD ["bash"]', "-", name],
            stdin=tar.stdout,
            capture_output=True,
            text=True,
        )
        if tar.wait() or imported.returncode:
            raise SystemExit(f"podman import of {root} failed:\n{imported.stderr.strip()}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _build(image: Image, context: Path) -> None:
    """``podman build`` of one image."""
    command = [*PODMAN, *BUILD_FLAGS, *(_host_ca_mount() if image.pypi else ())]
    for key, value in image.args:
        command += ["--build-arg", f"{key}={value}"]
    command += ["-f", str(image.containerfile), "-t", image.name, str(context)]
    result = subprocess.run(command, capture_output=True, text=True)
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
        print(f"image {image.name}: cached ({_gb(image_size(image.name))})", flush=True)
        return {**recorded, "built": False}
    print(f"image {image.name}: building", flush=True)
    started = time.monotonic()
    if image.containerfile is None:
        _debootstrap(image.name)
    else:
        _build(image, context)
    seconds = round(time.monotonic() - started, 1)
    record = {"key": key, "id": image_id(image.name), "seconds": seconds}
    state[image.name] = record
    _save_state(state)
    print(f"image {image.name}: built in {seconds} s ({_gb(image_size(image.name))})", flush=True)
    return {**record, "built": True}


def ensure_all() -> dict[str, dict]:
    """Build (or find) every image; name -> its record (key, id, seconds, built)."""
    state, keys = _load_state(), {}
    return {image.name: ensure(image, state, keys) for image in images()}


def ensure_torch_images() -> ImageSet:
    """Build (or find) the bases and our images, the ones that need no Go build; our set.

    ``cluster.py build`` runs this beside the Go builds (torch's download and install wait on
    the network, the compiler on the CPUs); the stand-ins follow, from Katib's programs.
    """
    state, keys = _load_state(), {}
    records = {image.name: ensure(image, state, keys) for image in base_images() + our_images()}
    return _image_set("ours", [image.name for image in our_images()], records)


@dataclass(frozen=True)
class ImageSet:
    """Images a pod of the tier uses, as built now: a node imports each key once."""

    kind: str  # "ours" (the torch images, GBs) or "standins" (MBs)
    key: str  # from every image's name and id
    names: tuple[str, ...]


def _image_set(kind: str, names: list[str], records: dict[str, dict]) -> ImageSet:
    """``names`` with the key of their current ids."""
    digest = hashlib.sha256(json.dumps([[n, records[n]["id"]] for n in names]).encode())
    return ImageSet(kind, digest.hexdigest()[:16], tuple(names))


def image_sets(records: dict[str, dict]) -> tuple[ImageSet, ImageSet]:
    """IMAGE_NAMES in two sets, ours and the stand-ins, each keyed by its images' ids.

    Apart, a changed stand-in does not stream the 7 GB of ours into the node again.
    """
    ours = [image.name for image in our_images()]
    standins = [image.name for image in standin_images()]
    return _image_set("ours", ours, records), _image_set("standins", standins, records)


def save_command(names: tuple[str, ...]) -> list[str]:
    """``podman save -m`` of ``names`` as one docker-archive on stdout (shared layers once).

    Streamed into the node's ``ctr images import -``: no 8 GB archive on the disk.
    """
    return [*PODMAN, "save", "-m", "--format", "docker-archive", *names]


def ensure_images() -> tuple[ImageSet, ImageSet]:
    """Every image a pod of the tier uses, built where it changed."""
    for old in STORE.glob("images-*.tar"):  # archives of earlier versions of the harness
        old.unlink()
    return image_sets(ensure_all())


def _gb(size: int) -> str:
    """A size in bytes, for people."""
    return f"{size / 1e9:.2f} GB" if size >= 1e8 else f"{size / 1e6:.1f} MB"


def report() -> None:
    """``cluster.py images``: build what changed, then each image's name, size and seconds."""
    records = ensure_all()
    print(f"{'image':64} {'size':>8}  seconds")
    for name, record in records.items():
        how = "built" if record["built"] else "cached; last build"
        print(f"{name:64} {_gb(image_size(name)):>8}  {how} {record['seconds']} s")
    for images in image_sets(records):
        print(f"pod images, {images.kind} {images.key}: {', '.join(images.names)}")
