"""The ``evaluate`` step: test metrics, a confusion matrix, a report, and the gate's decision."""

from typing import NamedTuple

from kfp import dsl
from kfp.dsl import HTML, ClassificationMetrics, Dataset, Input, Markdown, Metrics, Model, Output

from components.images import default_image


@dsl.component(base_image=default_image("components"), install_kfp_package=False)
def evaluate(
    model: Input[Model],
    dataset: Input[Dataset],
    serving: dict,
    target: str,
    metrics: Output[Metrics],
    confusion_matrix: Output[ClassificationMetrics],
    report: Output[Markdown],
    report_html: Output[HTML],
) -> NamedTuple("Evaluated", accuracy=float, Output=bool):
    """Evaluate the model and the one serving now on the test split; decide whether to deploy.

    On a cluster the serving model is what the InferenceService ``model_name`` serves, read
    from the model PVC (mounted at /mnt/model-store); locally nothing stays serving. The
    model is deployed if its accuracy reaches ``min_accuracy`` and is at least the serving
    one's plus ``min_improvement``. Prints the Katib metric line and one line with both results,
    the decision and why; logs both accuracies and losses and the confusion matrix; writes
    the report twice: Markdown and a self-contained HTML page with charts and mistakes.

    Args:
        model: The trained model directory.
        dataset: The packed dataset; its test split is used.
        serving: The checked serving parameters (the gate's among them).
        target: "cluster" or "local".
        metrics: Test accuracy and loss, and the serving model's (champion_accuracy, ...).
        confusion_matrix: Counts of (true class, predicted class).
        report: Both models side by side, the gate, per-class accuracy, the training curve.
        report_html: The same with charts, as one HTML file.

    Returns:
        accuracy: The test accuracy, in [0, 1].
        Output: Whether the gate passes the model to the deploy step (the decision).
    """
    from components.runtime.champion import find_champion
    from components.runtime.evaluation import evaluate_model_dir, run_facts
    from components.runtime.gate import decide
    from components.runtime.report import html_report, markdown_report, result_line
    from components.specs.params import Serving, check_target
    from trainer.metrics import format_metric_line

    gate = Serving.from_dict(serving)
    result, training = evaluate_model_dir(model.path, dataset.path)
    champion = find_champion(gate, check_target(target), dataset.path)
    decision = decide(result.accuracy, gate.min_accuracy, gate.min_improvement, champion)
    facts = run_facts(model.uri, dataset.path, champion, decision)
    print(format_metric_line(result.accuracy, result.loss))
    print(result_line(result, champion, decision), flush=True)
    metrics.log_metric("accuracy", result.accuracy)
    metrics.log_metric("loss", result.loss)
    if champion.accuracy is not None:
        metrics.log_metric("champion_accuracy", champion.accuracy)
        metrics.log_metric("champion_loss", champion.loss)
    confusion_matrix.log_confusion_matrix(result.class_names, result.confusion.tolist())
    with open(report.path, "w") as handle:
        handle.write(markdown_report(result, training, facts))
    with open(report_html.path, "w") as handle:
        handle.write(html_report(result, training, facts))
    return result.accuracy, decision.deploy
