"""The tests import the project's packages, not the test folders named like them."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("cli", "components", "pipelines", "serving", "trainer")


def test_each_package_resolves_to_the_repository_on_the_tests_sys_path():
    """On pytest's ``pythonpath`` (pyproject.toml), in a fresh interpreter, before anything
    else imports them, each package is the repository's regular package: a test folder of
    the same name (tests/pipelines has no ``__init__``) made ``pipelines`` a namespace package
    without its ``__init__`` attributes, and ``from pipelines import PIPELINES`` failed."""
    setting = re.search(r"^pythonpath = (\[.*\])$", (REPO / "pyproject.toml").read_text(), re.M)
    entries = [str(REPO / path) for path in ast.literal_eval(setting[1])]
    code = (
        f"import sys; sys.path[:0] = {entries!r}\n"
        f"for name in {PACKAGES!r}:\n"
        "    print(name, getattr(__import__(name), '__file__', None))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/")
    assert done.returncode == 0, done.stderr
    found = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    assert found == {name: str(REPO / name / "__init__.py") for name in PACKAGES}
