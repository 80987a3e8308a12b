"""The objects the pipeline's steps would create, built here from the same builders.

``fmnist render`` prints them, ``fmnist run`` writes the ones its parameters would make
on a cluster, ``fmnist sweep`` renders and applies the Experiment. What only exists at
run time is a stand-in: the run id and the run's workspace PVC.
"""

from __future__ import annotations

import sys

from components.specs.compat import DEFAULT_TRAINER_GENERATION, TRAINER_RELEASES
from components.specs.params import Serving, TrainingJob
from components.specs.pods import WORKSPACE_VOLUME
from components.specs.sweep import Sweep

RUN_ID = "RUN-ID"  # stands in for the pipeline run's id
WORKSPACE_CLAIM = f"RUN-NAME-{WORKSPACE_VOLUME}"  # the PVC KFP creates for a run's workspace


def training_job_object(
    job: TrainingJob,
    api: str,
    name: str | None,
    namespace: str | None,
    generation: str = DEFAULT_TRAINER_GENERATION,
) -> dict:
    """The train step's job (the pipeline's workspace and GPU toleration)."""
    from components.specs.kinds import Target
    from components.specs.pods import WORKSPACE_MOUNT_PATH, workspace_placement
    from components.specs.training_job import workspace_job

    target = Target(api, generation)
    placement = workspace_placement(WORKSPACE_CLAIM)
    return workspace_job(target, name, namespace, job, WORKSPACE_MOUNT_PATH, placement)[0]


def inferenceservice_object(serving: Serving, namespace: str | None, legacy: bool) -> dict:
    """The InferenceService the deploy step applies, serving the model of run RUN-ID."""
    from components.specs.compat import deployment_mode_name
    from components.specs.inferenceservice import inference_service
    from trainer.model_dir import pvc_uri, store_path

    storage_uri = pvc_uri(serving.model_pvc, store_path(serving.model_name, RUN_ID))
    mode = deployment_mode_name(serving.mode, legacy)
    return inference_service(
        serving=serving, namespace=namespace, storage_uri=storage_uri, mode_annotation=mode
    )


def experiment_for(
    job: TrainingJob,
    sweep: Sweep,
    name: str,
    namespace: str | None,
    claim: str,
    api: str,
    generation: str,
) -> dict:
    """The Katib Experiment of the tune step and ``fmnist sweep``, its trials on ``claim``."""
    from components.runtime.katib import build_experiment
    from components.specs.kinds import Target
    from components.specs.pods import WORKSPACE_MOUNT_PATH, workspace_placement

    placement = workspace_placement(claim)
    target = Target(api, generation)
    return build_experiment(job, sweep, target, name, namespace, WORKSPACE_MOUNT_PATH, placement)


def rendered_experiment(
    job: TrainingJob,
    sweep: Sweep,
    name: str,
    namespace: str | None,
    claim: str,
    trainer_release: str,
) -> dict:
    """The Experiment rendered without a cluster: ``job_api`` auto means PyTorchJob trials."""
    api = "trainjob" if job.job_api == "trainjob" else "pytorchjob"
    generation = TRAINER_RELEASES[trainer_release]
    return experiment_for(job, sweep, name, namespace, claim, api, generation)


def dump_yaml(obj: dict, stream=None) -> None:
    """One object as YAML, without anchors (Master and Worker share a pod template)."""
    import yaml

    class Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data):
            return True

    yaml.dump(obj, stream or sys.stdout, Dumper=Dumper, sort_keys=False)
