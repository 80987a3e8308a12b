"""The command line sits on top: nothing imports it, its commands share through modules.

Every source file, the CLI's and the cluster harness's alike, stays within the size budgets.

Imports are read from the sources with ``ast`` (every ``import`` and ``from ... import``,
at module level or inside a function), so an import a test run never reaches counts too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BELOW_THE_CLI = ("trainer", "serving", "components", "pipelines")
MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 60


def sources(*packages: str) -> list[Path]:
    return sorted(path for package in packages for path in (REPO / package).rglob("*.py"))


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports (absolute imports; the project uses no relative ones)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def within(modules: set[str], package: str) -> set[str]:
    return {name for name in modules if name == package or name.startswith(f"{package}.")}


def relative(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def test_the_sources_are_found():
    assert len(sources(*BELOW_THE_CLI)) > 40
    assert REPO / "tools" / "controlplane" / "harness" / "node.py" in sources(*SIZED)
    assert REPO / "cli" / "commands" / "sweep.py" in sources("cli")


@pytest.mark.parametrize("path", sources(*BELOW_THE_CLI), ids=relative)
def test_nothing_below_the_cli_imports_it(path):
    assert within(imported_modules(path), "cli") == set()


@pytest.mark.parametrize("path", sources("cli"), ids=relative)
def test_only_the_entry_point_reaches_the_commands(path):
    """A command imports no other command; what two commands share is a module of ``cli``."""
    commands = within(imported_modules(path), "cli.commands")
    own = {f"cli.commands.{path.stem}"} if path.parent.name == "commands" else set()
    assert commands - own - {"cli.commands"} == set()


# Where the size budgets hold: every source folder (issue 20), the harness included.
SIZED = (*BELOW_THE_CLI, "cli", "tools", "benchmarks")


@pytest.mark.parametrize("path", sources(*SIZED), ids=relative)
def test_the_sources_are_in_small_pieces(path):
    text = path.read_text()
    assert len(text.splitlines()) <= MAX_FILE_LINES
    long = {
        node.name: node.end_lineno - node.lineno + 1
        for node in ast.walk(ast.parse(text))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    }
    assert long == {}


def test_imports_are_read_inside_functions_too(tmp_path):
    module = tmp_path / "module.py"
    module.write_text("import os\n\ndef late():\n    from cli.errors import UsageError\n")
    assert within(imported_modules(module), "cli") == {"cli.errors", "cli.errors.UsageError"}
