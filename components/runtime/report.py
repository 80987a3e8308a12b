"""The evaluation report: Markdown for the KFP UI and a self-contained HTML page with charts.

Both say what was run (time, commit, parameters, data slice, training time, where the
model is), show the model beside the one serving now (test accuracy and loss on the same
images, where each is), and give the gate's decision and why. The HTML page draws the
training curve (test accuracy, test loss and train loss per epoch; two epochs at least)
and the confusion matrix as a heat map with matplotlib, inlined as SVG, and shows the
most confident mistakes as small inline PNGs: no external script, stylesheet or image, so
it opens anywhere, KFP's artifact viewer included.
"""

from __future__ import annotations

import base64
import html
import io
import re

import numpy as np

from components.runtime.evaluation import Evaluation, Mistake, RunFacts
from components.runtime.gate import Champion, Decision

BAR_WIDTH = 20  # blocks of the Markdown curve's longest bar
REPORTED_PARAMETERS = (  # of the trainer's config in model.json, in this order
    "epochs", "batch_size", "lr", "optimizer", "scheduler", "weight_decay", "momentum",
    "label_smoothing", "augment", "batch_norm", "precision", "seed", "device",
)  # fmt: skip
MISTAKE_SCALE = 3  # a 28x28 image is shown at 84x84 pixels
UNKNOWN_COMMIT = "unknown (not run from a git checkout, and the image names no commit)"


def result_line(result: Evaluation, champion: Champion, decision: Decision) -> str:
    """The step's one line: both models' results, the gate's decision and why."""
    serving = ""
    if champion.accuracy is not None:
        serving = f"; serving model: accuracy {champion.accuracy:.4f}, loss {champion.loss:.4f}"
    return (
        f"test accuracy {result.accuracy:.4f}, loss {result.loss:.4f} on "
        f"{int(result.confusion.sum()):,} images{serving}. Gate: {decision.reason}"
    )


def comparison_rows(result: Evaluation, facts: RunFacts) -> list[tuple[str, str, str]]:
    """(what, this model, the serving model) rows: the two side by side."""
    champion = facts.champion
    if champion.accuracy is not None:
        accuracy, loss = f"{champion.accuracy:.2%}", f"{champion.loss:.4f}"
    else:
        accuracy = loss = "not evaluated" if champion.serves else "-"
    serving = champion.uri if champion.serves else f"nothing serves ({champion.note})"
    return [
        ("test accuracy", f"{result.accuracy:.2%}", accuracy),
        ("test loss", f"{result.loss:.4f}", loss),
        ("model", facts.model_uri, serving),
    ]


def run_rows(facts: RunFacts, training: dict) -> list[tuple[str, str]]:
    """(name, value) rows describing the run: when, which code, what data, which settings."""
    config = training.get("config", {})
    history = training.get("history", [])
    counts = facts.data.get("counts") or {}
    slice_word = "all" if facts.data.get("complete") else "a slice:"
    data = (
        f"{slice_word} {counts.get('train', 0):,} training and {counts.get('test', 0):,} test "
        f"images from {facts.data.get('source') or 'an unknown source'}"
    )
    seconds = sum(entry.get("seconds", 0) for entry in history)
    processes = training.get("world_size", 1)
    trained = f"{len(history)} epoch(s) in {seconds:.1f} s on {processes} process(es)"
    parameters = ", ".join(
        f"{name}={config[name]}" for name in REPORTED_PARAMETERS if name in config
    )
    return [
        ("evaluated", facts.evaluated_at),
        ("commit", facts.commit or UNKNOWN_COMMIT),
        ("data", data),
        ("training", trained),
        ("parameters", parameters or "unknown"),
        ("model", facts.model_uri),
    ]


def markdown_report(result: Evaluation, training: dict, facts: RunFacts | None = None) -> str:
    """The run, the gate, per-class accuracy, the most confused pairs, the curve, in Markdown."""
    lines = [
        "# FashionMNIST model evaluation",
        "",
        f"Test accuracy **{result.accuracy:.2%}**, loss {result.loss:.4f}, on "
        f"{int(result.confusion.sum()):,} images.",
        "",
    ]
    if facts is not None:
        lines += [f"**Gate.** {_literal(facts.decision.reason)}", ""]
        lines += ["| | this model | serving model |", "|---|---|---|"]
        lines += [
            f"| {name} | {_literal(ours)} | {_literal(theirs)} |"
            for name, ours, theirs in comparison_rows(result, facts)
        ]
        lines.append("")
        lines += ["## Run", "", "| | |", "|---|---|"]
        lines += [f"| {name} | {_literal(value)} |" for name, value in run_rows(facts, training)]
        lines.append("")
    lines += [
        "## Per-class accuracy",
        "",
        "| class | accuracy | most often mistaken for |",
        "|---|---:|---|",
    ]
    for index, name in enumerate(result.class_names):
        lines.append(
            f"| {_literal(name)} | {result.per_class_accuracy[index]:.2%} | "
            f"{_literal(_mistaken(result, index))} |"
        )
    lines += ["", "## Training curve", ""] + _curve_table(training.get("history", []))
    return "\n".join(lines) + "\n"


def _literal(text: str) -> str:
    """``text`` shown as written, in one table cell.

    Markdown's emphasis, code, table, HTML and entity characters are escaped; line breaks
    and other control characters become spaces. The KFP UI renders the report with
    markdown-to-jsx, where ``batch_size=128, ..., weight_decay=`` was emphasis, and the
    underscores were lost. Class names come from the packed dataset's manifest, a file
    the step did not write.
    """
    text = re.sub(r"[\x00-\x1f\x7f]+", " ", text)
    return re.sub(r"([\\`*_|\[\]<>&])", r"\\\1", text)


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


def html_report(result: Evaluation, training: dict, facts: RunFacts | None = None) -> str:
    """A self-contained HTML page: the run, the gate, both charts, mistakes, per-class accuracy."""
    history = training.get("history", [])
    rows = "".join(
        f"<tr><td>{html.escape(name)}</td><td>{result.per_class_accuracy[i]:.2%}</td>"
        f"<td>{html.escape(_mistaken(result, i))}</td></tr>"
        for i, name in enumerate(result.class_names)
    )
    run = ""
    if facts is not None:
        passed = facts.decision.deploy
        side_by_side = "".join(
            f"<tr><th>{name}</th><td>{html.escape(ours)}</td><td>{html.escape(theirs)}</td></tr>"
            for name, ours, theirs in comparison_rows(result, facts)
        )
        facts_rows = "".join(
            f"<tr><th>{name}</th><td>{html.escape(str(value))}</td></tr>"
            for name, value in run_rows(facts, training)
        )
        run = (
            f'<p class="gate {"passed" if passed else "failed"}"><b>Gate.</b> '
            f"{html.escape(facts.decision.reason)}</p>"
            '<table class="facts"><tr><th></th><th>this model</th><th>serving model</th></tr>'
            f"{side_by_side}</table>"
            f'<h2>Run</h2><table class="facts">{facts_rows}</table>'
        )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>FashionMNIST model evaluation</title>
<style>body{{font-family:sans-serif;max-width:960px;margin:2em auto;color:#222}}
table{{border-collapse:collapse}}td,th{{padding:2px 10px;border-bottom:1px solid #ddd}}
th{{text-align:left}}td:nth-child(2){{text-align:right}}.facts td{{text-align:left}}
svg{{max-width:100%;height:auto}}.gate{{padding:6px 10px;border-left:5px solid}}
.passed{{background:#eaf6ea;border-color:#2e7d32}}.failed{{background:#fdecea;border-color:#c62828}}
figure{{display:inline-block;margin:4px 5px;text-align:center;font-size:12px;width:104px}}
figure img{{image-rendering:pixelated;border:1px solid #ccc}}</style></head>
<body><h1>FashionMNIST model evaluation</h1>
<p>Test accuracy <b>{result.accuracy:.2%}</b>, loss {result.loss:.4f}, on
{int(result.confusion.sum()):,} images; {len(history)} epoch(s).</p>
{run}
<h2>Training curve</h2>{_curve_html(history, training)}
<h2>Confusion matrix</h2>{_svg(_confusion_figure(result))}
<h2>Most confident mistakes</h2>{_mistakes_html(result)}
<h2>Per-class accuracy</h2><table><tr><th>class</th><th>accuracy</th>
<th>most often mistaken for</th></tr>{rows}</table></body></html>
"""


def _curve_html(history: list[dict], training: dict) -> str:
    """The curve chart; for one epoch its figures in a sentence (one point makes no curve)."""
    if not history:
        return "<p>(no training history)</p>"
    if len(history) == 1:
        entry = history[0]
        train = entry.get("train_loss")
        train_text = f", train loss {train:.4f}" if train is not None else ""
        return (
            f"<p>One epoch: test accuracy {entry['accuracy']:.2%}, test loss "
            f"{entry['loss']:.4f}{train_text}. The curve needs two epochs or more.</p>"
        )
    smoothing = training.get("config", {}).get("label_smoothing", 0)
    return _svg(_curve_figure(history, smoothing))


def _mistakes_html(result: Evaluation) -> str:
    if not result.mistakes:
        return "<p>None: every test image was classified correctly.</p>"
    return "".join(_mistake_figure(mistake, result.class_names) for mistake in result.mistakes)


def _mistake_figure(mistake: Mistake, class_names: list[str]) -> str:
    """One misclassified image as an inline PNG, captioned with the true and predicted class."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(mistake.image.astype(np.uint8), mode="L").save(buffer, "PNG")
    source = base64.b64encode(buffer.getvalue()).decode()
    size = mistake.image.shape[0] * MISTAKE_SCALE
    true, predicted = class_names[mistake.true_class], class_names[mistake.predicted_class]
    return (
        f'<figure><img src="data:image/png;base64,{source}" width="{size}" height="{size}" '
        f'alt="test image {mistake.index}"><figcaption>#{mistake.index}<br>'
        f"true: <b>{html.escape(true)}</b><br>predicted: {html.escape(predicted)} "
        f"({mistake.confidence:.0%})</figcaption></figure>"
    )


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
