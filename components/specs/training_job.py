"""The training job object of either kind, for the train step, the tune step's trials and render."""

from __future__ import annotations

from pathlib import Path

from components.specs.compat import DEFAULT_TRAINER_GENERATION
from components.specs.kinds import Target
from components.specs.params import TrainingJob
from components.specs.pods import Placement, TrainerFlags, WorkPaths
from components.specs.pytorchjob import pytorchjob
from components.specs.trainjob import trainjob


def training_job(
    api: str,
    *,
    name: str | None,
    namespace: str | None,
    job: TrainingJob,
    flags: TrainerFlags,
    placement: Placement,
    generation: str = DEFAULT_TRAINER_GENERATION,
) -> dict:
    """A PyTorchJob (``api="pytorchjob"``) or TrainJob (``"trainjob"``, of ``generation``)."""
    common = dict(name=name, namespace=namespace, job=job, args=flags.args(), placement=placement)
    if api == "pytorchjob":
        return pytorchjob(**common)
    if api == "trainjob":
        return trainjob(**common, generation=generation)
    raise ValueError(f"unknown job API {api!r}; choose pytorchjob or trainjob")


def workspace_job(
    target: Target,
    name: str | None,
    namespace: str | None,
    job: TrainingJob,
    workspace: str | Path,
    placement: Placement,
) -> tuple[dict, WorkPaths]:
    """The train step's job, reading and writing its folders in the run's ``workspace``."""
    paths = WorkPaths.under(workspace)
    flags = TrainerFlags.for_job(job, paths)
    body = training_job(
        target.api,
        name=name,
        namespace=namespace,
        job=job,
        flags=flags,
        placement=placement,
        generation=target.generation,
    )
    return body, paths
