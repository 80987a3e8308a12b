"""Run a sweep on this machine: each trial is a ``torchrun -m trainer`` subprocess.

Trial ``t`` writes its model, checkpoints and log under ``<out_dir>/<t>/``. A sweep starts
afresh, removing the trials an earlier sweep left in ``<out_dir>``, unless it resumes them:
then each trial continues from its checkpoint (one that is complete only reports again).

The trial's stdout is read the way Katib's StdOut collector reads the master pod's log
(``trainer.metrics.parse_observations`` with our filter), each metric keeps the value of
its latest line's timestamp (the Experiment's ``latest`` strategy: the saved model), and the
sweep stops like a Katib Experiment: when a trial reaches the goal, when the failed
trials reach ``max_failed_trials``, or when ``max_trials`` trials have completed.
Grid and random are the algorithms that run locally; the others need Katib's services.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

from components.runtime.local_train import torchrun_command
from components.runtime.torchrun_log import failure_reason
from components.specs.pods import TrainerFlags
from components.specs.sweep import (
    Sweep,
    Trial,
    grid_points,
    is_integer,
    parameter_values,
    rank_trials,
)
from trainer.metrics import katib_latest, parse_observations

LOCAL_ALGORITHMS = ("grid", "random")
METRICS = ("accuracy", "loss")
FAILED = ("Failed", "MetricsUnavailable")  # what Katib counts against maxFailedTrialCount


@dataclass
class SweepResult:
    """The trials a local sweep ran and how it ended (Katib's Experiment reasons)."""

    trials: list[Trial]
    status: str  # Succeeded or Failed
    reason: str  # why it stopped

    @property
    def best(self) -> Trial | None:
        """The best succeeded trial, if any."""
        ranked = rank_trials(self.trials)
        return ranked[0] if ranked else None


def suggest(config: Sweep) -> list[dict[str, float | int]]:
    """The assignments to try, in order: the grid's first points, or seeded random draws."""
    if config.algorithm == "grid":
        return grid_points(config)[: config.max_trials]
    if config.algorithm == "random":
        rng = random.Random(config.seed)
        return [_draw(config, rng) for _ in range(config.max_trials)]
    raise ValueError(
        f"a local sweep runs {' or '.join(LOCAL_ALGORITHMS)}; {config.algorithm} needs "
        "Katib's suggestion service (use --apply)"
    )


def _draw(config: Sweep, rng: random.Random) -> dict[str, float | int]:
    point = {}
    for name in config.parameter_names:
        low, high, step = config.bounds(name)
        if is_integer(name) or step is not None:  # integer or quantised: pick a grid value
            point[name] = rng.choice(parameter_values(config, name))
        else:
            point[name] = float(f"{rng.uniform(low, high):.6g}")
    return point


def trial_flags(base: TrainerFlags, trial: Trial, out_dir: Path) -> TrainerFlags:
    """``base`` with the trial's values and its own model and checkpoint directories."""
    return base.for_trial(trial.assignment, str(Path(out_dir) / trial.name))


def observe(stdout: str) -> dict[str, float]:
    """The latest value of each metric in a trial's stdout, as Katib would record it.

    Katib's ``latest`` is the observation with the last time (the line's timestamp).
    """
    observations = parse_observations(stdout.splitlines(), METRICS)
    latest = {}
    for name in METRICS:
        try:
            latest[name] = katib_latest(observations, name)
        except ValueError:  # untimed lines: Katib's pick would be arbitrary, so none
            latest[name] = None
    return {name: value for name, value in latest.items() if value is not None}


def earlier_trials(out_dir: Path) -> list[Path]:
    """The trial directories (model, checkpoints, log) an earlier sweep left in ``out_dir``."""
    return sorted(Path(out_dir).glob("trial-*/"))


def run_trial(
    trial: Trial, base: TrainerFlags, out_dir: Path, nproc_per_node: int = 1, threads: int = 1
) -> Trial:
    """Run one trial to completion; record its status, metrics, time, and its log file."""
    flags = trial_flags(base, trial, out_dir)
    log = Path(out_dir) / trial.name / "log.txt"
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    done = subprocess.run(
        torchrun_command(flags, nproc_per_node),
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "OMP_NUM_THREADS": str(threads)},
    )
    trial.seconds = time.monotonic() - start
    log.write_text(done.stdout + done.stderr)
    trial.metrics = observe(done.stdout)
    if done.returncode != 0:
        trial.status, trial.message = "Failed", failure_reason(done.stdout + done.stderr)
    elif "accuracy" not in trial.metrics:
        trial.status = "MetricsUnavailable"
    else:
        trial.status = "Succeeded"
    return trial


def stop_reason(trials: list[Trial], config: Sweep) -> str | None:
    """Why a Katib Experiment in this state would stop launching trials, if it would."""
    best = rank_trials(trials)
    if config.goal is not None and best and best[0].accuracy >= config.goal:
        return "goal reached"
    failed = sum(trial.status in FAILED for trial in trials)
    if failed and failed >= config.max_failed_trials:
        return "max failed trial count reached"
    return None


def run_sweep(
    config: Sweep,
    base: TrainerFlags,
    out_dir: Path,
    nproc_per_node: int = 1,
    on_trial: Callable[[Trial], None] | None = None,
    resume: bool = False,
) -> SweepResult:
    """Run the sweep with at most ``config.parallel_trials`` trials at once.

    ``on_trial`` is called with each trial when it starts and when it ends. The CPU
    threads are shared out between the processes that run at once. ``resume`` continues
    each trial from the checkpoint an earlier sweep left; otherwise trials start afresh.
    """
    if not resume:
        for trial_dir in earlier_trials(out_dir):
            shutil.rmtree(trial_dir)
    pending = deque(Trial(f"trial-{i + 1}", point) for i, point in enumerate(suggest(config)))
    threads = max(1, (os.cpu_count() or 1) // (config.parallel_trials * nproc_per_node))
    started: list[Trial] = []
    running: dict[Future, Trial] = {}
    notify = on_trial or (lambda trial: None)
    with ThreadPoolExecutor(max_workers=config.parallel_trials) as pool:
        while pending or running:
            while pending and len(running) < config.parallel_trials:
                if stop_reason(started, config):
                    pending.clear()
                    break
                trial = pending.popleft()
                trial.status = "Running"
                started.append(trial)
                notify(trial)
                future = pool.submit(run_trial, trial, base, out_dir, nproc_per_node, threads)
                running[future] = trial
            if not running:
                break
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                notify(future.result())
                running.pop(future)
    return _conclude(started, config)


def _conclude(trials: list[Trial], config: Sweep) -> SweepResult:
    reason = stop_reason(trials, config) or "max trial count reached"
    status = "Failed" if reason.startswith("max failed") else "Succeeded"
    return SweepResult(trials, status, reason)
