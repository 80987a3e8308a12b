"""The version pins that cannot import Python agree with components/specs/compat.py.

A KServe or Trainer bump edits compat.py and the files read here; a pin left behind fails
the test that names it.
"""

import ast
import importlib.metadata
import re
from pathlib import Path

from components.specs import compat

ROOT = Path(__file__).resolve().parents[2]


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.lstrip("v").split("."))


def _kserve_requirement() -> str:
    """The version range of kserve in pyproject.toml (``>=0.21,<0.22``)."""
    (found,) = re.findall(r'"kserve([^"\[]*)"', (ROOT / "pyproject.toml").read_text())
    return found


def _harness_default(flag: str) -> str:
    """The last string of ``add_argument(flag, default=... or "vX")`` in the tier's parser."""
    tree = ast.parse((ROOT / "tools/controlplane/harness/commands.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and getattr(node.args[0], "value", 0) == flag:
            (default,) = [keyword.value for keyword in node.keywords if keyword.arg == "default"]
            return default.values[-1].value
    raise AssertionError(f"no {flag} argument in the harness's parser")


def _makefile_default(variable: str) -> str:
    found = re.search(rf"^{variable} \?= (\S+)$", (ROOT / "Makefile").read_text(), re.M)
    assert found, f"no `{variable} ?=` in the Makefile"
    return found[1]


def test_pyproject_admits_the_kserve_package_the_image_pins():
    bounds = dict(re.findall(r"(>=|<)([\d.]+)", _kserve_requirement()))
    pinned = _version(compat.KSERVE_PACKAGE_VERSION)
    assert _version(bounds[">="]) <= pinned < _version(bounds["<"]), _kserve_requirement()


def test_the_serving_image_pins_the_kserve_package_of_compat():
    dockerfile = (ROOT / "images/serving.Dockerfile").read_text()
    assert re.findall(r"^ARG KSERVE_VERSION=(\S+)$", dockerfile, re.M) == [
        compat.KSERVE_PACKAGE_VERSION
    ]


def test_the_tests_run_on_the_kserve_package_the_image_pins():
    assert importlib.metadata.version("kserve") == compat.KSERVE_PACKAGE_VERSION


def test_the_cluster_tier_builds_the_kserve_release_of_compat():
    assert _makefile_default("KSERVE") == compat.KSERVE_TIER_RELEASE
    assert _harness_default("--kserve") == compat.KSERVE_TIER_RELEASE


def test_the_cluster_tier_builds_the_default_trainer_release():
    for release in (_makefile_default("TRAINER"), _harness_default("--trainer")):
        assert _version(release)[:2] == _version(compat.DEFAULT_TRAINER_RELEASE), release


def test_every_trainer_release_maps_to_a_generation_the_builders_know():
    assert set(compat.TRAINER_RELEASES.values()) == set(compat.TRAINER_GENERATIONS)
    assert compat.TRAINER_RELEASES[compat.DEFAULT_TRAINER_RELEASE] == compat.TRAINER_GENERATIONS[-1]
