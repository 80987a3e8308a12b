"""Tasks of the steps whose pods share the run's workspace (train, tune), on either backend.

The workspace variant (KFP >= 2.15) mounts the run's workspace through its
``PipelineConfig``; the pvc variant creates a PVC for the run (``OWN_WORKSPACE``), mounts
it on each such task, tells the step its name, and deletes it at the end. Both run the
same components; the pvc variant compiles them ``without_task_config``.
"""

from kfp import dsl, kubernetes
from kfp.dsl.python_component import PythonComponent

from components.specs.pods import GPU_TOLERATION, OWN_WORKSPACE, OWN_WORKSPACE_MOUNT_PATH
from components.steps.task_config import without_task_config
from pipelines.settings import CompileSettings


class WorkspaceTasks:
    """Adds tasks on a run's workspace (and the pvc variant's PVC) to a pipeline."""

    def __init__(self, settings: CompileSettings):
        self.settings, self.pvc = settings, None
        if settings.variant == "pvc":
            workspace = settings.workspace
            self.pvc = kubernetes.CreatePVC(
                pvc_name_suffix=f"-{OWN_WORKSPACE}",
                access_modes=[workspace.access_mode],
                size=workspace.size,
                storage_class_name=workspace.storage_class,
            ).set_caching_options(False)  # a cached PVC name would point at a deleted PVC

    def task(self, step: PythonComponent, **inputs) -> dsl.PipelineTask:
        """A task of ``step`` on the workspace: the GPU toleration passed on, never cached.

        ``step`` takes ``workspace_path``, ``run_id``, a ``dsl.TaskConfig`` and an optional
        ``workspace_pvc``, as ``train`` and ``tune`` do; ``inputs`` are its other inputs.
        """
        if self.pvc is None:
            task = step(
                **inputs,
                workspace_path=dsl.WORKSPACE_PATH_PLACEHOLDER,
                run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
            )
        else:
            pvc_name = self.pvc.outputs["name"]
            task = without_task_config(step)(
                **inputs,
                workspace_pvc=pvc_name,
                workspace_path=OWN_WORKSPACE_MOUNT_PATH,
                run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
            )
            kubernetes.mount_pvc(task, pvc_name=pvc_name, mount_path=OWN_WORKSPACE_MOUNT_PATH)
        kubernetes.add_toleration(task, **GPU_TOLERATION)  # passed through to the GPU pods
        return self.settings.step(task).set_caching_options(False)

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
