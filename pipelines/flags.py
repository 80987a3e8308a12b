"""Command-line flags for the pipeline parameters, shared by ``fmnist run`` and ``render``.

One ``--flag-name`` per ``PipelineParams`` field, with its default and help; the values
are checked by ``PipelineParams`` once, here, so a bad one is reported as a usage error
that names the flag.
"""

import argparse
from dataclasses import fields

from components.params import DEFAULTS, ParamError, PipelineParams
from pipelines.cli import UsageError

_TYPES = {"int": int, "float": float, "str": str}


def flag(name: str) -> str:
    """``--name-with-dashes`` for a parameter name."""
    return "--" + name.replace("_", "-")


def add_param_flags(parser: argparse.ArgumentParser, exclude: tuple[str, ...] = ()) -> None:
    """Add a flag for every pipeline parameter except those in ``exclude``."""
    group = parser.add_argument_group("pipeline parameters")
    for item in fields(PipelineParams):
        if item.name in exclude:
            continue
        default = getattr(DEFAULTS, item.name)
        group.add_argument(
            flag(item.name),
            dest=item.name,
            type=_TYPES[str(item.type)],
            default=default,
            metavar=str(item.type).upper(),
            help=f"{item.metadata['help']} (default: {default!r})",
        )


def params_from_args(args: argparse.Namespace, **overrides) -> PipelineParams:
    """The parameters from parsed flags (plus ``overrides``), checked.

    Raises:
        UsageError: a value is out of range; the message names its flag.
    """
    values = {
        item.name: getattr(args, item.name)
        for item in fields(PipelineParams)
        if hasattr(args, item.name)
    }
    try:
        return PipelineParams(**{**values, **overrides})
    except ParamError as exc:
        raise UsageError(f"{flag(exc.name)} must be {exc.allowed}, got {exc.value!r}") from None
