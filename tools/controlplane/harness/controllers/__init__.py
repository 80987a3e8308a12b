"""The Kubeflow controllers, one module each: how each is configured and started here.

Each module has ``configure(setup) -> (processes, objects)``: the local processes to start
and the objects (its CRDs, webhook configurations pointed at loopback, config maps, Secrets)
to create before they start.
"""

from __future__ import annotations

from pathlib import Path

from harness import manifests
from harness.components import Component
from harness.controllers import (
    jobset,
    katib,
    katib_db,
    kserve,
    kueue,
    trainer,
    training_operator,
)
from harness.controllers.setup import Setup
from harness.processes import Process

ORDER = (jobset, training_operator, trainer, kueue, katib_db, katib, kserve)


def controllers(
    wanted: dict[str, Component],
    pki: dict[str, Path],
    trainer_version: str,
    kserve_version: str,
    multikueue_manager: bool = False,
) -> tuple[list[Process], list[dict]]:
    """The controller processes and the objects to apply before they start."""
    setup = Setup(
        manifests.load(wanted),
        pki,
        trainer_version,
        kserve_version,
        multikueue_manager=multikueue_manager,
    )
    return configure(ORDER, setup)


def configure(modules, setup: Setup) -> tuple[list[Process], list[dict]]:
    """Each controller module's processes and objects for ``setup``, in the modules' order."""
    processes, objects = [], []
    for module in modules:
        more_processes, more_objects = module.configure(setup)
        processes += more_processes
        objects += more_objects
    return processes, objects
