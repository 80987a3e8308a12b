"""The Katib metric line and a parser with Katib's text-collector semantics."""

from trainer.metrics import format_metric_line, metric_series, parse_metric_lines


def test_metric_line_is_exact():
    assert format_metric_line(0.90391, 0.27555) == (
        "{metricName: accuracy, metricValue: 0.9039};{metricName: loss, metricValue: 0.2756}"
    )


def test_parser_reads_every_match_of_wanted_metrics_only():
    lines = [
        "epoch 1 [100/200] loss=0.5 samples/s=10",  # mentions loss, no filter match
        format_metric_line(0.8, 0.5),
        "{metricName: accuracy-top5, metricValue: 0.99}",  # not an exact name match
        "{metricName: precision, metricValue: 0.7}",  # line names no wanted metric
        format_metric_line(0.85, 0.4),
        "{metricName: loss, metricValue: -1.5}",
    ]
    observed = parse_metric_lines(lines, ["accuracy", "loss"])
    assert observed == [
        ("accuracy", 0.8),
        ("loss", 0.5),
        ("accuracy", 0.85),
        ("loss", 0.4),
        ("loss", -1.5),
    ]
    assert metric_series(observed, "accuracy") == [0.8, 0.85]
    assert parse_metric_lines(lines, ["accuracy"]) == [("accuracy", 0.8), ("accuracy", 0.85)]


def test_default_katib_format_does_not_match():
    assert parse_metric_lines(["accuracy=0.9", "loss=0.3"]) == []
