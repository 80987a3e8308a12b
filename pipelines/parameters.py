"""Pipeline signatures composed from the parameter sets.

A pipeline's parameters are the fields of its parameter sets (``TrainingJob``,
``Serving``, ...) plus a few of its own (``Extra``). ``composed_of`` gives the pipeline
function exactly that signature, with each field's default and type, and writes each
field's help into the docstring's ``Args:``, which KFP shows in its UI. The body receives
the parameters as one mapping and hands each step the set it needs (``fields_of``).
The pipeline function keeps its sources (``parameter_sources``), so ``check_values``
checks the values of a run with the very sets the pipeline's steps will apply.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass, fields

from components.specs.params import check_target


@dataclass(frozen=True)
class Extra:
    """A pipeline parameter that belongs to no parameter set."""

    name: str
    annotation: type
    default: object
    help: str
    check: Callable[[object], object]  # raises ParamError for a bad value


TARGET = Extra(
    "target",
    str,
    "cluster",
    '"cluster": a PyTorchJob or TrainJob and KServe; "local": torchrun and a local predictor',
    check_target,
)


def _parameters(source) -> list[tuple[inspect.Parameter, str]]:
    if isinstance(source, tuple):  # (parameter set, names left out)
        parameter_set, excluded = source
        return [entry for entry in _parameters(parameter_set) if entry[0].name not in excluded]
    if isinstance(source, Extra):
        kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
        return [
            (
                inspect.Parameter(
                    source.name, kind, default=source.default, annotation=source.annotation
                ),
                source.help,
            )
        ]
    hints = typing.get_type_hints(source)
    return [
        (
            inspect.Parameter(
                item.name,
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                default=item.default,
                annotation=hints[item.name],
            ),
            item.metadata["help"],
        )
        for item in fields(source)
    ]


def composed_of(*sources):
    """Turn ``body(params)`` into a pipeline function with the sets' fields as parameters.

    A source is a parameter set, ``(parameter set, names to leave out)``, or an ``Extra``.
    """
    entries = [entry for source in sources for entry in _parameters(source)]
    names = [parameter.name for parameter, _ in entries]
    if len(set(names)) != len(names):
        raise ValueError(f"parameter names repeat across sets: {names}")

    def decorate(body):
        returns = typing.get_type_hints(body).get("return", inspect.Signature.empty)
        signature = inspect.Signature(
            [parameter for parameter, _ in entries], return_annotation=returns
        )

        def pipeline(*args, **kwargs):
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            return body(dict(bound.arguments))

        pipeline.__signature__ = signature
        pipeline.parameter_sources = sources
        pipeline.__name__ = pipeline.__qualname__ = body.__name__
        pipeline.__module__ = body.__module__
        pipeline.__doc__ = _with_args(inspect.getdoc(body) or "", entries)
        return pipeline

    return decorate


def _with_args(doc: str, entries) -> str:
    """``doc`` with an ``Args:`` section (one line per parameter) before its ``Returns:``."""
    summary, returns_marker, returns = doc.partition("Returns:")
    args = "\n".join(
        f"    {parameter.name}: {text[0].upper()}{text[1:]}." for parameter, text in entries
    )
    return f"{summary.rstrip()}\n\nArgs:\n{args}\n\n{returns_marker}{returns}".rstrip() + "\n"


def fields_of(params: dict, parameter_set, exclude: tuple[str, ...] = ()) -> dict:
    """The pipeline parameters (channels) that make up one parameter set, by name."""
    return {
        item.name: params[item.name] for item in fields(parameter_set) if item.name not in exclude
    }


def check_values(sources, values: dict) -> None:
    """Check a run's parameter values with the sets (and extras) they belong to.

    Args:
        sources: a pipeline's ``parameter_sources`` (as given to ``composed_of``).
        values: parameter name -> value; a set's missing fields take the set's defaults.

    Raises:
        ParamError: a value outside its range, named as the set names it.
    """
    for source in sources:
        if isinstance(source, Extra):
            if source.name in values:
                source.check(values[source.name])
            continue
        parameter_set, excluded = source if isinstance(source, tuple) else (source, ())
        names = [item.name for item in fields(parameter_set) if item.name not in excluded]
        parameter_set.from_dict({name: values[name] for name in names if name in values})
