"""``fmnist schedule``: recurring runs on Kubeflow Pipelines: create, list, disable, delete.

KFP's cron has six fields, seconds first (robfig/cron): ``0 0 2 * * *`` is 02:00 every
day. A five-field Unix cron would be read with seconds first and run at the wrong times,
so it is refused with the six-field spelling to use instead.
"""

import argparse
import re
from dataclasses import dataclass
from datetime import datetime, timezone

from cli.errors import UsageError
from cli.flags import command_with_examples
from cli.server import add_server_flags, check_host, connect, kfp_token, quiet, ui_url
from cli.upload import add_pipeline_flags, plan_or_upload, require_text
from components.specs.table import text_table

SUMMARY = "create, list, disable or delete recurring runs on Kubeflow"
DESCRIPTION = """\
Schedule a pipeline: upload it as a new version (like fmnist submit) and create a
recurring run on a cron schedule (KFP's 6 fields, seconds first) or a fixed interval,
with at most --max-concurrency runs at once (--dry-run: check it all and print it,
contacting nothing). Or manage existing recurring runs with --list, --disable ID and
--delete ID.
"""
EPILOG = """\
examples:
  # every day at 02:00 UTC, one run at a time, no backfill of missed days
  fmnist schedule --host http://localhost:8080 --cron "0 0 2 * * *" --param epochs=10
  # every 6 hours from a start date until an end date, up to 2 at once, with catch-up
  fmnist schedule --host http://localhost:8080 --interval 6h --max-concurrency 2 \\
      --catchup --start-time 2026-01-01T00:00:00Z --end-time 2026-06-30T00:00:00Z
  fmnist schedule --host http://localhost:8080 --list
  fmnist schedule --host http://localhost:8080 --disable 5f3c...
  fmnist schedule --host http://localhost:8080 --delete 5f3c...
"""
DESCRIPTORS = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
# (field, smallest, largest, names for 1.. or 0..) of the six cron fields, in order.
CRON_FIELDS = (
    ("second", 0, 59, ()),
    ("minute", 0, 59, ()),
    ("hour", 0, 23, ()),
    ("day of month", 1, 31, ()),
    ("month", 1, 12, ("JAN FEB MAR APR MAY JUN JUL AUG SEP OCT NOV DEC".split())),
    ("day of week", 0, 6, ("SUN MON TUE WED THU FRI SAT".split())),
)
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
GO_DURATION = re.compile(r"^(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+$")


def parse_cron(text: str) -> str:
    """A KFP cron expression (6 fields or a descriptor), checked field by field."""
    text = " ".join(text.split())
    if text in DESCRIPTORS or (text.startswith("@every ") and GO_DURATION.match(text[7:])):
        return text
    parts = text.split(" ")
    if len(parts) == 5:
        raise UsageError(
            f"--cron {text!r} has 5 fields, but KFP's cron has 6, seconds first: "
            f"did you mean '0 {text}'?"
        )
    if len(parts) != 6:
        raise UsageError(
            f"--cron {text!r} must have 6 fields (second minute hour day-of-month month "
            f"day-of-week) or be one of {', '.join(DESCRIPTORS)}, @every DURATION"
        )
    for index, part in enumerate(parts):
        _check_cron_field(part, index)
    return text


def _check_cron_field(text: str, index: int) -> None:
    name, low, high, names = CRON_FIELDS[index]
    for item in text.split(","):
        base, slash, step = item.partition("/")
        wildcard = base == "*" or (base == "?" and name.startswith("day of"))
        bounds = [] if wildcard else base.split("-")
        values = [_cron_value(bound, low, names) for bound in bounds]
        if (
            (slash and not step.isdigit())
            or len(bounds) > 2
            or any(value is None or not low <= value <= high for value in values)
        ):
            raise UsageError(f"--cron: the {name} field {text!r} must use {low}-{high}, *, ?")
        if slash and int(step) < 1:  # robfig/cron refuses it; a step of 0 never advances
            raise UsageError(f"--cron: the {name} field {text!r} must have a step of at least 1")


def _cron_value(text: str, low: int, names: tuple[str, ...]) -> int | None:
    if text.isdigit():
        return int(text)
    upper = text.upper()
    return names.index(upper) + low if upper in names else None


def parse_interval(text: str) -> int:
    """Seconds from ``3600``, ``90s``, ``30m``, ``6h``, ``1d`` or ``1h30m``."""
    parts = re.findall(r"(\d+)([smhd])", text)
    if text.isdigit():
        seconds = int(text)
    elif parts and "".join(a + b for a, b in parts) == text:
        seconds = sum(int(amount) * UNITS[unit] for amount, unit in parts)
    else:
        raise UsageError(f"--interval {text!r} must be seconds or like 90s, 30m, 6h, 1d, 1h30m")
    if seconds < 1:
        raise UsageError("--interval must be at least 1 second")
    return seconds


def parse_time(text: str, flag_name: str) -> str:
    """An RFC 3339 time with a zone, as KFP stores it: ``2026-01-01T00:00:00Z`` (UTC)."""
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise UsageError(
            f"{flag_name} {text!r} must be an RFC 3339 time with a zone, e.g. 2026-01-01T02:00:00Z"
        )
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Trigger:
    """When a recurring run starts runs, checked."""

    cron: str | None
    interval_seconds: int | None
    start_time: str | None
    end_time: str | None
    max_concurrency: int
    catchup: bool

    def describe(self) -> str:
        """E.g. ``cron '0 0 2 * * *'`` or ``every 21600 s``."""
        return f"cron {self.cron!r}" if self.cron else f"every {self.interval_seconds} s"

    def details(self) -> str:
        """The whole trigger in words, for ``--dry-run``."""
        window = "".join(
            f" {word} {moment}"
            for word, moment in (("from", self.start_time), ("until", self.end_time))
            if moment
        )
        catchup = "catch-up" if self.catchup else "no catch-up"
        return f"{self.describe()}{window}, at most {self.max_concurrency} at once, {catchup}"


def trigger_from_args(args: argparse.Namespace) -> Trigger:
    """The schedule flags, checked before anything is uploaded."""
    if not (args.cron or args.interval):
        raise UsageError("give --cron or --interval (or --list, --disable ID, --delete ID)")
    if not 1 <= args.max_concurrency <= 10:
        raise UsageError(
            f"--max-concurrency must be 1..10 (KFP's range), got {args.max_concurrency}"
        )
    start = args.start_time and parse_time(args.start_time, "--start-time")
    end = args.end_time and parse_time(args.end_time, "--end-time")
    if start and end and end <= start:
        raise UsageError(f"--end-time {end} must be after --start-time {start}")
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    if end and end <= now:
        raise UsageError(f"--end-time {end} is in the past (now: {now}): no run would start")
    return Trigger(
        cron=args.cron and parse_cron(args.cron),
        interval_seconds=args.interval and parse_interval(args.interval),
        start_time=start or None,
        end_time=end or None,
        max_concurrency=args.max_concurrency,
        catchup=args.catchup,
    )


def register(subparsers) -> None:
    """Add ``fmnist schedule``."""
    parser = command_with_examples(subparsers, "schedule", SUMMARY, DESCRIPTION, EPILOG)
    add_server_flags(parser)
    manage = parser.add_argument_group("manage").add_mutually_exclusive_group()
    manage.add_argument("--list", action="store_true", help="list recurring runs and exit")
    manage.add_argument("--disable", metavar="ID", help="disable a recurring run and exit")
    manage.add_argument("--delete", metavar="ID", help="delete a recurring run and exit")
    when = parser.add_argument_group("schedule")
    every = when.add_mutually_exclusive_group()
    creating = [
        every.add_argument("--cron", help="KFP cron: 6 fields, seconds first, e.g. '0 0 2 * * *'"),
        every.add_argument("--interval", help="a fixed period: seconds, or 90s, 30m, 6h, 1d"),
        when.add_argument(
            "--max-concurrency", type=int, default=1, help="runs at once, 1..10 (default: 1)"
        ),
        when.add_argument(
            "--catchup",
            action=argparse.BooleanOptionalAction,
            default=False,
            help="start the runs missed while paused or behind schedule (default: no)",
        ),
        when.add_argument("--start-time", help="RFC 3339, e.g. 2026-01-01T00:00:00Z"),
        when.add_argument("--end-time", help="RFC 3339; no runs after it"),
        when.add_argument("--name", help="the recurring run's name (default: NAME schedule)"),
        *add_pipeline_flags(parser),
    ]
    parser.set_defaults(handler=schedule_command, creating_flags=creating)


def schedule_command(args: argparse.Namespace) -> int:
    """Create a recurring run, or list, disable or delete existing ones."""
    if args.list or args.disable or args.delete:
        refuse_creating_flags(args)
        return manage(args)
    trigger = trigger_from_args(args)
    require_text(args.name, "--name")
    uploaded = plan_or_upload(
        args,
        lambda plan: f"recurring run: {args.name or f'{plan.name} schedule'}, {trigger.details()}",
    )
    if uploaded is None:
        return 0
    with quiet(args.host):
        recurring = uploaded.client.create_recurring_run(
            experiment_id=uploaded.experiment_id,
            job_name=args.name or f"{uploaded.name} schedule",
            start_time=trigger.start_time,
            end_time=trigger.end_time,
            interval_second=trigger.interval_seconds,
            cron_expression=trigger.cron,
            max_concurrency=trigger.max_concurrency,
            no_catchup=not trigger.catchup,
            params=uploaded.params,
            pipeline_id=uploaded.pipeline_id,
            version_id=uploaded.version_id,
        )
    rid = recurring.recurring_run_id
    print(f"recurring run {rid} ({trigger.describe()}, version {uploaded.version_id})")
    print(ui_url(args.host, f"recurringrun/details/{rid}"))
    return 0


def refuse_creating_flags(args: argparse.Namespace) -> None:
    """``--list``, ``--disable`` and ``--delete`` take none of the flags of a new schedule."""
    given = [
        action.option_strings[0]
        for action in args.creating_flags
        if getattr(args, action.dest) != action.default
    ]
    if given:
        managing = "--list" if args.list else "--disable" if args.disable else "--delete"
        raise UsageError(f"{managing} takes no {', '.join(given)} (those create a schedule)")


def manage(args: argparse.Namespace) -> int:
    """``--list``, ``--disable ID`` or ``--delete ID``."""
    token = kfp_token(args)
    check_host(args.host, token)
    client = connect(args.host, token, args.namespace)
    with quiet(args.host):  # silences the client's prints, so ours come after
        if args.disable:
            client.disable_recurring_run(args.disable)
            message = f"disabled recurring run {args.disable}"
        elif args.delete:
            client.delete_recurring_run(args.delete)
            message = f"deleted recurring run {args.delete}"
        else:
            found = client.list_recurring_runs(page_size=100, namespace=args.namespace)
            message = recurring_table(found.recurring_runs or [])
    print(message)
    return 0


def recurring_table(runs) -> str:
    """One aligned line per recurring run: id, status, trigger, concurrency, catch-up, name."""
    rows = [["ID", "STATUS", "TRIGGER", "MAX CONCURRENCY", "CATCHUP", "NAME"]]
    for run in runs:
        trigger = run.trigger
        if trigger and trigger.cron_schedule:
            when = f"cron {trigger.cron_schedule.cron}"
        else:
            when = f"every {trigger.periodic_schedule.interval_second} s" if trigger else "-"
        catchup = "no" if run.no_catchup else "yes"
        rows.append(
            [
                run.recurring_run_id,
                run.status or run.mode,
                when,
                str(run.max_concurrency),
                catchup,
                run.display_name,
            ]
        )
    return text_table(rows)
