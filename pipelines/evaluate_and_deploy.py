"""The tail both pipelines share: evaluate -> gate -> deploy, as one sub-pipeline.

The evaluate step decides (components/runtime/gate.py: the accuracy reaches min_accuracy
and is at least the serving model's plus min_improvement) and outputs the decision; the
gate here is only a ``dsl.If`` on it.
"""

from typing import NamedTuple

from kfp import dsl, kubernetes

from components.runtime.registry_credentials import CREDENTIALS_DIR
from components.steps.deploy import deploy
from components.steps.evaluate import evaluate
from components.steps.register import register_model
from pipelines.settings import DATA_STEP, CompileSettings
from trainer.model_dir import MODEL_STORE


class Published(NamedTuple):
    """What the tail returns."""

    accuracy: float
    metrics: dsl.Metrics
    report: dsl.Markdown
    report_html: dsl.HTML


class Outputs(NamedTuple):
    """What a run of either pipeline returns."""

    accuracy: float
    model: dsl.Model
    metrics: dsl.Metrics
    report: dsl.Markdown
    report_html: dsl.HTML


def evaluate_and_deploy_task(
    tail, trained, dataset, serving, params: dict, target, workspace
) -> Outputs:
    """Run the tail on the trained model, then release the run's workspace; the outputs."""
    published = tail(
        model=trained.outputs["model"],
        dataset=dataset,
        serving=serving.output,
        model_pvc=params["model_pvc"],
        model_registry=params["model_registry"],
        model_registry_secret=params["model_registry_secret"],
        target=target,
    )
    workspace.release(published)
    return Outputs(
        accuracy=published.outputs["accuracy"],
        model=trained.outputs["model"],
        metrics=published.outputs["metrics"],
        report=published.outputs["report"],
        report_html=published.outputs["report_html"],
    )


def on_model_volume(task, model_pvc):
    """``task`` with the model PVC mounted where the steps publish models; uncached."""
    kubernetes.mount_pvc(task, pvc_name=model_pvc, mount_path=MODEL_STORE)
    return task.set_caching_options(False)


def deploy_task(settings, model, dataset, serving, target, model_pvc, accuracy):
    """The deploy step (shown as "deploy" in either branch of ``release``).

    ``accuracy``, the evaluated one, is what the post-deploy check holds the served model to.
    """
    deployed = deploy(
        model=model,
        dataset=dataset,
        serving=serving,
        target=target,
        run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
        accuracy=accuracy,
    ).set_display_name("deploy")
    return on_model_volume(settings.step(deployed), model_pvc)


def with_registry_credentials(task, secret):
    """``task`` with the Secret ``secret`` mounted where the registry client reads its token.

    Optional: a missing Secret mounts as an empty folder, and no token is sent. KFP's driver
    names the volume after the Secret and sets ``optional`` as given (kubeflow/pipelines
    2.5.0 ``backend/src/v2/driver/driver.go``, 2.15.0 ``backend/src/v2/driver/k8s.go``).
    """
    return kubernetes.use_secret_as_volume(
        task, secret_name=secret, mount_path=CREDENTIALS_DIR, optional=True
    )


def release(settings, model, dataset, serving, target, model_pvc, model_registry, evaluated):
    """Behind the gate: serve the model; with a registry, register it and serve that version.

    Two complementary conditions rather than If/Else: the branch without a registry comes
    first, so its task keeps the name ``deploy`` that runs before this step had one.
    ``model_registry`` is the pair (address, Secret name) of pipeline parameters.
    """
    model_registry, secret = model_registry
    accuracy = evaluated.outputs["accuracy"]
    with dsl.If(model_registry == "", name="no-model-registry"):
        deploy_task(settings, model, dataset, serving, target, model_pvc, accuracy)
    with dsl.If(model_registry != "", name="model-registry"):
        registered = register_model(
            model=model,
            metrics=evaluated.outputs["metrics"],
            serving=serving,
            target=target,
            run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
            run_name=dsl.PIPELINE_JOB_NAME_PLACEHOLDER,
        )
        with_registry_credentials(on_model_volume(settings.step(registered), model_pvc), secret)
        deployed = deploy_task(settings, model, dataset, serving, target, model_pvc, accuracy)
        with_registry_credentials(deployed.after(registered), secret)


def evaluate_and_deploy_pipeline(settings: CompileSettings):
    """The sub-pipeline, its steps in the components image of ``settings``."""

    @dsl.pipeline(name="evaluate-and-deploy")
    def evaluate_and_deploy(
        model: dsl.Input[dsl.Model],
        dataset: dsl.Input[dsl.Dataset],
        serving: dict,
        model_pvc: str,
        model_registry: str,
        model_registry_secret: str,
        target: str,
    ) -> Published:
        """Evaluate the model and the serving one; deploy it if the gate passes.

        The gate: the test accuracy reaches min_accuracy and is at least the serving
        model's plus min_improvement (both in ``serving``).

        Args:
            model: The trained model directory.
            dataset: The packed dataset (its test split).
            serving: The checked serving parameters.
            model_pvc: The PVC the deploy step publishes models to.
            model_registry: The Model Registry server; empty: no registration.
            model_registry_secret: The Secret holding the registry's token, if it exists.
            target: "cluster" or "local".

        Returns:
            accuracy: The test accuracy.
            metrics: Test accuracy and loss, and the serving model's.
            report: Per-class accuracy and the training curve, in Markdown.
            report_html: The same with charts, as one HTML file.
        """
        evaluated = evaluate(model=model, dataset=dataset, serving=serving, target=target)
        # Uncached: the serving model, read from model_pvc, changes between runs.
        on_model_volume(settings.step(evaluated, DATA_STEP), model_pvc)
        # The decision is evaluate's "Output": kfp.local resolves no other output name in a
        # condition (kfp 2.x local/orchestrator/enhanced_dag_orchestrator.py,
        # _resolve_pipeline_channel, reads "<task>-<name>" as a parent's input).
        with dsl.If(evaluated.outputs["Output"] == True, name="accuracy-gate"):  # noqa: E712
            registry = (model_registry, model_registry_secret)
            release(settings, model, dataset, serving, target, model_pvc, registry, evaluated)
        return Published(
            accuracy=evaluated.outputs["accuracy"],
            metrics=evaluated.outputs["metrics"],
            report=evaluated.outputs["report"],
            report_html=evaluated.outputs["report_html"],
        )

    return evaluate_and_deploy
