"""The sweep's parameter set, shared by Katib and the local runner, and Katib's grid arithmetic.

A hyperparameter is searchable when ``Sweep`` has a range for it (``<name>_min``,
``<name>_max``, ``<name>_step``) and it is a trainer flag of ``TrainingJob`` of that name:
today ``lr``, ``epochs`` and (optionally: its range defaults to unset) ``momentum``. Its
Katib parameter, type (int or double), range check and trial flag follow from those two
declarations (``SEARCHABLE``). Grid points follow Katib's grid suggestion
(kubeflow/katib v0.19.0 ``pkg/suggestion/v1beta1/internal/search_space.py``): integers
step from min to max inclusive, doubles use ``numpy.arange(min, max + step, step)`` minus
a last point that overshoots max.
"""

# KFP reads annotations built from these fields and rejects PEP 604 unions (float | None).
# ruff: noqa: UP045

from __future__ import annotations

import itertools
import math
import typing
from dataclasses import dataclass, field, fields
from typing import Optional

import numpy as np

from components.specs.params import (
    ParamError,
    ParameterSet,
    TrainingJob,
    param,
    require,
    trainer_flag_names,
)
from components.specs.table import text_table

# Katib's hyperparameter suggestion algorithms (names as in katib-config's `suggestions`).
KATIB_ALGORITHMS = (
    "random",
    "grid",
    "bayesianoptimization",
    "tpe",
    "multivariate-tpe",
    "cmaes",
    "sobol",
)
# Algorithms whose Katib suggestion service accepts the `random_state` setting. Sobol's
# takes no setting at all: its sequence is the same on every run (kubeflow/katib v0.19.0
# pkg/suggestion/v1beta1/goptuna/converter.go, toGoptunaSampler), so a seed is refused.
SEEDED_ALGORITHMS = ("random", "grid", "bayesianoptimization", "tpe", "multivariate-tpe", "cmaes")
# Every grid point is a training job, and Katib's grid service lists the whole product of
# the axes to validate the Experiment (kubeflow/katib v0.19.0 pkg/suggestion/v1beta1/optuna/
# base_service.py). A larger grid is a typo in a step (lr_step 1e-7), not a sweep to run.
MAX_GRID_POINTS = 10_000
# Katib's early stopping: medianstop, with its defaults (kubeflow/katib v0.19.0
# pkg/earlystopping/v1beta1/medianstop/service.py, MedianStopService.__init__).
MEDIAN_STOP = "medianstop"
DEFAULT_TRIALS = 12  # trials of a non-grid sweep unless told otherwise
# Trial parameter names (${trialParameters.<name>}) that differ from the Katib parameter's.
_RENAMED_TRIAL_PARAMETERS = {"lr": "learningRate"}


@dataclass(frozen=True)
class Sweep(ParameterSet):
    """A search over learning rate and epochs (and optionally momentum), and its budget."""

    algorithm: str = param("random", f"Katib algorithm: {', '.join(KATIB_ALGORITHMS)}")
    lr_min: float = param(0.001, "smallest learning rate tried")
    lr_max: float = param(0.01, "largest learning rate tried (default optimizer: AdamW)")
    lr_step: Optional[float] = param(None, "grid spacing of the learning rate (grid needs it)")
    epochs_min: int = param(2, "fewest epochs tried")
    epochs_max: int = param(8, "most epochs tried")
    epochs_step: Optional[int] = param(None, "grid spacing of epochs (Katib's default: 1)")
    momentum_min: Optional[float] = param(None, "with momentum_max: also search momentum")
    momentum_max: Optional[float] = param(None, "upper end of the momentum range")
    momentum_step: Optional[float] = param(None, "grid spacing of momentum")
    max_trials: Optional[int] = param(
        None, f"trials to complete; default: every point for grid, else {DEFAULT_TRIALS}"
    )
    parallel_trials: Optional[int] = param(None, "trials running at once; default: up to 3")
    max_failed_trials: Optional[int] = param(
        None, "fail the sweep after this many failed; default: up to 3"
    )
    goal: Optional[float] = param(None, "stop once a trial's accuracy reaches this")
    seed: Optional[int] = param(None, "the algorithm's random_state, for repeatable sweeps")
    median_stop: bool = param(
        False, "Katib medianstop: stop a trial whose accuracy is below the finished ones' median"
    )
    median_stop_trials: int = param(
        3, "medianstop: trials that must succeed before any is stopped (min_trials_required)"
    )
    median_stop_epochs: int = param(
        4, "medianstop: epochs a trial reports before it can be stopped (start_step)"
    )
    sweep_timeout_seconds: int = param(6 * 3600, "stop (and delete the Experiment) after this")

    def __post_init__(self):
        if self.max_trials is None:
            object.__setattr__(self, "max_trials", self._default_trials())
        for name in ("parallel_trials", "max_failed_trials"):
            if getattr(self, name) is None:
                object.__setattr__(self, name, min(3, self.max_trials))
        for ok, name, allowed in self._checks():
            require(ok, name, allowed, _values(self, name))

    def _checks(self):
        """(ok, field, allowed) in order; later checks rely on earlier ones passing."""
        yield (
            self.algorithm in KATIB_ALGORITHMS,
            "algorithm",
            f"one of {', '.join(KATIB_ALGORITHMS)}",
        )
        for name in SEARCHABLE:
            yield from _range_checks(self, name)
        yield self.max_trials >= 1, "max_trials", "an integer >= 1"
        limit = f"max_trials ({self.max_trials})"
        yield 1 <= self.parallel_trials <= self.max_trials, "parallel_trials", f"1..{limit}"
        yield 0 <= self.max_failed_trials <= self.max_trials, "max_failed_trials", f"0..{limit}"
        yield self.goal is None or 0 < self.goal <= 1, "goal", "an accuracy in (0, 1]"
        yield self.seed is None or self.seed >= 0, "seed", "an integer >= 0"
        seedable = f"unset with algorithm {self.algorithm} (it takes no random_state)"
        yield self.seed is None or self.algorithm in SEEDED_ALGORITHMS, "seed", seedable
        yield self.sweep_timeout_seconds >= 1, "sweep_timeout_seconds", "an integer >= 1"
        yield from self._median_stop_checks()
        if self.algorithm == "grid":
            for name in self.parameter_names:
                step = f"{name}_step"
                set_for_grid = is_integer(name) or getattr(self, step) is not None
                yield set_for_grid, step, "set for the grid algorithm"
            size = grid_size(self)
            bounded = f"a grid of at most {MAX_GRID_POINTS} points (the steps make {size})"
            steps = "/".join(f"{name}_step" for name in SEARCHABLE)
            yield size <= MAX_GRID_POINTS, steps, bounded
            yield self.max_trials <= size, "max_trials", f"<= the grid's {size} points for grid"

    def _median_stop_checks(self):
        """Katib's own bounds (>= 1), and, when on, settings under which a trial can stop."""
        yield self.median_stop_trials >= 1, "median_stop_trials", "an integer >= 1"
        yield self.median_stop_epochs >= 1, "median_stop_epochs", "an integer >= 1"
        if self.median_stop:
            fewer = f"< max_trials ({self.max_trials}), or no trial is left to stop"
            yield self.median_stop_trials < self.max_trials, "median_stop_trials", fewer
            # One accuracy line per epoch: a trial is compared only after this many.
            fewer = f"< epochs_max ({self.epochs_max}), or no trial can stop before its end"
            yield self.median_stop_epochs < self.epochs_max, "median_stop_epochs", fewer

    def _default_trials(self) -> int:
        """Every grid point for grid (when its bounds make a grid), else DEFAULT_TRIALS."""
        if self.algorithm != "grid":
            return DEFAULT_TRIALS
        try:
            return grid_size(self) or DEFAULT_TRIALS
        except (TypeError, ValueError, IndexError):  # reported by the checks that follow
            return DEFAULT_TRIALS

    @property
    def parameter_names(self) -> tuple[str, ...]:
        """The Katib parameter names, in order: the searchable ones whose range is set."""
        return tuple(name for name in SEARCHABLE if getattr(self, f"{name}_min") is not None)

    def bounds(self, name: str) -> tuple[float | int, float | int, float | int | None]:
        """(min, max, step) of one parameter."""
        return tuple(getattr(self, f"{name}_{part}") for part in ("min", "max", "step"))


def _searchable() -> tuple[str, ...]:
    """The trainer flags of ``TrainingJob`` that ``Sweep`` has a range for, in Sweep's order."""
    names = [item.name for item in fields(Sweep)]
    flags = trainer_flag_names(TrainingJob)
    return tuple(
        name.removesuffix("_min")
        for name in names
        if name.endswith("_min") and name.removesuffix("_min") in flags
    )


SEARCHABLE = _searchable()
# Searched by every sweep (their ranges have defaults): not parameters of a tuned job.
ALWAYS_SEARCHED = tuple(
    name for name in SEARCHABLE if Sweep.__dataclass_fields__[f"{name}_min"].default is not None
)
TRIAL_PARAMETER_NAMES = {name: _RENAMED_TRIAL_PARAMETERS.get(name, name) for name in SEARCHABLE}


def is_integer(name: str) -> bool:
    """Whether a searchable parameter is an integer (Katib ``int``) rather than a ``double``."""
    return typing.get_type_hints(TrainingJob)[name] is int


def assignment(pairs: list[dict]) -> dict[str, float | int]:
    """Katib's ``parameterAssignments`` (values are strings) as values of their types."""
    return {
        pair["name"]: int(pair["value"]) if is_integer(pair["name"]) else float(pair["value"])
        for pair in pairs
    }


def _range_checks(sweep: Sweep, name: str):
    """(ok, field, allowed): the range of ``name`` is unset or runs between two valid values.

    Each end must be a value ``TrainingJob`` accepts for ``name``, so the range check is
    the training job's own.
    """
    (low, high, step), both = sweep.bounds(name), f"{name}_min/{name}_max"
    yield (low is None) == (high is None), both, "both set or both unset"
    if low is not None:
        for end in (low, high):
            refusal = _job_refusal(name, end)
            yield refusal is None, both, refusal or ""
        yield low <= high, both, f"{name}_min <= {name}_max"
    yield step is None or (_finite(step) and step > 0), f"{name}_step", "a finite number > 0"


def _job_refusal(name: str, value) -> str | None:
    """What a training job allows for ``name``, when it refuses ``value``; else None."""
    try:
        TrainingJob(**{name: value})
    except ParamError as exc:
        return exc.allowed
    return None


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def _values(sweep: Sweep, name: str):
    names = name.split("/")
    values = tuple(getattr(sweep, part) for part in names)
    return values[0] if len(values) == 1 else values


def parameter_values(sweep: Sweep, name: str) -> list[float] | list[int]:
    """Katib's grid values of one parameter (integers step 1 unless told otherwise)."""
    low, high, step = sweep.bounds(name)
    if is_integer(name):
        return list(range(int(low), int(high) + 1, int(step or 1)))
    if step is None:
        raise ValueError(f"{name}_step must be set for the grid algorithm")
    values = np.arange(float(low), float(high) + float(step), float(step))
    if values[-1] > float(high):
        values = values[:-1]
    return [float(f"{value:.10g}") for value in values]


def _axis_size(sweep: Sweep, name: str) -> int:
    """How many values ``parameter_values`` gives, counted without listing them."""
    low, high, step = sweep.bounds(name)
    if is_integer(name):
        return len(range(int(low), int(high) + 1, int(step or 1)))
    if step is None:
        raise ValueError(f"{name}_step must be set for the grid algorithm")
    low, high, step = float(low), float(high), float(step)
    # numpy.arange's length, and its last value (it steps by the first two values' distance).
    count = max(0, math.ceil((high + step - low) / step))
    last = low + (count - 1) * ((low + step) - low)
    return count - 1 if count and last > high else count


def grid_size(sweep: Sweep) -> int:
    """How many points the grid has."""
    return math.prod(_axis_size(sweep, name) for name in sweep.parameter_names)


def grid_points(sweep: Sweep) -> list[dict[str, float | int]]:
    """Every point of the grid, as {parameter name: value}, in product order."""
    names = sweep.parameter_names
    axes = [parameter_values(sweep, name) for name in names]
    return [dict(zip(names, point, strict=True)) for point in itertools.product(*axes)]


@dataclass
class Trial:
    """One trial's assignment and outcome, read from Katib or from a local run."""

    name: str
    assignment: dict[str, float | int]  # Katib parameter name -> value
    # Katib's trial condition: Pending, Running, Succeeded, Failed, MetricsUnavailable, ...
    status: str = "Pending"
    metrics: dict[str, float] = field(default_factory=dict)  # the latest value of each metric
    seconds: float | None = None  # wall time, where known
    message: str = ""  # why it failed, where known

    @property
    def accuracy(self) -> float | None:
        """The objective: the trial's latest test accuracy."""
        return self.metrics.get("accuracy")


def rank_trials(trials: list[Trial]) -> list[Trial]:
    """Succeeded trials, highest accuracy first; ties keep trial order, as Katib does."""
    done = [trial for trial in trials if trial.status == "Succeeded" and trial.accuracy is not None]
    return sorted(done, key=lambda trial: -trial.accuracy)


def trial_rows(trials: list[Trial]) -> list[list[str]]:
    """A header and one row per trial: name, parameters, accuracy, loss, status, time."""
    names = list(dict.fromkeys(name for trial in trials for name in trial.assignment))
    header = ["trial", *names, "accuracy", "loss", "status", "time"]
    return [header] + [_row(trial, names) for trial in trials]


def _row(trial: Trial, names: list[str]) -> list[str]:
    def number(value, spec):
        return "-" if value is None else format(value, spec)

    params = [number(trial.assignment.get(name), "g") for name in names]
    time_text = number(trial.seconds, ".0f") + ("s" if trial.seconds is not None else "")
    return [
        trial.name,
        *params,
        number(trial.metrics.get("accuracy"), ".4f"),
        number(trial.metrics.get("loss"), ".4f"),
        trial.status,
        time_text,
    ]


def trial_table(trials: list[Trial]) -> str:
    """Trials as a fixed-width table."""
    return text_table(trial_rows(trials))
