"""``fmnist compile``: compile every pipeline to ``build/pipelines/<name>.yaml``.

Two variants of each: ``<name>.yaml`` for Kubeflow Pipelines 2.15 and later (the run's
workspace) and ``<name>-pvc.yaml`` for 2.2 to 2.14 (a PVC of the run's own, which needs
``--workspace-storage-class``; without one only the first is compiled). Image
references come from the flags, else ``$FMNIST_TRAINER_IMAGE``, ``$FMNIST_SERVING_IMAGE``
and ``$FMNIST_COMPONENTS_IMAGE``, else ``ghcr.io/fmnist-pipeline/<runtime>:<version>``:
the trainer and serving images become the defaults of the ``trainer_image`` and
``serving_image`` parameters (a run can still override them); the components image is
set on every step.
"""

import argparse
import sys
from pathlib import Path

from pipelines import PIPELINES
from pipelines.cli import UsageError
from pipelines.settings import ACCESS_MODES, PVC_NEEDS_CLASS, VARIANTS

IMAGE_PARAMETERS = {"trainer": "trainer_image", "serving": "serving_image"}
SUFFIXES = {"workspace": "", "pvc": "-pvc"}


def register(subparsers) -> None:
    """Add ``fmnist compile``."""
    parser = subparsers.add_parser(
        "compile",
        help="compile the pipelines to YAML for upload",
        description="Compile every pipeline to build/pipelines/<name>.yaml (KFP >= 2.15) and "
        "<name>-pvc.yaml (KFP 2.2-2.14).",
    )
    parser.add_argument(
        "pipelines",
        nargs="*",
        metavar="PIPELINE",
        help=f"which to compile (default: all of {', '.join(PIPELINES)})",
    )
    parser.add_argument(
        "--out-dir",
        type=Path,
        default=Path("build/pipelines"),
        help="where the YAML files go (default: build/pipelines)",
    )
    parser.add_argument(
        "--variant",
        choices=sorted(VARIANTS),
        action="append",
        help="compile only this variant: "
        + "; ".join(f"{name}: {text}" for name, text in VARIANTS.items())
        + " (default: both)",
    )
    for runtime in ("trainer", "serving", "components"):
        parser.add_argument(
            f"--{runtime}-image",
            metavar="IMAGE",
            help=f"the {runtime} image (default: $FMNIST_{runtime.upper()}_IMAGE "
            f"or ghcr.io/fmnist-pipeline/{runtime}:<version>)",
        )
    add_workspace_flags(parser)
    parser.set_defaults(handler=compile_command)


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
    from components.images import Images
    from components.specs.names import is_image
    from components.specs.params import IMAGE, ParamError, require
    from pipelines.flags import usage_error
    from pipelines.settings import CompileSettings, Workspace

    chosen = {runtime: getattr(args, f"{runtime}_image", None) for runtime in IMAGE_PARAMETERS}
    chosen["components"] = getattr(args, "components_image", None)
    try:
        images = Images.resolve(**chosen)
        for runtime in ("trainer", "serving", "components"):
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


def compile_command(args: argparse.Namespace) -> int:
    """Compile the chosen pipelines in the chosen variants; print where each one went."""
    unknown = sorted(set(args.pipelines) - set(PIPELINES))
    if unknown:
        raise UsageError(
            f"unknown pipeline(s) {', '.join(unknown)}; choose from {', '.join(PIPELINES)}"
        )
    skip_pvc = not args.variant and not args.workspace_storage_class
    variants = args.variant or (["workspace"] if skip_pvc else list(VARIANTS))
    chosen = [settings_from_args(args, variant) for variant in variants]  # all checked first
    check_out_dir(args.out_dir)
    for settings in chosen:
        for name in args.pipelines or PIPELINES:
            print(compile_pipeline(name, args.out_dir, settings))
    if skip_pvc:
        print(f"fmnist compile: skipped the pvc variant: {PVC_NEEDS_CLASS}", file=sys.stderr)
    return 0


def check_out_dir(out_dir: Path) -> None:
    """``--out-dir`` is a directory, or can be made one; else a usage error naming it."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise UsageError(f"--out-dir {out_dir} is not a directory") from None
    except OSError as exc:
        raise UsageError(f"--out-dir {out_dir}: {exc.strerror}") from None


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
