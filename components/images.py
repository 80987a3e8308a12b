"""The container images the pipeline refers to: the single source of their names.

Defaults are ``ghcr.io/fmnist-pipeline/<runtime>:<package version>``. Each can be
overridden by an environment variable (read when this module is imported) or, for a
compiled pipeline, by ``fmnist compile --trainer-image ... --serving-image ...
--components-image ...``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib import metadata

REGISTRY = "ghcr.io/fmnist-pipeline"
RUNTIMES = ("trainer", "serving", "components")


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
    """The image of ``runtime`` (one of RUNTIMES): its env override, else the default."""
    if runtime not in RUNTIMES:
        raise ValueError(f"unknown runtime {runtime!r}; choose one of {', '.join(RUNTIMES)}")
    return os.environ.get(env_var(runtime)) or f"{REGISTRY}/{runtime}:{package_version()}"


@dataclass(frozen=True)
class Images:
    """One image per runtime."""

    trainer: str  # runs `torchrun -m trainer` in the PyTorchJob pods
    serving: str  # runs `python -m serving` as the KServe predictor
    components: str  # runs the KFP steps (this package with kfp and kubernetes)

    @classmethod
    def defaults(cls) -> Images:
        """The images from the environment, else the defaults."""
        return cls(*(default_image(runtime) for runtime in RUNTIMES))


TRAINER_IMAGE = default_image("trainer")
SERVING_IMAGE = default_image("serving")
COMPONENTS_IMAGE = default_image("components")
