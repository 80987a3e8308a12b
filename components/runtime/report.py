"""The evaluation report: Markdown for the KFP UI and a self-contained HTML page with charts.

The HTML page draws the training curve (test accuracy, test loss and train loss per
epoch) and the confusion matrix as a heat map with matplotlib, inlined as SVG: no
external script, stylesheet or image, so it opens anywhere, KFP's artifact viewer
included.
"""

from __future__ import annotations

import html
import io

import numpy as np

from components.runtime.evaluation import Evaluation

BAR_WIDTH = 20  # blocks of the Markdown curve's longest bar


def markdown_report(result: Evaluation, training: dict) -> str:
    """Per-class accuracy, the most confused pairs, and the training curve, in Markdown."""
    lines = [
        "# FashionMNIST model evaluation",
        "",
        f"Test accuracy **{result.accuracy:.2%}**, loss {result.loss:.4f}, on "
        f"{int(result.confusion.sum()):,} images.",
        "",
        "## Per-class accuracy",
        "",
        "| class | accuracy | most often mistaken for |",
        "|---|---:|---|",
    ]
    for index, name in enumerate(result.class_names):
        lines.append(
            f"| {name} | {result.per_class_accuracy[index]:.2%} | {_mistaken(result, index)} |"
        )
    lines += ["", "## Training curve", ""] + _curve_table(training.get("history", []))
    return "\n".join(lines) + "\n"


def _mistaken(result: Evaluation, index: int) -> str:
    off_diagonal = result.confusion - np.diag(np.diag(result.confusion))
    worst = int(off_diagonal[index].argmax())
    count = off_diagonal[index, worst]
    return f"{result.class_names[worst]} ({count})" if count else "-"


def _curve_table(history: list[dict]) -> list[str]:
    """One row per epoch; the bar spans this run's lowest to highest test accuracy."""
    if not history:
        return ["(no training history in model.json)"]
    accuracies = [entry["accuracy"] for entry in history]
    low, high = min(accuracies), max(accuracies)
    lines = [
        f"Bars: test accuracy from {low:.2%} (shortest) to {high:.2%} (longest).",
        "",
        "| epoch | train loss | test loss | test accuracy | |",
        "|---:|---:|---:|---:|---|",
    ]
    for entry in history:
        share = (entry["accuracy"] - low) / (high - low) if high > low else 1.0
        bar = "█" * (1 + round(share * (BAR_WIDTH - 1)))
        lines.append(
            f"| {entry['epoch']} | {entry.get('train_loss', float('nan')):.4f} | "
            f"{entry['loss']:.4f} | {entry['accuracy']:.2%} | {bar} |"
        )
    return lines


def html_report(result: Evaluation, training: dict) -> str:
    """A self-contained HTML page: headline figures, both charts, per-class accuracy."""
    history = training.get("history", [])
    smoothing = training.get("config", {}).get("label_smoothing", 0)
    curve = _svg(_curve_figure(history, smoothing)) if history else "<p>(no training history)</p>"
    rows = "".join(
        f"<tr><td>{html.escape(name)}</td><td>{result.per_class_accuracy[i]:.2%}</td>"
        f"<td>{html.escape(_mistaken(result, i))}</td></tr>"
        for i, name in enumerate(result.class_names)
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>FashionMNIST model evaluation</title>
<style>body{{font-family:sans-serif;max-width:960px;margin:2em auto;color:#222}}
table{{border-collapse:collapse}}td,th{{padding:2px 10px;border-bottom:1px solid #ddd}}
td:nth-child(2){{text-align:right}}svg{{max-width:100%;height:auto}}</style></head>
<body><h1>FashionMNIST model evaluation</h1>
<p>Test accuracy <b>{result.accuracy:.2%}</b>, loss {result.loss:.4f}, on
{int(result.confusion.sum()):,} images; {len(history)} epochs.</p>
<h2>Training curve</h2>{curve}
<h2>Confusion matrix</h2>{_svg(_confusion_figure(result))}
<h2>Per-class accuracy</h2><table><tr><th>class</th><th>accuracy</th>
<th>most often mistaken for</th></tr>{rows}</table></body></html>
"""


def _curve_figure(history: list[dict], label_smoothing: float = 0):
    from matplotlib.figure import Figure

    epochs = [entry["epoch"] for entry in history]
    figure = Figure(figsize=(9, 3.4), layout="constrained")
    accuracy, loss = figure.subplots(1, 2)
    accuracy.plot(epochs, [entry["accuracy"] for entry in history], "o-", color="tab:blue")
    accuracy.set(title="Test accuracy", xlabel="epoch", ylabel="accuracy")
    accuracy.yaxis.set_major_formatter(lambda value, _: f"{value:.0%}")
    loss.plot(epochs, [entry["loss"] for entry in history], "o-", label="test loss")
    if all("train_loss" in entry for entry in history):
        train = [entry["train_loss"] for entry in history]
        # Smoothed targets and random flips make the training loss the higher one.
        label = (
            f"train loss (label smoothing {label_smoothing:g})" if label_smoothing else "train loss"
        )
        loss.plot(epochs, train, "s--", label=label)
    loss.set(title="Loss", xlabel="epoch", ylabel="loss")
    loss.legend()
    for axes in (accuracy, loss):
        axes.grid(alpha=0.3)
        axes.set_xticks(epochs)
    return figure


def _confusion_figure(result: Evaluation):
    from matplotlib.colors import PowerNorm
    from matplotlib.figure import Figure

    counts = result.confusion
    figure = Figure(figsize=(7.5, 6.5), layout="constrained")
    axes = figure.subplots()
    # A square-root scale: the mistakes (tens) stay visible beside the diagonal (hundreds).
    image = axes.imshow(counts, cmap="Blues", norm=PowerNorm(0.5, vmin=0))
    figure.colorbar(image, ax=axes, label="images (square-root scale)")
    ticks = range(len(result.class_names))
    axes.set_xticks(ticks, result.class_names, rotation=45, ha="right")
    axes.set_yticks(ticks, result.class_names)
    axes.set(xlabel="predicted class", ylabel="true class")
    threshold = counts.max() / 2
    for (row, column), count in np.ndenumerate(counts):
        color = "white" if count > threshold else "black"
        axes.text(column, row, str(count), ha="center", va="center", fontsize=8, color=color)
    return figure


def _svg(figure) -> str:
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg")
    text = buffer.getvalue()
    return text[text.index("<svg") :]
