"""The Katib metric line: how rank 0 prints it and how Katib's StdOut collector reads it."""

from __future__ import annotations

import re
from collections.abc import Iterable

# Katib's default filter is `name=value`; every Experiment we build sets this one instead.
KATIB_METRICS_FILTER = r"{metricName: ([\w|-]+), metricValue: ((-?\d+)(\.\d+)?)}"
_FILTER = re.compile(KATIB_METRICS_FILTER)


def format_metric_line(accuracy: float, loss: float) -> str:
    """``{metricName: accuracy, metricValue: 0.9039};{metricName: loss, metricValue: 0.2756}``."""
    return (
        f"{{metricName: accuracy, metricValue: {accuracy:.4f}}};"
        f"{{metricName: loss, metricValue: {loss:.4f}}}"
    )


def parse_metric_lines(
    lines: Iterable[str], metric_names: Iterable[str] = ("accuracy", "loss")
) -> list[tuple[str, float]]:
    """Every (name, value) Katib's text collector would record, in order.

    Like Katib: a line is read only if it mentions a wanted metric name, every filter
    match on it counts, and a match is kept only if its name is exactly a wanted one.
    """
    wanted = set(metric_names)
    observed = []
    for line in lines:
        if not any(name in line for name in wanted):
            continue
        for match in _FILTER.finditer(line):
            name, value = match.group(1).strip(), match.group(2)
            if name in wanted:
                observed.append((name, float(value)))
    return observed


def metric_series(observations: list[tuple[str, float]], name: str) -> list[float]:
    """The values of one metric, in the order they were printed."""
    return [value for metric, value in observations if metric == name]
