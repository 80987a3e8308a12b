"""The Katib metric line and a parser with Katib's text-collector semantics."""

from datetime import datetime, timedelta, timezone

import pytest

from trainer import metrics
from trainer.metrics import (
    ZERO_TIME,
    Observation,
    format_metric_line,
    katib_latest,
    metric_series,
    observation_time,
    parse_metric_lines,
    parse_observations,
)

BODY = "{metricName: accuracy, metricValue: 0.9039};{metricName: loss, metricValue: 0.2756}"
NOON = datetime(2026, 11, 30, 12, 0, 0, 120034, tzinfo=timezone.utc)


def test_metric_line_is_a_utc_timestamp_then_the_exact_body():
    assert format_metric_line(0.90391, 0.27555, NOON) == f"2026-11-30T12:00:00.120034Z {BODY}"
    berlin = NOON.astimezone(timezone(timedelta(hours=1)))
    assert format_metric_line(0.90391, 0.27555, berlin).startswith("2026-11-30T12:00:00.120034Z ")


class NoonClock(datetime):
    """``datetime`` whose ``now`` is NOON (in the zone asked for, naive local without one)."""

    @classmethod
    def now(cls, tz=None):
        return NOON.astimezone(tz) if tz else NOON.astimezone().replace(tzinfo=None)


def test_a_metric_line_without_a_time_given_carries_the_clocks(monkeypatch):
    monkeypatch.setattr(metrics, "datetime", NoonClock)
    line = format_metric_line(0.90391, 0.27555)
    assert line == f"2026-11-30T12:00:00.120034Z {BODY}"
    assert observation_time(line) == NOON


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


@pytest.mark.parametrize(
    ("first_field", "expected"),
    [
        ("2026-11-30T12:00:00Z", datetime(2026, 11, 30, 12, tzinfo=timezone.utc)),
        ("2026-11-30T12:00:00.5Z", datetime(2026, 11, 30, 12, 0, 0, 500000, tzinfo=timezone.utc)),
        # Nanoseconds: the database's DATETIME(6) keeps microseconds, truncated.
        ("2026-11-30T12:00:00.123456789Z", NOON.replace(microsecond=123456)),
        ("2026-11-30T13:30:00+01:30", datetime(2026, 11, 30, 12, tzinfo=timezone.utc)),
        ("2026-11-30T10:00:00-02:00", datetime(2026, 11, 30, 12, tzinfo=timezone.utc)),
        ("2026-11-30 12:00:00Z", ZERO_TIME),  # the first field is only the date
        ("2026-11-30T12:00:00", ZERO_TIME),  # no zone: not RFC 3339
        ("2026-11-30t12:00:00z", ZERO_TIME),  # Go wants upper-case T and Z
        ("2026-02-30T12:00:00Z", ZERO_TIME),  # no such day
        ("2026-11-30T24:00:00Z", ZERO_TIME),
        ("1764504000", ZERO_TIME),  # epoch seconds count only in Katib's JSON format
        ("epoch", ZERO_TIME),
    ],
)
def test_observation_time_is_katibs(first_field, expected):
    assert observation_time(f"{first_field} {BODY}") == expected


def test_a_line_without_a_space_or_with_a_leading_one_has_the_zero_time():
    stamped = format_metric_line(0.9, 0.3, NOON)
    assert observation_time(stamped.replace(" ", "_", 1)) == ZERO_TIME
    assert observation_time(" " + stamped) == ZERO_TIME


def test_observations_carry_their_lines_time_and_old_lines_still_parse():
    later = NOON + timedelta(seconds=7)
    lines = [BODY, format_metric_line(0.91, 0.25, NOON), format_metric_line(0.92, 0.24, later)]
    assert parse_observations(lines) == [
        Observation(ZERO_TIME, "accuracy", 0.9039),
        Observation(ZERO_TIME, "loss", 0.2756),
        Observation(NOON, "accuracy", 0.91),
        Observation(NOON, "loss", 0.25),
        Observation(later, "accuracy", 0.92),
        Observation(later, "loss", 0.24),
    ]


def test_latest_is_the_last_epoch_only_with_timestamps():
    """Katib v0.19.0 (kubeflow/katib at tag v0.19.0):
    ``pkg/metricscollector/v1beta1/file-metricscollector/file-metricscollector.go``
    (``parseLogsInTextFormat``: the first field of ``strings.SplitN(line, " ", 2)`` parsed with
    ``time.RFC3339Nano``, else ``time.Time{}``), ``pkg/db/v1beta1/mysql/mysql.go`` (``time
    DATETIME(6)``, ``ORDER BY time``) and ``pkg/controller.v1beta1/trial/trial_controller_util.go``
    (``getMetrics``: ``latest`` is the last row whose time is not before the latest so far).
    """
    epochs = [(0.93, 0.20), (0.90, 0.30), (0.91, 0.25)]  # the last epoch is not the best
    stamped = [
        format_metric_line(acc, loss, NOON + timedelta(microseconds=i))
        for i, (acc, loss) in enumerate(epochs)
    ]
    # Katib's database returns rows by time, not as printed: the order must not matter.
    observed = parse_observations(reversed(stamped))
    assert katib_latest(observed, "accuracy") == 0.91
    assert katib_latest(observed, "loss") == 0.25
    assert katib_latest(observed, "precision") is None
    unstamped = [line.split(" ", 1)[1] for line in stamped]
    with pytest.raises(ValueError, match="accuracy: 3 values share the latest time 0001-01-01"):
        katib_latest(parse_observations(unstamped), "accuracy")
