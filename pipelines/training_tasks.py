"""The train and tune tasks of both pipelines, on the run workspace or on a PVC of the run's own.

The workspace variant (KFP >= 2.15) mounts the run's workspace through its
``PipelineConfig``; the pvc variant creates a PVC for the run (``OWN_WORKSPACE``), mounts
it, tells the steps its name, and deletes it at the end. Both use the same train and tune
components; the pvc variant compiles them ``without_task_config``.
"""

from kfp import dsl, kubernetes

from components.specs.pods import GPU_TOLERATION, OWN_WORKSPACE, OWN_WORKSPACE_MOUNT_PATH
from components.steps.task_config import without_task_config
from components.steps.train import train
from components.steps.tune import tune
from pipelines.settings import CompileSettings


class TrainingTasks:
    """Adds a run's train and tune tasks (and the pvc variant's PVC) to a pipeline."""

    def __init__(self, settings: CompileSettings):
        self.settings, self.pvc = settings, None
        self.train, self.tune = train, tune
        if settings.variant == "pvc":
            workspace = settings.workspace
            self.pvc = kubernetes.CreatePVC(
                pvc_name_suffix=f"-{OWN_WORKSPACE}",
                access_modes=[workspace.access_mode],
                size=workspace.size,
                storage_class_name=workspace.storage_class,
            ).set_caching_options(False)  # a cached PVC name would point at a deleted PVC
            self.train, self.tune = without_task_config(train), without_task_config(tune)

    def train_task(self, dataset, job, target) -> dsl.PipelineTask:
        """The train task (GPU toleration passed to the job's pods, no caching)."""
        return self._on_workspace(
            self.train(dataset=dataset, job=job, target=target, **self._args())
        )

    def tune_task(self, dataset, job, sweep) -> dsl.PipelineTask:
        """The tune task (trials get the GPU toleration, no caching)."""
        return self._on_workspace(self.tune(dataset=dataset, job=job, sweep=sweep, **self._args()))

    def release(self, last: dsl.PipelineTask) -> None:
        """Delete the run's PVC once ``last`` has succeeded (the pvc variant's own clean-up).

        A failed run keeps it, like its failed job, for inspection: an exit handler cannot
        delete it, since KFP's exit task may not depend on the task that created the PVC
        (kfp ``dsl/tasks_group.py``). docs/operations.md says how to clean up.
        """
        if self.pvc is not None:
            kubernetes.DeletePVC(pvc_name=self.pvc.outputs["name"]).after(last).set_caching_options(
                False
            )

    def _args(self) -> dict:
        """Where the step sees the workspace, and (pvc variant) the PVC that holds it."""
        if self.pvc is None:
            return {
                "workspace_path": dsl.WORKSPACE_PATH_PLACEHOLDER,
                "run_id": dsl.PIPELINE_JOB_ID_PLACEHOLDER,
            }
        return {
            "workspace_pvc": self.pvc.outputs["name"],
            "workspace_path": OWN_WORKSPACE_MOUNT_PATH,
            "run_id": dsl.PIPELINE_JOB_ID_PLACEHOLDER,
        }

    def _on_workspace(self, task: dsl.PipelineTask) -> dsl.PipelineTask:
        if self.pvc is not None:
            pvc_name = self.pvc.outputs["name"]
            kubernetes.mount_pvc(task, pvc_name=pvc_name, mount_path=OWN_WORKSPACE_MOUNT_PATH)
        kubernetes.add_toleration(task, **GPU_TOLERATION)  # passed through to the GPU pods
        return self.settings.step(task).set_caching_options(False)
