"""``fmnist compile``: compile every pipeline to ``build/pipelines/<name>.yaml``.

Two variants of each: ``<name>.yaml`` for Kubeflow Pipelines 2.15 and later (the run's
workspace) and ``<name>-pvc.yaml`` for 2.2 to 2.14 (a PVC of the run's own, which needs
``--workspace-storage-class``; without one only the first is compiled). Image
references come from the flags, else ``$FMNIST_<RUNTIME>_IMAGE``, else the release's
(``components/images.py``): the trainer's two (CUDA, CPU) and the serving image become the
defaults of the ``trainer_image``, ``trainer_cpu_image`` and ``serving_image`` parameters (a
run can still override them); the components image is set on every step.
"""

import argparse
import sys
from pathlib import Path

from cli.compiling import add_workspace_flags, compile_pipeline, settings_from_args
from cli.errors import UsageError
from components.images import RUNTIMES, default_image, env_var
from pipelines import PIPELINES
from pipelines.settings import PVC_NEEDS_CLASS, VARIANTS


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
    for runtime in RUNTIMES:
        parser.add_argument(
            f"--{runtime.replace('_', '-')}-image",
            metavar="IMAGE",
            help=f"the {runtime.replace('_', ' ')} image (default: ${env_var(runtime)} "
            f"or {default_image(runtime)})",
        )
    add_workspace_flags(parser)
    parser.set_defaults(handler=compile_command)


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
