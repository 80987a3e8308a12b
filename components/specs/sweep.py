"""The sweep's parameter set, shared by Katib and the local runner, and Katib's grid arithmetic.

Katib names its parameters ``lr``, ``epochs`` and (optionally) ``momentum``; each one is
also a trainer flag of the same name. Grid points follow Katib's grid suggestion
(kubeflow/katib v0.19.0 ``pkg/suggestion/v1beta1/internal/search_space.py``): integers
step from min to max inclusive, doubles use ``numpy.arange(min, max + step, step)`` minus
a last point that overshoots max.
"""

# KFP reads annotations built from these fields and rejects PEP 604 unions (float | None).
# ruff: noqa: UP045

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from components.specs.params import ParameterSet, param, require
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
DEFAULT_TRIALS = 12  # trials of a non-grid sweep unless told otherwise
# Katib parameter name -> the trial parameter name used in ${trialParameters.<name>}.
TRIAL_PARAMETER_NAMES = {"lr": "learningRate", "epochs": "epochs", "momentum": "momentum"}


@dataclass(frozen=True)
class Sweep(ParameterSet):
    """A search over learning rate and epochs (and optionally momentum), and its budget."""

    algorithm: str = param("random", f"Katib algorithm: {', '.join(KATIB_ALGORITHMS)}")
    lr_min: float = param(0.0005, "smallest learning rate tried")
    lr_max: float = param(0.005, "largest learning rate tried (default optimizer: AdamW)")
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
        momentum = (self.momentum_min, self.momentum_max)
        yield (
            self.algorithm in KATIB_ALGORITHMS,
            "algorithm",
            f"one of {', '.join(KATIB_ALGORITHMS)}",
        )
        lr_range = _finite(self.lr_max) and 0 < self.lr_min <= self.lr_max
        yield lr_range, "lr_min/lr_max", "0 < lr_min <= lr_max"
        yield 1 <= self.epochs_min <= self.epochs_max, "epochs_min/epochs_max", "1 <= min <= max"
        both = "momentum_min/momentum_max"
        yield (momentum[0] is None) == (momentum[1] is None), both, "both set or both unset"
        if self.searches_momentum:
            yield 0 <= momentum[0] <= momentum[1] < 1, both, "0 <= min <= max < 1"
        for name in ("lr_step", "epochs_step", "momentum_step"):
            step = getattr(self, name)
            yield step is None or (_finite(step) and step > 0), name, "a finite number > 0"
        yield self.max_trials >= 1, "max_trials", "an integer >= 1"
        limit = f"max_trials ({self.max_trials})"
        yield 1 <= self.parallel_trials <= self.max_trials, "parallel_trials", f"1..{limit}"
        yield 0 <= self.max_failed_trials <= self.max_trials, "max_failed_trials", f"0..{limit}"
        yield self.goal is None or 0 < self.goal <= 1, "goal", "an accuracy in (0, 1]"
        yield self.seed is None or self.seed >= 0, "seed", "an integer >= 0"
        seedable = f"unset with algorithm {self.algorithm} (it takes no random_state)"
        yield self.seed is None or self.algorithm in SEEDED_ALGORITHMS, "seed", seedable
        yield self.sweep_timeout_seconds >= 1, "sweep_timeout_seconds", "an integer >= 1"
        if self.algorithm == "grid":
            yield self.lr_step is not None, "lr_step", "set for the grid algorithm"
            if self.searches_momentum:
                yield self.momentum_step is not None, "momentum_step", "set for grid"
            size = grid_size(self)
            bounded = f"a grid of at most {MAX_GRID_POINTS} points (the steps make {size})"
            yield size <= MAX_GRID_POINTS, "lr_step/epochs_step/momentum_step", bounded
            yield self.max_trials <= size, "max_trials", f"<= the grid's {size} points for grid"

    def _default_trials(self) -> int:
        """Every grid point for grid (when its bounds make a grid), else DEFAULT_TRIALS."""
        if self.algorithm != "grid":
            return DEFAULT_TRIALS
        try:
            return grid_size(self) or DEFAULT_TRIALS
        except (TypeError, ValueError, IndexError):  # reported by the checks that follow
            return DEFAULT_TRIALS

    @property
    def searches_momentum(self) -> bool:
        """Whether momentum is part of the search space."""
        return self.momentum_min is not None

    @property
    def parameter_names(self) -> tuple[str, ...]:
        """The Katib parameter names, in order."""
        return ("lr", "epochs", "momentum") if self.searches_momentum else ("lr", "epochs")

    def bounds(self, name: str) -> tuple[float | int, float | int, float | int | None]:
        """(min, max, step) of one parameter."""
        return tuple(getattr(self, f"{name}_{part}") for part in ("min", "max", "step"))


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def _values(sweep: Sweep, name: str):
    names = name.split("/")
    values = tuple(getattr(sweep, part) for part in names)
    return values[0] if len(values) == 1 else values


def parameter_values(sweep: Sweep, name: str) -> list[float] | list[int]:
    """Katib's grid values of one parameter (integers step 1 unless told otherwise)."""
    low, high, step = sweep.bounds(name)
    if name == "epochs":
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
    if name == "epochs":
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
