"""Command-line flags from the parameter sets: one ``--flag-name`` per field.

Each command adds the groups of the sets that shape what it does (``fmnist render
pytorchjob`` the training job's, ``render inferenceservice`` the serving set's), with each
field's default and help; the image flags default to ``$FMNIST_*_IMAGE`` when set. The
values are checked by the set once, here, so a bad one is a usage error that names its
flag.
"""

from __future__ import annotations

import argparse
import typing
from dataclasses import MISSING, fields

from components.specs.params import ParamError
from pipelines.cli import UsageError


def flag(name: str) -> str:
    """``--name-with-dashes`` for a parameter name."""
    return "--" + name.replace("_", "-")


def _value_type(hint) -> type:
    """The flag's type for a field's type hint (``Optional[X]`` -> ``X``)."""
    return next((arg for arg in typing.get_args(hint) if arg is not type(None)), hint)


def add_set_flags(
    parser: argparse.ArgumentParser, parameter_set, title: str, exclude: tuple[str, ...] = ()
) -> None:
    """A flag group with one flag per field of ``parameter_set``, except ``exclude``."""
    group = parser.add_argument_group(title)
    hints = typing.get_type_hints(parameter_set)
    images = _image_defaults()
    for item in fields(parameter_set):
        if item.name in exclude:
            continue
        kind = _value_type(hints[item.name])
        default = images.get(item.name, None if item.default is MISSING else item.default)
        shown = "" if default is None else f" (default: {default!r})"
        group.add_argument(
            flag(item.name),
            dest=item.name,
            type=kind,
            default=default,
            metavar=kind.__name__.upper(),
            help=f"{item.metadata['help']}{shown}",
        )


def _image_defaults() -> dict[str, str]:
    """The image parameters' defaults as of now: ``$FMNIST_*_IMAGE``, else the release's."""
    from components.images import Images

    images = Images.resolve()
    return {"trainer_image": images.trainer, "serving_image": images.serving}


def set_from_args(args: argparse.Namespace, parameter_set, **overrides):
    """The parameter set from parsed flags (plus ``overrides``), checked.

    Raises:
        UsageError: a value is out of range; the message names its flag(s).
    """
    values = {
        item.name: getattr(args, item.name)
        for item in fields(parameter_set)
        if hasattr(args, item.name)
    }
    try:
        return parameter_set(**{**values, **overrides})
    except ParamError as exc:
        raise usage_error(exc) from None


def usage_error(exc: ParamError, spelling=flag) -> UsageError:
    """The error of a bad value, naming the field(s) as the user gave them (``spelling``)."""
    names = " / ".join(spelling(name) for name in exc.name.split("/"))
    return UsageError(f"{names} must be {exc.allowed}, got {exc.value!r}")
