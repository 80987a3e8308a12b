"""The mutation check: one-line breaking changes that the tests must catch (issue 24).

Each mutant names a file, a line's old text, its new text and the tests that must fail
with it. The check copies this checkout (``git ls-files``: tracked files and new files git
does not ignore) to a scratch directory, runs those tests there once unchanged (they must
pass), then for each mutant applies the change, runs its tests with a short per-test
timeout, and restores the file. The working tree is never touched.

Results: ``caught`` (a test failed; the table names the first), ``SURVIVED`` (every test
passed: a test is missing or blind), ``STALE`` (the old text is not in the file exactly
once: the code moved on and the list needs updating, which is a failure of the list, not
of the tests), ``TIMEOUT`` (the run took longer than ``--run-timeout``). Anything but
``caught`` fails the check.

Usage: ``python tools/mutants.py [--list] [--keep] [NAME ...]`` (default: every mutant);
``make mutants``. The tests read the real data from ``$FASHION_MNIST_DIR``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mutant_list import MUTANTS, Mutant

REPO = Path(__file__).resolve().parents[1]
TEST_TIMEOUT = 120  # seconds per test (pytest-timeout), as the default tier
RUN_TIMEOUT = 600  # seconds per mutant run


def copy_checkout(destination: Path) -> None:
    """Copy the files git knows or would add (not ignored ones) into ``destination``."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        check=True,
        capture_output=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = REPO / name
        if source.is_file():  # a file deleted in the working tree stays listed
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def test_env(root: Path) -> dict[str, str]:
    """The environment for runs in ``root``: its packages first (before the editable install)."""
    path = os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path}


def check_imports(root: Path) -> None:
    """Fail unless the scratch copy's packages are the ones imported there."""
    packages = "trainer, components, serving, pipelines, cli"
    script = f"import {packages}; print(*(m.__file__ for m in ({packages})))"
    found = subprocess.run(
        [sys.executable, "-c", script],
        cwd=root,
        env=test_env(root),
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    outside = [path for path in found if not Path(path).is_relative_to(root)]
    if outside:
        sys.exit(f"mutants: the scratch copy imports packages from elsewhere: {outside}")


def run_tests(root: Path, tests: tuple[str, ...], run_timeout: float) -> tuple[str, str, float]:
    """Run ``tests`` in ``root``: (outcome, the first failure's summary line or '', seconds)."""
    command = [sys.executable, "-m", "pytest", *tests, "-x", "-q", "-p", "no:cacheprovider"]
    command += ["-o", f"timeout={TEST_TIMEOUT}"]
    started = time.monotonic()
    try:
        done = subprocess.run(
            command,
            cwd=root,
            env=test_env(root),
            capture_output=True,
            text=True,
            timeout=run_timeout,
        )
    except subprocess.TimeoutExpired:
        return "TIMEOUT", "", time.monotonic() - started
    seconds = time.monotonic() - started
    if done.returncode == 0:
        return "passed", "", seconds
    failed = re.search(r"^(?:FAILED|ERROR) .*$", done.stdout, re.MULTILINE)
    if done.returncode in (1, 2) and failed:  # 1: a test failed; 2: interrupted by -x
        return "failed", failed.group(0), seconds
    return "error", (done.stdout + done.stderr).strip().splitlines()[-1:][0], seconds


def failed_test(summary: str) -> str:
    """The test id of a ``FAILED <id> - <message>`` line."""
    return re.sub(r"^(?:FAILED|ERROR) ", "", summary).split(" - ", 1)[0]


def main(argv: list[str] | None = None) -> int:
    """Run the mutants named (all by default); 0 when every one is caught."""
    parser = argparse.ArgumentParser(prog="tools/mutants.py", description=__doc__.split("\n")[0])
    parser.add_argument("names", nargs="*", help="mutants to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory")
    parser.add_argument("--run-timeout", type=float, default=RUN_TIMEOUT, help="seconds per run")
    args = parser.parse_args(argv)
    known = {mutant.name: mutant for mutant in MUTANTS}
    unknown = [name for name in args.names if name not in known]
    if unknown:
        parser.error(f"unknown mutant(s): {', '.join(unknown)}; see --list")
    chosen = [known[name] for name in args.names] or MUTANTS
    if args.list:
        for mutant in chosen:
            print(f"{mutant.name:36} {mutant.path}: {mutant.old!r} -> {mutant.new!r}")
        return 0

    started = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="fmnist-mutants-"))
    try:
        copy_checkout(root)
        check_imports(root)
        baseline = tuple(dict.fromkeys(test for mutant in chosen for test in mutant.tests))
        outcome, failing, seconds = run_tests(root, baseline, args.run_timeout * 2)
        print(
            f"baseline: the {len(baseline)} test selections unchanged: {outcome} ({seconds:.0f} s)"
        )
        if outcome != "passed":
            print(f"mutants: the tests fail without any mutation ({failing}); fix that first")
            return 1
        rows = [run_mutant(root, mutant, args.run_timeout) for mutant in chosen]
    finally:
        if args.keep:
            print(f"scratch copy kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    print_table(rows)
    bad = [row for row in rows if row[1] != "caught"]
    total = time.monotonic() - started
    print(f"{len(rows) - len(bad)} of {len(rows)} mutants caught; total {total:.0f} s")
    return 1 if bad else 0


def run_mutant(root: Path, mutant: Mutant, run_timeout: float) -> tuple[str, str, float, str]:
    """(name, result, seconds, detail) of one mutant; the file is restored afterwards."""
    original = mutant.apply(root)
    if original is None:
        target = root / mutant.path
        found = target.read_text().count(mutant.old) if target.is_file() else 0
        return mutant.name, "STALE", 0.0, f"{mutant.path}: old text found {found} times, not once"
    try:
        outcome, failing, seconds = run_tests(root, mutant.tests, run_timeout)
    finally:
        (root / mutant.path).write_text(original)
    result = {"failed": "caught", "passed": "SURVIVED"}.get(outcome, outcome.upper())
    detail = ", ".join(mutant.tests) if outcome == "passed" else failed_test(failing)
    print(f"  {mutant.name}: {result} ({seconds:.0f} s)", flush=True)
    return mutant.name, result, seconds, detail


def print_table(rows: list[tuple[str, str, float, str]]) -> None:
    """One line per mutant: name, result, seconds, the test that failed (or why not)."""
    width = max(len(row[0]) for row in rows)
    print(f"\n{'mutant':{width}}  result    seconds  caught by / detail")
    for name, result, seconds, detail in rows:
        print(f"{name:{width}}  {result:8}  {seconds:7.1f}  {detail}")


if __name__ == "__main__":
    sys.exit(main())
