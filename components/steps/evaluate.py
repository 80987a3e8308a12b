"""The ``evaluate`` step: test metrics, a confusion matrix and a report of the trained model."""

from kfp import dsl
from kfp.dsl import HTML, ClassificationMetrics, Dataset, Input, Markdown, Metrics, Model, Output

from components.images import default_image


@dsl.component(base_image=default_image("components"), install_kfp_package=False)
def evaluate(
    model: Input[Model],
    dataset: Input[Dataset],
    min_accuracy: float,
    metrics: Output[Metrics],
    confusion_matrix: Output[ClassificationMetrics],
    report: Output[Markdown],
    report_html: Output[HTML],
) -> float:
    """Evaluate the model on the packed test split and return its accuracy.

    Prints the Katib metric line and the result in words, logs accuracy and loss and the
    confusion matrix with the class names, and writes the report twice: Markdown (the run,
    the gate, per-class accuracy, training curve) and a self-contained HTML page that adds
    the curve's chart, a confusion heat map and the most confident mistakes.

    Args:
        model: The trained model directory.
        dataset: The packed dataset; its test split is used.
        min_accuracy: The accuracy gate (the deploy step runs at or above it), for the report.
        metrics: Test accuracy and loss.
        confusion_matrix: Counts of (true class, predicted class).
        report: Per-class accuracy and the training curve, in Markdown.
        report_html: The same with charts, as one HTML file.

    Returns:
        The test accuracy, in [0, 1].
    """
    from components.runtime.evaluation import evaluate_model_dir, run_facts
    from components.runtime.report import gate_sentence, html_report, markdown_report
    from trainer.metrics import format_metric_line

    result, training = evaluate_model_dir(model.path, dataset.path)
    facts = run_facts(model.uri, dataset.path, min_accuracy)
    print(format_metric_line(result.accuracy, result.loss))
    print(
        f"test accuracy {result.accuracy:.4f}, loss {result.loss:.4f} on "
        f"{int(result.confusion.sum()):,} images. Gate: "
        + gate_sentence(result.accuracy, min_accuracy),
        flush=True,
    )
    metrics.log_metric("accuracy", result.accuracy)
    metrics.log_metric("loss", result.loss)
    confusion_matrix.log_confusion_matrix(result.class_names, result.confusion.tolist())
    with open(report.path, "w") as handle:
        handle.write(markdown_report(result, training, facts))
    with open(report_html.path, "w") as handle:
        handle.write(html_report(result, training, facts))
    return result.accuracy
