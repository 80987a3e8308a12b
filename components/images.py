"""The container images the pipeline refers to: the single source of their names.

Defaults are ``ghcr.io/fmnist-pipeline/<runtime>:<package version>``; the trainer comes in
two variants of images/trainer.Dockerfile, CUDA (``trainer:<version>``, for jobs that request
GPUs) and CPU (``trainer:<version>-cpu``, for jobs that request none). ``Images.resolve``
applies the environment (``FMNIST_TRAINER_IMAGE``, ``FMNIST_TRAINER_CPU_IMAGE``,
``FMNIST_SERVING_IMAGE``, ``FMNIST_COMPONENTS_IMAGE``) and explicit choices when it is
called: at compile or render time, never at import time.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib import metadata
from typing import NamedTuple

REGISTRY = "ghcr.io/fmnist-pipeline"


class Build(NamedTuple):
    """How a runtime's image is built: ``images/<dockerfile>.Dockerfile``, arguments, tag."""

    dockerfile: str
    args: dict[str, str]
    tag_suffix: str = ""


# The trainer's TORCH is given for both variants: buildah 1.28 (Debian 12's podman) skips a
# stage that the final FROM names only through an ARG's default, then fails.
BUILDS = {
    "trainer": Build("trainer", {"TORCH": "cuda"}),
    "trainer_cpu": Build("trainer", {"TORCH": "cpu"}, "-cpu"),
    "serving": Build("serving", {}),
    "components": Build("components", {}),
}
RUNTIMES = tuple(BUILDS)
# The pipeline parameters these images are the defaults of (the components image is set on
# every step instead).
IMAGE_PARAMETERS = {
    "trainer": "trainer_image",
    "trainer_cpu": "trainer_cpu_image",
    "serving": "serving_image",
}


def package_version() -> str:
    """The installed version of this project (the default image tag)."""
    try:
        return metadata.version("fmnist-pipeline")
    except metadata.PackageNotFoundError:
        return "0.1.0"


def env_var(runtime: str) -> str:
    """The environment variable that overrides one runtime's image."""
    return f"FMNIST_{runtime.upper()}_IMAGE"


def default_image(runtime: str) -> str:
    """The published image of ``runtime`` (one of RUNTIMES) for this version."""
    if runtime not in RUNTIMES:
        raise ValueError(f"unknown runtime {runtime!r}; choose one of {', '.join(RUNTIMES)}")
    build = BUILDS[runtime]
    return f"{REGISTRY}/{build.dockerfile}:{package_version()}{build.tag_suffix}"


@dataclass(frozen=True)
class Images:
    """One image per runtime."""

    trainer: str  # runs `torchrun -m trainer` in the training pods that request GPUs
    trainer_cpu: str  # the same on CPU torch, in the training pods that request none
    serving: str  # runs `python -m serving` as the KServe predictor
    components: str  # runs the KFP steps (this package with kfp and kubernetes)

    @classmethod
    def resolve(cls, **chosen: str | None) -> Images:
        """Each image: as chosen, else from its environment variable, else the default."""
        unknown = set(chosen) - set(RUNTIMES)
        if unknown:
            raise ValueError(f"unknown runtime(s) {', '.join(sorted(unknown))}")
        images = {}
        for runtime in RUNTIMES:
            image = chosen.get(runtime)
            if image is None:
                image = os.environ.get(env_var(runtime)) or default_image(runtime)
            if not image.strip():
                raise ValueError(f"the {runtime} image must not be empty")
            images[runtime] = image
        return cls(**images)
