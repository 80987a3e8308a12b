"""The fashion-mnist pipeline: validate -> pack -> train -> evaluate -> gate -> deploy."""

from kfp import dsl

from components.specs.params import DataSlice, Serving, TrainingJob
from components.steps.pack import pack_dataset
from components.steps.train import train
from components.steps.validate import validate_serving, validate_training
from pipelines.evaluate_and_deploy import (
    Outputs,
    evaluate_and_deploy_pipeline,
    evaluate_and_deploy_task,
)
from pipelines.parameters import TARGET, composed_of, fields_of
from pipelines.settings import DATA_STEP, CompileSettings
from pipelines.workspace_tasks import WorkspaceTasks


def fashion_mnist_pipeline(settings: CompileSettings | None = None):
    """The pipeline compiled with ``settings`` (images, workspace, backend variant)."""
    settings = settings or CompileSettings()
    on_pvc = settings.variant == "pvc"
    tail = evaluate_and_deploy_pipeline(settings)
    config = None if on_pvc else settings.workspace.pipeline_config()
    sources = (
        (DataSlice, TrainingJob, Serving) if on_pvc else (TARGET, DataSlice, TrainingJob, Serving)
    )

    @dsl.pipeline(name="fashion-mnist", pipeline_config=config)
    @composed_of(*sources)
    def fashion_mnist(params: dict) -> Outputs:
        """FashionMNIST from raw files to a served model: distributed training, KServe serving.

        Returns:
            accuracy: The test accuracy of the trained model.
            model: The trained model directory.
            metrics: Test accuracy and loss.
            report: Per-class accuracy and the training curve, in Markdown.
            report_html: The same with charts, as one HTML file.
        """
        target = "cluster" if on_pvc else params["target"]
        job = settings.check(validate_training(target=target, **fields_of(params, TrainingJob)))
        serving = settings.check(validate_serving(target=target, **fields_of(params, Serving)))
        packed = settings.step(
            pack_dataset(**fields_of(params, DataSlice)).after(job, serving), DATA_STEP
        )
        dataset = packed.outputs["dataset"]
        workspace = WorkspaceTasks(settings)
        trained = workspace.task(train, dataset=dataset, job=job.output, target=target)
        return evaluate_and_deploy_task(tail, trained, dataset, serving, params, target, workspace)

    return fashion_mnist


fashion_mnist = fashion_mnist_pipeline()
