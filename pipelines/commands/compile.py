"""``fmnist compile``: compile every pipeline to ``build/pipelines/<name>.yaml``.

Image references come from the flags, else ``$FMNIST_TRAINER_IMAGE``,
``$FMNIST_SERVING_IMAGE`` and ``$FMNIST_COMPONENTS_IMAGE``, else
``ghcr.io/fmnist-pipeline/<runtime>:<version>``. The trainer and serving images become
the defaults of the pipelines' ``trainer_image``/``serving_image`` parameters (a run can
still override them); the components image is the image of every step.
"""

import argparse
from pathlib import Path

from pipelines import PIPELINES
from pipelines.cli import UsageError

IMAGE_PARAMETERS = {"trainer": "trainer_image", "serving": "serving_image"}


def register(subparsers) -> None:
    """Add ``fmnist compile``."""
    parser = subparsers.add_parser(
        "compile",
        help="compile the pipelines to YAML for upload",
        description="Compile every pipeline to build/pipelines/<name>.yaml.",
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
    for runtime in ("trainer", "serving", "components"):
        parser.add_argument(
            f"--{runtime}-image",
            metavar="IMAGE",
            help=f"the {runtime} image (default: $FMNIST_{runtime.upper()}_IMAGE "
            f"or ghcr.io/fmnist-pipeline/{runtime}:<version>)",
        )
    parser.set_defaults(handler=compile_command)


def compile_command(args: argparse.Namespace) -> int:
    """Compile the chosen pipelines; print where each one went."""
    from components.images import Images

    unknown = sorted(set(args.pipelines) - set(PIPELINES))
    if unknown:
        raise UsageError(
            f"unknown pipeline(s) {', '.join(unknown)}; choose from {', '.join(PIPELINES)}"
        )
    defaults, given = Images.defaults(), vars(args)
    images = Images(
        **{
            runtime: getattr(defaults, runtime)
            if given[f"{runtime}_image"] is None
            else given[f"{runtime}_image"]
            for runtime in ("trainer", "serving", "components")
        }
    )
    if not all(image.strip() for image in vars(images).values()):
        raise UsageError("image references must not be empty")
    for name in args.pipelines or PIPELINES:
        print(compile_pipeline(name, args.out_dir, images))
    return 0


def compile_pipeline(name: str, out_dir: Path, images) -> Path:
    """Compile one registered pipeline with these images; return the YAML's path."""
    from kfp import compiler

    from components.images import COMPONENTS_IMAGE
    from pipelines import load_pipeline

    pipeline = load_pipeline(name)
    inputs = pipeline.component_spec.inputs or {}
    overrides = {
        parameter: getattr(images, runtime)
        for runtime, parameter in IMAGE_PARAMETERS.items()
        if parameter in inputs
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.yaml"
    compiler.Compiler().compile(pipeline, str(path), pipeline_parameters=overrides)
    if images.components != COMPONENTS_IMAGE:
        _replace_step_image(path, COMPONENTS_IMAGE, images.components)
    return path


def _replace_step_image(path: Path, old: str, new: str) -> None:
    """Point every step that runs ``old`` at ``new`` in a compiled pipeline."""
    import yaml

    documents = list(yaml.safe_load_all(path.read_text()))
    for executor in documents[0]["deploymentSpec"]["executors"].values():
        container = executor.get("container", {})
        if container.get("image") == old:
            container["image"] = new
    path.write_text(yaml.safe_dump_all(documents, sort_keys=False))
