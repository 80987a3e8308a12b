"""Compiling the registered pipelines: the settings the flags give, and the YAML file.

``fmnist compile`` writes every pipeline this way; ``fmnist submit`` and ``fmnist
schedule`` compile the variant the server runs. The trainer and serving images become
the defaults of the ``trainer_image``, ``trainer_cpu_image`` and ``serving_image``
parameters (a run can still override them); the components image is set on every step.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from cli.errors import UsageError
from components.images import IMAGE_PARAMETERS, RUNTIMES
from pipelines.settings import ACCESS_MODES

SUFFIXES = {"workspace": "", "pvc": "-pvc"}


def add_workspace_flags(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The run workspace's size, storage class and access mode; returns the flags."""
    group = parser.add_argument_group("the run's workspace volume")
    return [
        group.add_argument("--workspace-size", default="5Gi", help="its size (default: 5Gi)"),
        group.add_argument(
            "--workspace-storage-class",
            default="",
            help="its StorageClass; KFP 2.15 and 2.16 need one (default: the cluster's default)",
        ),
        group.add_argument(
            "--workspace-access-mode",
            choices=ACCESS_MODES,
            default="ReadWriteMany",
            help="ReadWriteMany for training jobs over several nodes (default: ReadWriteMany)",
        ),
    ]


def settings_from_args(args: argparse.Namespace, variant: str):
    """The compile settings of the flags (images resolved now, from flags and environment)."""
    from cli.flags import usage_error
    from components.images import Images
    from components.specs.names import is_image
    from components.specs.params import IMAGE, ParamError, require
    from pipelines.settings import CompileSettings, Workspace

    chosen = {runtime: getattr(args, f"{runtime}_image", None) for runtime in RUNTIMES}
    try:
        images = Images.resolve(**chosen)
        for runtime in RUNTIMES:
            image = getattr(images, runtime)
            require(is_image(image), f"{runtime}_image", IMAGE, image)
        workspace = Workspace(
            size=args.workspace_size,
            storage_class=args.workspace_storage_class,
            access_mode=args.workspace_access_mode,
        )
        return CompileSettings(images, workspace, variant)
    except ParamError as exc:
        raise usage_error(exc) from None
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def compile_pipeline(name: str, out_dir: Path, settings) -> Path:
    """Compile one registered pipeline with ``settings``; return the YAML's path."""
    from kfp import compiler

    from pipelines import load_pipeline

    pipeline = load_pipeline(name, settings)
    overrides = {
        parameter: getattr(settings.images, runtime)
        for runtime, parameter in IMAGE_PARAMETERS.items()
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}{SUFFIXES[settings.variant]}.yaml"
    compiler.Compiler().compile(pipeline, str(path), pipeline_parameters=overrides)
    return path
