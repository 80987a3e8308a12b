"""A compiled pipeline's name and parameters, and the values of a run checked against them.

``fmnist submit`` and ``fmnist schedule`` read what a pipeline YAML declares, turn each
``--param NAME=VALUE`` into the declared type, and check the values with the parameter
sets of the pipeline's steps before anything is sent to a server.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import yaml

from cli.errors import UsageError

# parameterType in a compiled pipeline -> how a command-line value is converted, and its name.
_CONVERTERS = {
    "NUMBER_INTEGER": (int, "an integer"),
    "NUMBER_DOUBLE": (float, "a number"),
    "STRING": (str, "a string"),
    "BOOLEAN": (lambda text: {"true": True, "false": False}[text.lower()], "true or false"),
    "LIST": (json.loads, "a JSON list"),
    "STRUCT": (json.loads, "a JSON object"),
}


@dataclass(frozen=True)
class Inputs:
    """A compiled pipeline's name and parameters: their types and defaults."""

    name: str
    types: dict[str, str]  # parameter name -> parameterType
    defaults: dict[str, object]


def pipeline_inputs(package: Path) -> Inputs:
    """The name and parameters of a compiled pipeline YAML.

    Raises:
        UsageError: the file is missing or is not a compiled pipeline.
    """
    try:
        spec = next(yaml.safe_load_all(Path(package).read_text()), None)  # then the platform's
    except FileNotFoundError:
        raise UsageError(f"--package {package}: no such file") from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        reason = str(exc).strip().splitlines()[0]
        raise UsageError(f"--package {package} is not a compiled pipeline: {reason}") from None
    info = spec.get("pipelineInfo") if isinstance(spec, dict) else None
    root = spec.get("root") if isinstance(spec, dict) else None
    if not (
        isinstance(info, dict) and isinstance(root, dict) and isinstance(info.get("name"), str)
    ):
        raise UsageError(
            f"--package {package} is not a compiled pipeline (no pipelineInfo.name and root): "
            "give a file from `fmnist compile`"
        )
    inputs = root.get("inputDefinitions", {}).get("parameters", {})
    return Inputs(
        info["name"],
        {name: value["parameterType"] for name, value in inputs.items()},
        {name: value["defaultValue"] for name, value in inputs.items() if "defaultValue" in value},
    )


def parse_params(pairs: list[str], types: dict[str, str]) -> dict[str, object]:
    """``NAME=VALUE`` flags -> run parameters, converted to the pipeline's declared types."""
    params = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        if not sep or not name:
            raise UsageError(f"--param takes NAME=VALUE, got {pair!r}")
        if name not in types:
            raise UsageError(f"unknown pipeline parameter {name!r}; known: {', '.join(types)}")
        convert, kind = _CONVERTERS[types[name]]
        try:
            params[name] = convert(text)
        except (KeyError, ValueError):
            raise UsageError(f"--param {name}: {text!r} is not {kind}") from None
    return params


def check_params(inputs: Inputs, params: dict[str, object]) -> None:
    """Check a run's values (the package's defaults, overridden by ``params``) as its steps will.

    The pipelines of this project are checked with their own parameter sets; a package of
    another pipeline only by the types it declares.

    Raises:
        UsageError: ``target=local`` (a cluster runs the pipeline), or a value out of range.
    """
    from cli.flags import usage_error
    from components.specs.params import ParamError
    from pipelines import PIPELINES, load_pipeline
    from pipelines.parameters import check_values

    values = {**inputs.defaults, **params}
    if values.get("target", "cluster") != "cluster":
        raise UsageError(
            f"--param target={values['target']} cannot run on a cluster: `fmnist run` runs the "
            "pipeline on this machine"
        )
    if inputs.name not in PIPELINES:
        return
    sources = load_pipeline(inputs.name).pipeline_func.parameter_sources
    try:
        check_values(sources, values)
    except ParamError as exc:
        raise usage_error(exc, spelling=lambda name: f"--param {name}") from None
