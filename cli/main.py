"""The ``fmnist`` command: run, serve, compile, render, sweep, submit, schedule; ``models``.

``models`` lists, shows and deploys the model versions a pipeline registered. Each
subcommand lives in ``cli/commands/<name>.py`` and exposes ``register(subparsers)``, which
adds its parser and sets ``handler`` to a function ``handler(args) -> int``.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import os
import sys

from cli.errors import UsageError

COMMANDS = ("run", "serve", "compile", "render", "sweep", "submit", "schedule", "models")
PACKAGE = "fmnist-pipeline"
REPORTED_VERSIONS = ("kfp", "torch", "kserve")  # shown by --version beside the package's


class OneLineParser(argparse.ArgumentParser):
    """A parser whose errors are one line (``--help`` shows the usage), exit status 2."""

    def error(self, message: str):
        """Print ``PROG: error: MESSAGE`` and exit 2."""
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every subcommand registered."""
    parser = OneLineParser(
        prog="fmnist",
        description="FashionMNIST on Kubeflow: pack -> PyTorchJob -> evaluate -> KServe.",
    )
    parser.add_argument("--version", action="version", version=version_text())
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"cli.commands.{name}").register(subparsers)
    return parser


def version_text() -> str:
    """``fmnist 0.1.0 (kfp 2.17.3, torch 2.9.1, kserve 0.21.0)``, from the installed metadata."""
    found = []
    for name in REPORTED_VERSIONS:
        try:
            found.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            found.append(f"{name} not installed")
    return f"fmnist {importlib.metadata.version(PACKAGE)} ({', '.join(found)})"


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
