"""The training tasks of both pipelines, on the run workspace or on a PVC of the run's own."""

from kfp import dsl, kubernetes

from components.specs.pods import GPU_TOLERATION
from components.steps.train import train, train_on_pvc
from components.steps.tune import tune, tune_on_pvc
from pipelines.settings import CompileSettings

PVC_MOUNT = "/fmnist-workspace"  # where the pvc variant mounts its PVC


class Storage:
    """Where a run's training data and job outputs live, for the compiled variant."""

    def __init__(self, settings: CompileSettings):
        self.settings, self.pvc = settings, None
        if settings.variant == "pvc":
            workspace = settings.workspace
            self.pvc = kubernetes.CreatePVC(
                pvc_name_suffix="-fmnist-workspace",
                access_modes=[workspace.access_mode],
                size=workspace.size,
                storage_class_name=workspace.storage_class,
            ).set_caching_options(False)  # a cached PVC name would point at a deleted PVC

    def train(self, dataset, job, target) -> dsl.PipelineTask:
        """The train task (GPU toleration passed to the job's pods, no caching)."""
        if self.pvc is None:
            task = train(
                dataset=dataset,
                job=job,
                target=target,
                workspace_path=dsl.WORKSPACE_PATH_PLACEHOLDER,
                run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
            )
        else:
            task = self._on_pvc(train_on_pvc(dataset=dataset, job=job, **self._pvc_args()))
        return self._cluster_task(task)

    def tune(self, dataset, job, sweep) -> dsl.PipelineTask:
        """The tune task (trials get the GPU toleration, no caching)."""
        if self.pvc is None:
            task = tune(
                dataset=dataset,
                job=job,
                sweep=sweep,
                workspace_path=dsl.WORKSPACE_PATH_PLACEHOLDER,
                run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
            )
        else:
            task = self._on_pvc(
                tune_on_pvc(dataset=dataset, job=job, sweep=sweep, **self._pvc_args())
            )
        return self._cluster_task(task)

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

    def _pvc_args(self) -> dict:
        return {
            "workspace_pvc": self.pvc.outputs["name"],
            "workspace_path": PVC_MOUNT,
            "run_id": dsl.PIPELINE_JOB_ID_PLACEHOLDER,
        }

    def _on_pvc(self, task: dsl.PipelineTask) -> dsl.PipelineTask:
        kubernetes.mount_pvc(task, pvc_name=self.pvc.outputs["name"], mount_path=PVC_MOUNT)
        return task

    def _cluster_task(self, task: dsl.PipelineTask) -> dsl.PipelineTask:
        kubernetes.add_toleration(task, **GPU_TOLERATION)  # passed through to the GPU pods
        return self.settings.step(task).set_caching_options(False)
