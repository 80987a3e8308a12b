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

from cli.errors import UsageError
from components.specs.names import LABEL_MAX, is_dns1035_label, is_dns_label, is_dns_subdomain
from components.specs.params import ParamError


def command_with_examples(subparsers, name: str, summary: str, description: str, examples: str):
    """A subcommand's parser whose description and examples keep their line breaks."""
    return subparsers.add_parser(
        name,
        help=summary,
        description=description,
        epilog=examples,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def flag(name: str) -> str:
    """``--name-with-dashes`` for a parameter name."""
    return "--" + name.replace("_", "-")


def _value_type(hint) -> type:
    """The flag's type for a field's type hint (``Optional[X]`` -> ``X``)."""
    return next((arg for arg in typing.get_args(hint) if arg is not type(None)), hint)


def truth(text: str) -> bool:
    """A boolean flag's value: true or false (argparse's ``bool`` takes "false" as true)."""
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"must be true or false, got {text!r}")
    return value == "true"


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
            type=truth if kind is bool else kind,
            default=default,
            metavar=kind.__name__.upper(),
            help=f"{item.metadata['help']}{shown}",
        )


def _image_defaults() -> dict[str, str]:
    """The image parameters' defaults as of now: ``$FMNIST_*_IMAGE``, else the release's."""
    from components.images import IMAGE_PARAMETERS, Images

    images = Images.resolve()
    return {parameter: getattr(images, runtime) for runtime, parameter in IMAGE_PARAMETERS.items()}


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


def add_cpu_fallback_flag(parser) -> None:
    """``--cpu-fallback`` of the commands that train here (``run``, ``sweep --local``)."""
    parser.add_argument(
        "--cpu-fallback",
        action="store_true",
        help="train on the CPU when --gpus-per-worker asks for GPUs this machine lacks "
        "(default: refuse)",
    )


def usage_error(exc: ParamError, spelling=flag) -> UsageError:
    """The error of a bad value, naming the field(s) as the user gave them (``spelling``)."""
    names = " / ".join(spelling(name) for name in exc.name.split("/"))
    return UsageError(f"{names} must be {exc.allowed}, got {exc.value!r}")


# A job's or Experiment's name: its controller names pods, Services and trials after it,
# adding suffixes (`-worker-3`, `-node-0-0-x7k2p`, Katib's `-<8 letters>`) within 63 characters.
OBJECT_NAME_MAX = 40


def check_object_name(name: str, flag_name: str = "--name") -> str:
    """A job or Experiment name: a DNS-1035 label of at most ``OBJECT_NAME_MAX`` characters."""
    if not is_dns1035_label(name, OBJECT_NAME_MAX):
        raise UsageError(
            f"{flag_name} must be a lowercase DNS label of at most {OBJECT_NAME_MAX} characters, "
            f"starting with a letter (the controllers add suffixes to it), got {name!r}"
        )
    return name


def check_namespace_name(namespace: str | None) -> str | None:
    """``--namespace``: unset, or a DNS-1123 label (at most 63 characters)."""
    if namespace is not None and not is_dns_label(namespace):
        raise UsageError(
            f"--namespace must be a lowercase DNS label of at most {LABEL_MAX} characters, "
            f"got {namespace!r}"
        )
    return namespace


def check_pvc_name(name: str, flag_name: str) -> str:
    """A PersistentVolumeClaim's name: a DNS-1123 subdomain."""
    if not is_dns_subdomain(name):
        raise UsageError(f"{flag_name} must be a lowercase DNS subdomain, got {name!r}")
    return name
