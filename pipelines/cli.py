"""The ``fmnist`` command: run the pipeline locally, compile, render, sweep, submit, schedule.

Each subcommand lives in ``pipelines/commands/<name>.py`` and exposes
``register(subparsers)``, which adds its parser and sets ``handler`` to a function
``handler(args) -> int``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

COMMANDS = ("run", "compile", "render", "sweep", "submit", "schedule")


class UsageError(Exception):
    """A problem with what the user asked for; printed without a traceback."""


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="fmnist",
        description="FashionMNIST on Kubeflow: pack -> PyTorchJob -> evaluate -> KServe.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"pipelines.commands.{name}").register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``fmnist`` console script."""
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args) or 0
    except UsageError as exc:
        print(f"fmnist {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"fmnist {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`fmnist render ... | head`); say nothing more.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
