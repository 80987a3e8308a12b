"""The Katib metric line: how rank 0 prints it and how Katib's StdOut collector reads it.

Katib's text collector takes a line's first space-separated field as the time of every
observation on the line when it parses as RFC 3339, else the zero time; its database
orders a trial's observations by that time, and the metric strategy ``latest`` takes the
last of them (ties come back in any order). So each line leads with the time it was
printed, and the last epoch is the latest.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime, timedelta, timezone
from typing import NamedTuple

# Katib's default filter is `name=value`; every Experiment we build sets this one instead.
KATIB_METRICS_FILTER = r"{metricName: ([\w|-]+), metricValue: ((-?\d+)(\.\d+)?)}"
_FILTER = re.compile(KATIB_METRICS_FILTER)
# What Go's time.Parse(time.RFC3339Nano, ...) accepts: optional fraction, Z or +hh:mm.
_RFC3339 = re.compile(
    r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:[.,](\d+))?(?:Z|([+-])(\d\d):(\d\d))"
)
# Katib's time.Time{} for a line without a timestamp.
ZERO_TIME = datetime(1, 1, 1, tzinfo=timezone.utc)


class Observation(NamedTuple):
    """One metric value as Katib records it: the line's time, the name, the value."""

    time: datetime
    name: str
    value: float


def format_metric_line(accuracy: float, loss: float, now: datetime | None = None) -> str:
    """``<RFC 3339 UTC time> {metricName: accuracy, metricValue: 0.9039};{metricName: loss, ...}``.

    The time has microseconds, the precision of Katib's ``DATETIME(6)`` column.
    """
    stamp = (now or datetime.now(timezone.utc)).astimezone(timezone.utc)
    return (
        f"{stamp:%Y-%m-%dT%H:%M:%S.%f}Z "
        f"{{metricName: accuracy, metricValue: {accuracy:.4f}}};"
        f"{{metricName: loss, metricValue: {loss:.4f}}}"
    )


def observation_time(line: str) -> datetime:
    """The time Katib gives a line: its first space-separated field if RFC 3339, else zero."""
    first, space, _ = line.partition(" ")
    match = _RFC3339.fullmatch(first) if space else None
    if match is None:
        return ZERO_TIME
    *fields, fraction, sign, hours, minutes = match.groups()
    offset = timedelta(hours=int(hours or 0), minutes=int(minutes or 0))
    try:
        stamp = datetime(
            *map(int, fields),
            int((fraction or "0")[:6].ljust(6, "0")),  # the database keeps microseconds
            tzinfo=timezone(-offset if sign == "-" else offset),
        )
    except ValueError:  # out of range: month 13, 25 o'clock, a 24 h offset
        return ZERO_TIME
    return stamp.astimezone(timezone.utc)


def parse_observations(
    lines: Iterable[str], metric_names: Iterable[str] = ("accuracy", "loss")
) -> list[Observation]:
    """Every observation Katib's text collector would record, in order.

    Like Katib: a line is read only if it mentions a wanted metric name, every filter
    match on it counts, a match is kept only if its name is exactly a wanted one, and
    all of a line's observations carry the line's :func:`observation_time`.
    """
    wanted = set(metric_names)
    observed = []
    for line in lines:
        if not any(name in line for name in wanted):
            continue
        time = observation_time(line)
        for match in _FILTER.finditer(line):
            name, value = match.group(1).strip(), match.group(2)
            if name in wanted:
                observed.append(Observation(time, name, float(value)))
    return observed


def parse_metric_lines(
    lines: Iterable[str], metric_names: Iterable[str] = ("accuracy", "loss")
) -> list[tuple[str, float]]:
    """The (name, value) pairs of :func:`parse_observations`, for lines with or without times."""
    return [(name, value) for _, name, value in parse_observations(lines, metric_names)]


def metric_series(observations: list[tuple[str, float]], name: str) -> list[float]:
    """The values of one metric, in the order they were printed."""
    return [value for metric, value in observations if metric == name]


def katib_latest(observations: list[Observation], name: str) -> float | None:
    """The value Katib's ``latest`` strategy picks: the one with the last time.

    Raises:
        ValueError: several different values share the last time, so Katib's pick
            depends on the database's row order (lines without a timestamp).
    """
    values = [(time, value) for time, metric, value in observations if metric == name]
    if not values:
        return None
    last = max(time for time, _ in values)
    candidates = {value for time, value in values if time == last}
    if len(candidates) > 1:
        raise ValueError(f"{name}: {len(candidates)} values share the latest time {last}")
    return candidates.pop()
