"""The pack-dataset and evaluate steps through ``.python_func`` on real FashionMNIST data,
and the evaluation report (Markdown, and HTML with charts, the run's facts, the gate and
the most confident mistakes)."""

import base64
import contextlib
import html
import io
import json
import re
from pathlib import Path

import numpy as np
import pytest
from kfp import dsl
from PIL import Image

from components.runtime.champion import LOCAL_NOTE
from components.runtime.commit import source_commit
from components.runtime.evaluation import Evaluation, RunFacts, evaluate_model_dir
from components.runtime.gate import Champion, decide
from components.runtime.report import UNKNOWN_COMMIT, html_report, markdown_report
from components.specs.params import ParamError, Serving
from components.steps.evaluate import evaluate
from components.steps.pack import pack_dataset
from trainer.data import CLASS_NAMES, load_packed

MIN_ACCURACY = 0.5
NOTHING_SERVES = (Champion(), decide(0.9, MIN_ACCURACY, 0.0, Champion()))


def test_pack_dataset_writes_the_packed_slice(tmp_path, fashion_mnist_dir, capsys):
    dataset = dsl.Dataset(uri=str(tmp_path / "dataset"))
    pack_dataset.python_func(train_limit=300, test_limit=100, dataset=dataset)
    packed = load_packed(dataset.path)
    assert (len(packed.train), len(packed.test)) == (300, 100)
    assert dataset.metadata["counts"] == {"train": 300, "test": 100}
    assert dataset.metadata["complete"] is False
    assert "packed 300 training and 100 test images" in capsys.readouterr().out


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory, trained_model_dir, packed_small):
    """One local evaluate call on the small trained model: (outputs, accuracy, stdout)."""
    out = tmp_path_factory.mktemp("evaluate")
    outputs = {
        "metrics": dsl.Metrics(uri=str(out / "metrics")),
        "confusion_matrix": dsl.ClassificationMetrics(uri=str(out / "confusion")),
        "report": dsl.Markdown(uri=str(out / "report.md")),
        "report_html": dsl.HTML(uri=str(out / "report.html")),
    }
    capture = out / "stdout.txt"
    with capture.open("w") as handle, contextlib.redirect_stdout(handle):
        accuracy, deploy = evaluate.python_func(
            model=dsl.Model(uri=str(trained_model_dir)),
            dataset=dsl.Dataset(uri=str(packed_small)),
            serving=Serving(min_accuracy=MIN_ACCURACY).to_dict(),
            target="local",
            **outputs,
        )
    assert deploy is True
    return outputs, accuracy, capture.read_text()


def test_evaluate_matches_the_trainers_own_test_pass(evaluated, trained_model_dir):
    outputs, accuracy, _ = evaluated
    card = json.loads((Path(trained_model_dir) / "model.json").read_text())
    assert 0.5 < accuracy <= 1
    assert accuracy == pytest.approx(card["metrics"]["accuracy"], abs=1e-6)
    assert outputs["metrics"].metadata["accuracy"] == accuracy
    assert outputs["metrics"].metadata["loss"] == pytest.approx(card["metrics"]["loss"], abs=1e-4)


def test_evaluate_prints_the_katib_metric_line(evaluated):
    outputs, accuracy, stdout = evaluated
    loss = outputs["metrics"].metadata["loss"]
    line = (
        f"{{metricName: accuracy, metricValue: {accuracy:.4f}}};"
        f"{{metricName: loss, metricValue: {loss:.4f}}}"
    )
    (printed,) = [text for text in stdout.splitlines() if text.endswith(line)]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z " + re.escape(line), printed)


def test_evaluate_logs_the_confusion_matrix_with_class_names(evaluated, packed_small):
    outputs, accuracy, _ = evaluated
    matrix = outputs["confusion_matrix"].metadata["confusionMatrix"]
    assert [spec["displayName"] for spec in matrix["annotationSpecs"]] == list(CLASS_NAMES)
    rows = [row["row"] for row in matrix["rows"]]
    labels = load_packed(packed_small).test.labels
    assert [sum(row) for row in rows] == [int((labels == k).sum()) for k in range(10)]
    assert sum(rows[k][k] for k in range(10)) == round(accuracy * len(labels))


def test_evaluate_writes_a_markdown_report(evaluated):
    outputs, accuracy, _ = evaluated
    report = Path(outputs["report"].path).read_text()
    assert f"Test accuracy **{accuracy:.2%}**" in report
    for name in CLASS_NAMES:
        assert re.search(rf"^\| {re.escape(name)} \| \d+\.\d\d% \| ", report, re.MULTILINE)
    curve = [line for line in report.splitlines() if re.match(r"^\| [12] \| ", line)]
    assert len(curve) == 2  # two epochs in the trained model's history


def test_pack_dataset_refuses_a_bad_limit_before_reading_anything(tmp_path):
    dataset = dsl.Dataset(uri=str(tmp_path / "dataset"))
    with pytest.raises(ParamError, match="train_limit must be an integer >= 1, got 0"):
        pack_dataset.python_func(train_limit=0, test_limit=100, dataset=dataset)
    assert not Path(dataset.path).exists()


def test_evaluate_writes_a_self_contained_html_report_with_both_charts(evaluated):
    outputs, accuracy, _ = evaluated
    page = Path(outputs["report_html"].path).read_text()
    assert f"Test accuracy <b>{accuracy:.2%}</b>" in page
    assert page.count("<svg") == 2  # the training curve and the confusion heat map
    assert "<script" not in page and "<link" not in page
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)  # nothing fetched
    for name in ("Test accuracy", "Loss", "predicted class", "true class"):
        assert name in page
    for name in CLASS_NAMES:
        assert name in page


def test_the_markdown_run_rows_keep_underscores_and_pipes_as_written():
    """The KFP UI renders the report with markdown-to-jsx: ``batch_size=128, ...,
    weight_decay=`` in a table cell was emphasis there, shown as "batchsize ... weightdecay"
    (seen in KFP 2.15.0's UI). Each run row's value is escaped, so it reads as written."""
    config = {"batch_size": 128, "weight_decay": 0.0001, "label_smoothing": 0.05}
    facts = RunFacts("2026-12-03 17:29 UTC", None, "pvc://my_models/m|1", {}, *NOTHING_SERVES)
    result = Evaluation(0.9, 0.3, np.eye(10, dtype=int), list(CLASS_NAMES))
    report = markdown_report(result, {"config": config}, facts)
    (parameters,) = [line for line in report.splitlines() if line.startswith("| parameters |")]
    assert parameters == (
        r"| parameters | batch\_size=128, weight\_decay=0.0001, label\_smoothing=0.05 |"
    )
    assert r"| model | pvc://my\_models/m\|1 |" in report.splitlines()


def test_the_markdown_curve_bars_show_the_differences():
    """83% and 92% must not draw bars of nearly the same length (they did: 17 and 18)."""
    history = [
        {"epoch": epoch, "accuracy": accuracy, "loss": 0.3, "train_loss": 0.4}
        for epoch, accuracy in enumerate([0.83, 0.88, 0.92], 1)
    ]
    result = Evaluation(0.92, 0.3, np.eye(10, dtype=int), list(CLASS_NAMES))
    report = markdown_report(result, {"history": history})
    bars = [line.rsplit("|", 2)[1].strip() for line in report.splitlines() if "█" in line]
    assert [len(bar) for bar in bars] == [1, 12, 20]
    assert "from 83.00% (shortest) to 92.00% (longest)" in report


def test_evaluate_says_the_result_and_the_gate_in_one_line(evaluated):
    outputs, accuracy, stdout = evaluated
    loss = outputs["metrics"].metadata["loss"]
    assert (
        f"test accuracy {accuracy:.4f}, loss {loss:.4f} on 1,000 images. Gate: Passed: "
        f"{accuracy:.2%} >= 50.00% (min_accuracy); nothing serves yet ({LOCAL_NOTE}); the "
        "deploy step follows.\n" in stdout
    )
    assert stdout.count("Gate: ") == 1
    assert "champion_accuracy" not in outputs["metrics"].metadata  # none locally


def test_the_report_shows_the_run_and_the_gate(evaluated, trained_model_dir):
    outputs, accuracy, _ = evaluated
    card = json.loads((Path(trained_model_dir) / "model.json").read_text())
    seconds = sum(entry["seconds"] for entry in card["training"]["history"])
    for output in ("report_html", "report"):
        page = html.unescape(Path(outputs[output].path).read_text())
        if output == "report":  # Markdown: read it the way a renderer shows it
            page = re.sub(r"\\(.)", r"\1", page)
        assert f"Passed: {accuracy:.2%} >= 50.00% (min_accuracy)" in page
        assert f"nothing serves ({LOCAL_NOTE})" in page  # the serving model's column
        assert str(trained_model_dir) in page
        assert "a slice: 4,000 training and 1,000 test images from " in page
        assert f"2 epoch(s) in {seconds:.1f} s on 1 process(es)" in page
        assert "epochs=2, batch_size=128, lr=" in page
        assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", page)
        assert (source_commit() or UNKNOWN_COMMIT) in page


def test_the_report_shows_the_most_confident_mistakes_as_images(
    evaluated, trained_model_dir, packed_small
):
    outputs, _, _ = evaluated
    page = Path(outputs["report_html"].path).read_text()
    result, _ = evaluate_model_dir(str(trained_model_dir), str(packed_small))
    test = load_packed(packed_small).test
    assert len(result.mistakes) == 8
    confidences = [mistake.confidence for mistake in result.mistakes]
    assert confidences == sorted(confidences, reverse=True)
    figures = re.findall(
        r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)" width="84" height="84" '
        r'alt="test image (\d+)"><figcaption>#\d+<br>true: <b>([^<]+)</b><br>'
        r"predicted: ([^<]+) \((\d+)%\)",
        page,
    )
    assert len(figures) == 8
    for (encoded, index, true, predicted, percent), mistake in zip(
        figures, result.mistakes, strict=True
    ):
        index = int(index)
        assert index == mistake.index
        assert true == CLASS_NAMES[test.labels[index]] != predicted.strip()
        assert predicted.strip() == CLASS_NAMES[mistake.predicted_class]
        assert int(percent) == round(mistake.confidence * 100)
        with Image.open(io.BytesIO(base64.b64decode(encoded))) as image:
            assert np.array_equal(np.asarray(image), test.images[index])  # the very image


def test_a_one_epoch_report_has_no_one_point_chart():
    history = [{"epoch": 1, "accuracy": 0.8, "loss": 0.55, "train_loss": 0.7, "seconds": 3.5}]
    result = Evaluation(0.8, 0.55, np.eye(10, dtype=int) * 5, list(CLASS_NAMES))
    decision = decide(0.8, 0.9, 0.0, Champion())
    facts = RunFacts("2026-12-01 10:00 UTC", None, "/m", {"counts": {}}, Champion(), decision)
    page = html.unescape(html_report(result, {"history": history, "config": {"epochs": 1}}, facts))
    assert page.count("<svg") == 1  # the confusion matrix only
    assert "One epoch: test accuracy 80.00%, test loss 0.5500, train loss 0.7000." in page
    assert "Not passed: 80.00% < 90.00% (min_accuracy); the model is not deployed." in page
    assert "None: every test image was classified correctly." in page
    assert "1 epoch(s) in 3.5 s" in page and UNKNOWN_COMMIT in page


HOSTILE_NAMES = ["a|b", "*bold*", "<script>alert(1)</script>", "two\nlines", "&lt;x&gt;"]


def table_cells(row: str) -> list[str]:
    """A GFM table row's cells as rendered: split at unescaped pipes, escapes undone.

    GitHub Flavored Markdown 0.29 "Tables (extension)": a ``|`` inside a cell is written
    ``\\|``; CommonMark 0.30 "Backslash escapes": a backslash before ASCII punctuation makes
    it a literal character (no emphasis, no HTML, no entity).
    """
    cells = re.split(r"(?<!\\)\|", row)[1:-1]
    return [re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", cell.strip()) for cell in cells]


def test_the_markdown_report_shows_hostile_class_names_as_written():
    """Class names come from the dataset's manifest: none breaks the table or becomes HTML."""
    names = HOSTILE_NAMES + [f"class {k}" for k in range(len(HOSTILE_NAMES), 10)]
    confusion = np.eye(10, dtype=int) * 5
    confusion[1, 2] = 3  # "*bold*" is most often mistaken for the <script> one
    report = markdown_report(Evaluation(0.8, 0.5, confusion, names), {})
    table = report.split("## Per-class accuracy")[1].split("## Training curve")[0]
    rows = [line for line in table.strip().splitlines() if line.startswith("|")][2:]
    assert len(rows) == 10
    cells = [table_cells(row) for row in rows]
    assert [len(row) for row in cells] == [3] * 10
    assert [row[0] for row in cells] == [name.replace("\n", " ") for name in names]
    assert cells[1][2] == "<script>alert(1)</script> (3)"
    assert not re.search(r"(?<!\\)[<&*]", table)  # no tag, entity or emphasis left unescaped


@pytest.mark.parametrize(
    ("champion", "serving_cells"),
    [
        (
            Champion("pvc://fmnist-models/fm/r|1", 0.91, 0.25),
            ["91.00%", "0.2500", "pvc://fmnist-models/fm/r|1"],
        ),
        (
            Champion("s3://b/<m>", note="it is not on model_pvc fmnist-models"),
            ["not evaluated", "not evaluated", "s3://b/<m>"],
        ),
        (
            Champion(note="no InferenceService a/b"),
            ["-", "-", "nothing serves (no InferenceService a/b)"],
        ),
    ],
    ids=["evaluated", "unreadable", "nothing-serves"],
)
def test_both_reports_show_the_model_beside_the_serving_one(champion, serving_cells):
    result = Evaluation(0.9, 0.3, np.eye(10, dtype=int), list(CLASS_NAMES))
    decision = decide(0.9, MIN_ACCURACY, 0.0, champion)
    facts = RunFacts("2026-12-03 17:29 UTC", None, "/m/new", {}, champion, decision)
    lines = markdown_report(result, {}, facts).splitlines()
    start = lines.index("| | this model | serving model |")
    rows = [table_cells(line) for line in lines[start + 2 : start + 5]]
    assert rows == [
        ["test accuracy", "90.00%", serving_cells[0]],
        ["test loss", "0.3000", serving_cells[1]],
        ["model", "/m/new", serving_cells[2]],
    ]
    assert f"**Gate.** {decision.reason}" == re.sub(r"\\(.)", r"\1", lines[start - 2])
    page = html_report(result, {}, facts)
    cells = [html.unescape(cell) for cell in re.findall(r"<td>([^<]*)</td>", page)[:6]]
    assert cells == ["90.00%", serving_cells[0], "0.3000", serving_cells[1], "/m/new",
                     serving_cells[2]]  # fmt: skip
    assert "<m>" not in page  # escaped
    assert ("gate passed" if decision.deploy else "gate failed") in page
