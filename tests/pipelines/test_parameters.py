"""Pipeline signatures composed from the parameter sets, as the compiled IR shows them.

Each field of each set is one pipeline parameter, once, with the field's default, its type
and its help as the IR description (what the KFP UI shows). ``TrainingJob``'s recipe
defaults come from ``trainer.config.TrainConfig``: one default per value, from the trainer
to the compiled YAML.
"""

from __future__ import annotations

import inspect
import re
import typing
from dataclasses import MISSING, fields
from pathlib import Path

import pytest

from components.specs.params import DataSlice, Serving, TrainingJob
from components.specs.sweep import ALWAYS_SEARCHED, Sweep
from pipelines.parameters import TARGET, composed_of, fields_of
from trainer.config import TrainConfig

REPO = Path(__file__).resolve().parents[2]
IR_TYPES = {int: "NUMBER_INTEGER", float: "NUMBER_DOUBLE", str: "STRING", bool: "BOOLEAN"}
SETS = {  # (pipeline, variant) -> the sets its signature is composed of
    ("fashion-mnist", "workspace"): (DataSlice, TrainingJob, Serving),
    ("fashion-mnist", "pvc"): (DataSlice, TrainingJob, Serving),
    ("fashion-mnist-tune", "workspace"): (Sweep, DataSlice, TrainingJob, Serving),
    ("fashion-mnist-tune", "pvc"): (Sweep, DataSlice, TrainingJob, Serving),
}


@pytest.fixture(scope="module")
def parameters(compiled) -> dict[tuple[str, str], dict[str, dict]]:
    """The root input parameters of each pipeline and variant."""
    return {
        key: spec["root"]["inputDefinitions"]["parameters"] for key, (spec, _) in compiled.items()
    }


def expected(parameter_set) -> dict[str, tuple[object, str, str]]:
    """name -> (default, IR type, description) of each field."""
    hints = typing.get_type_hints(parameter_set)
    result = {}
    for item in fields(parameter_set):
        kind = next((a for a in typing.get_args(hints[item.name]) if a is not type(None)), None)
        text = item.metadata["help"]
        result[item.name] = (
            None if item.default is MISSING else item.default,
            IR_TYPES[kind or hints[item.name]],
            f"{text[0].upper()}{text[1:]}.",
        )
    return result


def ir_view(parameter: dict) -> tuple[object, str, str]:
    return parameter.get("defaultValue"), parameter["parameterType"], parameter["description"]


@pytest.mark.parametrize(("pipeline", "variant"), sorted(SETS))
def test_every_field_of_every_set_is_one_parameter(parameters, pipeline, variant):
    wanted = {}
    for parameter_set in SETS[(pipeline, variant)]:
        wanted.update(expected(parameter_set))
    if pipeline == "fashion-mnist-tune":
        for name in ALWAYS_SEARCHED:  # the tune pipeline leaves them to the sweep
            del wanted[name]
    if (pipeline, variant) == ("fashion-mnist", "workspace"):
        wanted[TARGET.name] = (
            TARGET.default,
            "STRING",
            f"{TARGET.help[0].upper()}{TARGET.help[1:]}.",
        )
    got = parameters[(pipeline, variant)]
    assert {name: ir_view(parameter) for name, parameter in got.items()} == wanted
    assert all(parameter["isOptional"] for parameter in got.values())


# The trainer's default recipe as docs/pipeline.md states it (written out, not recomputed).
RECIPE = {"epochs": 10, "batch_size": 128, "lr": 0.004, "momentum": 0.9, "optimizer": "adamw"}


def test_training_defaults_come_from_the_trainer_config(parameters):
    recipe = TrainConfig()
    job = TrainingJob()
    assert {name: getattr(recipe, name) for name in RECIPE} == RECIPE
    for variant in ("workspace", "pvc"):
        got = parameters[("fashion-mnist", variant)]
        assert {name: got[name]["defaultValue"] for name in RECIPE} == RECIPE, variant
    for variant in ("workspace", "pvc"):
        got = parameters[("fashion-mnist", variant)]
        for item in fields(TrainingJob):
            assert got[item.name]["defaultValue"] == getattr(job, item.name), item.name


def test_unset_sweep_bounds_are_optional_without_a_default(parameters):
    got = parameters[("fashion-mnist-tune", "workspace")]
    for name in ("lr_step", "epochs_step", "momentum_min", "goal", "seed", "max_trials"):
        assert got[name]["isOptional"] is True and "defaultValue" not in got[name], name


def test_the_tune_pipeline_has_no_parameter_the_sweep_overrides(parameters):
    got = parameters[("fashion-mnist-tune", "workspace")]
    assert "epochs" not in got and "lr" not in got


def test_the_python_signature_is_the_composed_one():
    from pipelines.fashion_mnist import fashion_mnist

    signature = inspect.signature(fashion_mnist.pipeline_func)
    names = [TARGET.name] + [
        item.name for s in (DataSlice, TrainingJob, Serving) for item in fields(s)
    ]
    assert list(signature.parameters) == names
    assert signature.parameters["workers"].default == TrainingJob().workers
    assert signature.parameters["workers"].annotation is int
    docstring = fashion_mnist.pipeline_func.__doc__
    assert (
        "    queue_name: Kueue LocalQueue; empty: fmnist-cpu, fmnist-gpu or fmnist-mig.\n"
        in docstring
    )


def test_composed_of_refuses_a_name_in_two_sets():
    with pytest.raises(ValueError, match="parameter names repeat across sets"):
        composed_of(TrainingJob, TrainingJob)


def test_fields_of_hands_a_step_exactly_its_set():
    params = {**DataSlice().to_dict(), **Serving().to_dict(), "target": "local"}
    assert fields_of(params, DataSlice) == {"train_limit": 60_000, "test_limit": 10_000}


def test_every_parameter_is_documented_and_nothing_else(parameters):
    reference = (REPO / "docs" / "pipeline.md").read_text()
    section = reference.split("\n## Parameters\n", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"^\| `(\w+)` \|", section, re.MULTILINE))
    assert documented == set(parameters[("fashion-mnist", "workspace")])


@pytest.mark.parametrize(
    ("name", "values", "field"),
    [
        ("fashion-mnist", {"epochs": 0}, "epochs"),
        ("fashion-mnist", {"target": "laptop"}, "target"),
        ("fashion-mnist", {"model_name": "Bad_Name"}, "model_name"),
        ("fashion-mnist", {"train_limit": 0}, "train_limit"),
        ("fashion-mnist-tune", {"lr_min": 0.1, "lr_max": 0.01}, "lr_min/lr_max"),
        ("fashion-mnist-tune", {"algorithm": "sobol", "seed": 3}, "seed"),
        ("fashion-mnist-tune", {"max_trials": 0.0}, "max_trials"),  # a KFP number is a float
    ],
)
def test_check_values_applies_the_pipelines_own_sets(name, values, field):
    from components.specs.params import ParamError
    from pipelines import load_pipeline
    from pipelines.parameters import check_values

    sources = load_pipeline(name).pipeline_func.parameter_sources
    with pytest.raises(ParamError) as error:
        check_values(sources, values)
    assert error.value.name == field
    check_values(sources, {})  # every default passes


def test_check_values_leaves_the_searched_fields_to_the_sweep():
    from pipelines import load_pipeline
    from pipelines.parameters import check_values

    sources = load_pipeline("fashion-mnist-tune").pipeline_func.parameter_sources
    check_values(sources, {"epochs": -1, "lr": 0, "epochs_max": 3, "lr_max": 0.01})
