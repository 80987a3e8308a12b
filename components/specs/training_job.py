"""The training job object of either kind, for the train step, the tune step's trials and render."""

from __future__ import annotations

from components.specs.compat import DEFAULT_TRAINER_GENERATION
from components.specs.params import TrainingJob
from components.specs.pods import Placement, TrainerFlags
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
