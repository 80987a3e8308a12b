"""The fashion-mnist-tune pipeline: validate -> pack -> Katib -> train the best -> publish.

It runs on a cluster only (Katib chooses the trials).
"""

from kfp import dsl

from components.specs.params import DataSlice, Serving, TrainingJob
from components.specs.sweep import ALWAYS_SEARCHED, Sweep
from components.steps.pack import pack_dataset
from components.steps.train import train
from components.steps.tune import tune
from components.steps.validate import validate_serving, validate_sweep, validate_training
from pipelines.evaluate_and_deploy import (
    Outputs,
    evaluate_and_deploy_pipeline,
    evaluate_and_deploy_task,
)
from pipelines.parameters import composed_of, fields_of
from pipelines.settings import DATA_STEP, CompileSettings
from pipelines.workspace_tasks import WorkspaceTasks

TARGET = "cluster"


def fashion_mnist_tune_pipeline(settings: CompileSettings | None = None):
    """The pipeline compiled with ``settings`` (images, workspace, backend variant)."""
    settings = settings or CompileSettings()
    tail = evaluate_and_deploy_pipeline(settings)
    config = None if settings.variant == "pvc" else settings.workspace.pipeline_config()

    @dsl.pipeline(name="fashion-mnist-tune", pipeline_config=config)
    @composed_of(Sweep, DataSlice, (TrainingJob, ALWAYS_SEARCHED), Serving)
    def fashion_mnist_tune(params: dict) -> Outputs:
        """Tune lr and epochs with Katib, train with the best, evaluate, gate and deploy.

        Every trial runs the training job with its own lr and epochs (and momentum, when
        searched); the final training takes the best trial's.

        Returns:
            accuracy: The test accuracy of the model trained with the best parameters.
            model: That model's directory.
            metrics: Its test accuracy and loss.
            report: Per-class accuracy and the training curve, in Markdown.
            report_html: The same with charts, as one HTML file.
        """
        job_values = fields_of(params, TrainingJob, exclude=ALWAYS_SEARCHED)
        # The searched values are every trial's own: check the job with the ranges' ends.
        checked = {name: params[f"{name}_max"] for name in ALWAYS_SEARCHED}
        job = settings.check(validate_training(target=TARGET, **job_values, **checked))
        sweep = settings.step(validate_sweep(**fields_of(params, Sweep)))
        serving = settings.check(validate_serving(target=TARGET, **fields_of(params, Serving)))
        packed = settings.step(
            pack_dataset(**fields_of(params, DataSlice)).after(job, sweep, serving), DATA_STEP
        )
        dataset = packed.outputs["dataset"]
        workspace = WorkspaceTasks(settings)
        tuned = workspace.task(tune, dataset=dataset, job=job.output, sweep=sweep.output)
        trained = workspace.task(train, dataset=dataset, job=tuned.outputs["job"], target=TARGET)
        return evaluate_and_deploy_task(tail, trained, dataset, serving, params, TARGET, workspace)

    return fashion_mnist_tune


fashion_mnist_tune = fashion_mnist_tune_pipeline()
