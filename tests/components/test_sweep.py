"""The sweep's search space: range checks and Katib's grid semantics."""

from dataclasses import fields

import pytest

from components.runtime.katib import build_experiment
from components.specs.kinds import Target
from components.specs.params import TrainingJob, trainer_flag_names
from components.specs.pods import workspace_placement
from components.specs.sweep import (
    ALWAYS_SEARCHED,
    SEARCHABLE,
    Sweep,
    Trial,
    grid_points,
    parameter_values,
    rank_trials,
)


def test_defaults_are_valid_and_search_lr_and_epochs():
    sweep = Sweep()
    assert sweep.parameter_names == ("lr", "epochs")
    assert sweep.bounds("lr") == (0.001, 0.01, None)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"algorithm": "hyperopt"}, "algorithm must be one of"),
        ({"lr_min": 0.2, "lr_max": 0.1}, "lr_min/lr_max must be lr_min <= lr_max"),
        ({"lr_min": 0.0}, "lr_min/lr_max must be a finite number > 0, got .0.0, 0.01."),
        ({"epochs_min": 0}, "epochs_min/epochs_max must be an integer >= 1"),
        ({"momentum_min": 0.5}, "momentum_min/momentum_max must be both set or both unset"),
        ({"momentum_min": 0.5, "momentum_max": 1.0}, r"momentum_max must be in \[0, 1\)"),
        ({"lr_step": 0.0}, "lr_step must be a finite number > 0"),
        ({"max_trials": 0}, "max_trials must be an integer >= 1"),
        ({"max_trials": 2, "parallel_trials": 3}, r"parallel_trials must be 1..max_trials \(2\)"),
        ({"max_failed_trials": 13}, r"max_failed_trials must be 0..max_trials \(12\)"),
        ({"sweep_timeout_seconds": 0}, "sweep_timeout_seconds must be an integer >= 1"),
        ({"goal": 1.5}, "goal must be an accuracy in"),
        ({"seed": -1}, "seed must be an integer >= 0"),
        ({"median_stop_trials": 0}, "median_stop_trials must be an integer >= 1, got 0"),
        ({"median_stop_epochs": 0}, "median_stop_epochs must be an integer >= 1, got 0"),
        (
            {"median_stop": True, "max_trials": 3},
            r"median_stop_trials must be < max_trials \(3\), or no trial is left to stop, got 3",
        ),
        (
            {"median_stop": True, "epochs_max": 4},
            r"median_stop_epochs must be < epochs_max \(4\), or no trial can stop",
        ),
        ({"algorithm": "grid"}, "lr_step must be set for the grid algorithm"),
        (
            {"algorithm": "grid", "lr_step": 0.05, "momentum_min": 0.5, "momentum_max": 0.9},
            "momentum_step must be set for the grid algorithm",
        ),
        (
            {"algorithm": "grid", "lr_step": 0.1, "max_trials": 8},
            r"max_trials must be <= the grid.s 7 points",
        ),
    ],
)
def test_bad_values_name_the_field(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Sweep(**kwargs)


@pytest.mark.parametrize(
    ("name", "kwargs", "values"),
    [
        ("lr", {"lr_min": 0.01, "lr_max": 0.05, "lr_step": 0.04}, [0.01, 0.05]),
        # arange(0.1, 0.4, 0.1) has 4 points; Katib drops the last, which overshoots 0.3.
        ("lr", {"lr_min": 0.1, "lr_max": 0.3, "lr_step": 0.1}, [0.1, 0.2, 0.3]),
        ("lr", {"lr_min": 0.01, "lr_max": 0.06, "lr_step": 0.02}, [0.01, 0.03, 0.05]),
        # Floating point: the 4th point is 0.11000000000000001 > 0.11, so Katib drops it.
        ("lr", {"lr_min": 0.05, "lr_max": 0.11, "lr_step": 0.02}, [0.05, 0.07, 0.09]),
        ("epochs", {"epochs_min": 1, "epochs_max": 5, "epochs_step": 2}, [1, 3, 5]),
        ("epochs", {"epochs_min": 2, "epochs_max": 4}, [2, 3, 4]),
        (
            "momentum",
            {"momentum_min": 0.8, "momentum_max": 0.9, "momentum_step": 0.05},
            [0.8, 0.85, 0.9],
        ),
    ],
)
def test_grid_values_follow_katib(name, kwargs, values):
    assert parameter_values(Sweep(**kwargs), name) == values


def test_grid_points_are_the_product_and_cap_max_trials():
    sweep = Sweep(
        algorithm="grid",
        lr_min=0.01,
        lr_max=0.05,
        lr_step=0.04,
        epochs_min=1,
        epochs_max=2,
        max_trials=4,
        parallel_trials=2,
    )
    assert grid_points(sweep) == [
        {"lr": 0.01, "epochs": 1},
        {"lr": 0.01, "epochs": 2},
        {"lr": 0.05, "epochs": 1},
        {"lr": 0.05, "epochs": 2},
    ]


def test_ranking_keeps_succeeded_trials_best_first_and_first_on_ties():
    trials = [
        Trial("a", {}, "Succeeded", {"accuracy": 0.8}),
        Trial("b", {}, "Failed", {"accuracy": 0.99}),
        Trial("c", {}, "Succeeded", {"accuracy": 0.9}),
        Trial("d", {}, "Succeeded", {"accuracy": 0.8}),
        Trial("e", {}, "MetricsUnavailable", {}),
    ]
    assert [trial.name for trial in rank_trials(trials)] == ["c", "a", "d"]


def test_median_stop_settings_are_checked_against_the_sweep_only_when_on():
    assert Sweep(max_trials=3, epochs_max=4).median_stop is False  # accepted: it is off


@pytest.mark.parametrize(
    ("kwargs", "trials", "parallel", "failed"),
    [
        ({}, 12, 3, 3),
        # grid without max_trials runs the whole grid, in the pipeline as in the CLI
        ({"algorithm": "grid", "lr_min": 0.01, "lr_max": 0.05, "lr_step": 0.04}, 14, 3, 3),
        ({"algorithm": "grid", "lr_step": 0.006, "epochs_min": 2, "epochs_max": 2}, 2, 2, 2),
        ({"max_trials": 5, "parallel_trials": 5}, 5, 5, 3),
    ],
)
def test_budget_defaults_follow_the_search_space(kwargs, trials, parallel, failed):
    sweep = Sweep(**kwargs)
    assert (sweep.max_trials, sweep.parallel_trials, sweep.max_failed_trials) == (
        trials,
        parallel,
        failed,
    )


def test_a_sweep_survives_a_round_trip_through_a_kfp_struct():
    sweep = Sweep(algorithm="grid", lr_step=0.0045, seed=3)
    as_struct = {
        name: float(value) if isinstance(value, int) else value
        for name, value in sweep.to_dict().items()
    }
    restored = Sweep.from_dict(as_struct)
    assert restored == sweep
    assert isinstance(restored.epochs_min, int) and isinstance(restored.seed, int)


# A value other than the default for each Sweep field, with the fields it needs beside it.
# A field added to Sweep needs an entry here, and must then change the Experiment.
MOMENTUM = {"momentum_min": 0.5, "momentum_max": 0.9}
SWEEP_VARIANTS = {
    "algorithm": ({}, "tpe"),
    "lr_min": ({}, 0.002),
    "lr_max": ({}, 0.004),
    "lr_step": ({}, 0.001),
    "epochs_min": ({}, 3),
    "epochs_max": ({}, 5),
    "epochs_step": ({}, 2),
    "momentum_min": ({}, MOMENTUM),
    "momentum_max": (MOMENTUM, 0.95),
    "momentum_step": (MOMENTUM, 0.1),
    "max_trials": ({}, 5),
    "parallel_trials": ({}, 2),
    "max_failed_trials": ({}, 1),
    "goal": ({}, 0.9),
    "seed": ({}, 3),
    "median_stop": ({}, True),
    "median_stop_trials": ({"median_stop": True}, 2),
    "median_stop_epochs": ({"median_stop": True}, 2),
}
# Fields the tune step itself consumes, and where.
SWEEP_STEP_FIELDS = {"sweep_timeout_seconds": "components/runtime/katib.py tune waits this long"}


def experiment_of(sweep: Sweep) -> dict:
    """The Experiment the tune step would create for ``sweep``."""
    placement = workspace_placement("run-1-kfp-workspace")
    target = Target("pytorchjob")
    return build_experiment(TrainingJob(), sweep, target, "tune-1", "team", "/ws", placement)


@pytest.mark.parametrize("name", [item.name for item in fields(Sweep)])
def test_every_sweep_field_reaches_the_experiment(name):
    """A field that changes no Experiment (nor is the step's own) would be dropped silently."""
    if name in SWEEP_STEP_FIELDS:
        return
    assert name in SWEEP_VARIANTS, f"Sweep.{name}: add a value to SWEEP_VARIANTS"
    base, value = SWEEP_VARIANTS[name]
    changes = value if isinstance(value, dict) else {name: value}
    before, after = Sweep(**base), Sweep(**{**base, **changes})
    assert experiment_of(before) != experiment_of(after), f"Sweep.{name} changes nothing"


def test_each_searchable_range_is_a_trainer_flag_of_the_training_job():
    assert SEARCHABLE == ("lr", "epochs", "momentum") and ALWAYS_SEARCHED == ("lr", "epochs")
    assert set(SEARCHABLE) <= set(trainer_flag_names(TrainingJob))
    ranges = [item.name for item in fields(Sweep) if item.name.endswith(("_min", "_max", "_step"))]
    assert ranges == [f"{name}_{end}" for name in SEARCHABLE for end in ("min", "max", "step")]
