"""The cluster tier's container images: which there are, what each is made from, in which sets.

Three kinds, built in the order of ``images()`` (by harness/image_builds.py, with podman: no
Docker, and no registry but the tier's own, harness/registry.py):

- stand-in bases made here: Debian bookworm by debootstrap, Debian's Python 3.11 on it
  where python:3.11.11-slim-bookworm has its own, and torch 2.9.0 on that for
  pytorch/pytorch:2.9.0-cuda12.8-cudnn9-runtime (tools/controlplane/images/);
- ours, from images/*.Dockerfile with BASE (and TORCH_INDEX: PyPI) set to those bases, the
  trainer in both variants (TORCH=cuda on the torch stand-in, TORCH=cpu on Python); the torch
  layer is one and the same in all four (the Dockerfiles' `torch` or `cpu` stage); each
  gets the checkout's commit (GIT_COMMIT, declared last: a new commit rebuilds no layer);
- stand-ins, under their upstream names and users, for the images that upstream programs
  put into our pods: containerd's pause (sandbox) image, the Training Operator's
  init-pytorch image, Katib's StdOut/File metrics collector and its goptuna suggestion.

The images pods use (``IMAGE_NAMES``) go to the nodes in two sets (``image_sets``), each
keyed by its images' ids: harness/registry.py pushes and pulls a set once per key.
"""

from __future__ import annotations

import functools
import hashlib
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from components.images import BUILDS, Images
from components.runtime.commit import BUILD_ARG, checkout_commit
from harness.build import build
from harness.components import components
from harness.paths import CACHE, CONTROLPLANE, REPO
from harness.pins import upstream
from harness.processes import run

STORE = CACHE / "images"  # built.json (the key and id of each image), build contexts
STANDINS = CONTROLPLANE / "images"  # the Containerfiles of the stand-ins

TIER = "localhost/fmnist-tier"
DEBIAN = f"{TIER}/debian:bookworm"
PYTHON = f"{TIER}/python:3.11-bookworm"
PYTORCH = f"{TIER}/pytorch:2.9.0"
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


@functools.cache
def commit_arg() -> tuple[str, str]:
    """The build argument naming the checkout's commit ("" outside a checkout)."""
    return BUILD_ARG, checkout_commit(REPO) or ""


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
    """Our four images (the trainer's two variants), from images/*.Dockerfile on our bases."""
    ours = Images.resolve()
    return [
        Image(
            ours.trainer,
            REPO / "images" / "trainer.Dockerfile",
            lambda: REPO,
            (*BUILDS["trainer"].args.items(), ("BASE", PYTORCH), commit_arg()),
            (PYTORCH,),
        ),
        Image(
            ours.trainer_cpu,
            REPO / "images" / "trainer.Dockerfile",
            lambda: REPO,
            (
                *BUILDS["trainer_cpu"].args.items(),
                ("CPU_BASE", PYTHON),
                ("TORCH_INDEX", PYPI),
                commit_arg(),
            ),
            (PYTHON,),
            pypi=True,
        ),
        Image(
            ours.components,
            REPO / "images" / "components.Dockerfile",
            lambda: REPO,
            (*PYPI_BASE, commit_arg()),
            (PYTHON,),
            pypi=True,
        ),
        Image(
            ours.serving,
            REPO / "images" / "serving.Dockerfile",
            lambda: REPO,
            (*PYPI_BASE, commit_arg()),
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


@dataclass(frozen=True)
class ImageSet:
    """Images a pod of the tier uses, as built now: a node pulls each key once."""

    kind: str  # "ours" (the torch images, GBs) or "standins" (MBs)
    key: str  # from every image's name and id
    names: tuple[str, ...]


def image_set(kind: str, names: list[str], records: dict[str, dict]) -> ImageSet:
    """``names`` with the key of their current ids."""
    digest = hashlib.sha256(json.dumps([[n, records[n]["id"]] for n in names]).encode())
    return ImageSet(kind, digest.hexdigest()[:16], tuple(names))


def image_sets(records: dict[str, dict]) -> tuple[ImageSet, ImageSet]:
    """IMAGE_NAMES in two sets, ours and the stand-ins, each keyed by its images' ids.

    Apart, a changed stand-in does not send ours (7 GB) through the registry again.
    """
    ours = [image.name for image in our_images()]
    standins = [image.name for image in standin_images()]
    return image_set("ours", ours, records), image_set("standins", standins, records)
