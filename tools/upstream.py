"""Files of the upstream Go modules this project pins (CRDs, manifests, OpenAPI specs).

Every upstream module is pinned once, with its checksum, in a go.mod/go.sum under tools/:
``tools/controlplane/<component>/`` for what the cluster test tier builds and runs, and
``tools/schemas/`` for modules needed only for their files. ``module_dir`` asks ``go mod
download -json MODULE@VERSION`` for the module's directory in the Go module cache (offline
once it is there), after checking that the version is one of those pins and that the
checksum Go reports is the one in the pin's go.sum. Standard library only: the fast test
tier and the cluster harness both import it.

    python3 tools/upstream.py                     # download every pinned module, print dirs
    python3 tools/upstream.py sigs.k8s.io/kueue   # the directory of one module
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

TOOLS = Path(__file__).resolve().parent
ENABLE = "apt-get install golang-go"  # any Go >= 1.16 can download the pinned modules


class GoMissing(RuntimeError):
    """There is no ``go`` command to fetch the pinned modules with."""


@dataclass(frozen=True)
class Pin:
    """One module version required by a go.mod under tools/, and its go.sum checksum."""

    module: str
    version: str
    checksum: str
    gomod: Path


# The schema files the tests validate against: name -> (module, version, globs). The first
# entry of a kind is the newest; older ones are there for tests about that version.
SCHEMAS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "training-operator@v1.9.4": (
        "github.com/kubeflow/training-operator",
        "v1.9.4",
        ("manifests/base/crds/kubeflow.org_pytorchjobs.yaml",),
    ),
    "trainer@v2.3.0": (
        "github.com/kubeflow/trainer/v2",
        "v2.3.0",
        ("manifests/base/crds/trainer.kubeflow.org_*.yaml",),
    ),
    "trainer@v2.1.0": (
        "github.com/kubeflow/trainer/v2",
        "v2.1.0",
        ("manifests/base/crds/trainer.kubeflow.org_*.yaml",),
    ),
    "kueue@v0.19.2": (
        "sigs.k8s.io/kueue",
        "v0.19.2",
        ("config/components/crd/bases/kueue.x-k8s.io_*.yaml",),
    ),
    "kserve@v0.20.0": (
        "github.com/kserve/kserve",
        "v0.20.0",
        (
            "config/crd/full/serving.kserve.io_inferenceservices.yaml",
            "config/crd/full/serving.kserve.io_servingruntimes.yaml",
            "config/crd/full/serving.kserve.io_clusterservingruntimes.yaml",
        ),
    ),
    "kserve@v0.15.2": (
        "github.com/kserve/kserve",
        "v0.15.2",
        (
            "config/crd/full/serving.kserve.io_inferenceservices.yaml",
            "config/crd/full/serving.kserve.io_servingruntimes.yaml",
            "config/crd/full/serving.kserve.io_clusterservingruntimes.yaml",
        ),
    ),
    "katib@v0.19.0": (
        "github.com/kubeflow/katib",
        "v0.19.0",
        ("manifests/v1beta1/components/crd/*.yaml",),
    ),
    "karmada@v1.18.1": (
        "github.com/karmada-io/karmada",
        "v1.18.1",
        (
            "charts/karmada/_crds/bases/policy/policy.karmada.io_propagationpolicies.yaml",
            "charts/karmada/_crds/bases/config/config.karmada.io_resourceinterpretercustomizations.yaml",
        ),
    ),
}
NEWEST = ("training-operator@v1.9.4", "trainer@v2.3.0", "kueue@v0.19.2", "kserve@v0.20.0")
NEWEST += ("katib@v0.19.0", "karmada@v1.18.1")
KATIB_OPENAPI = ("github.com/kubeflow/katib", "v0.19.0", "api/openapi-spec/swagger.json")
KSERVE_CONFIG = ("github.com/kserve/kserve", "config/configmap/inferenceservice.yaml")

_REQUIRE = re.compile(r"^\s*(?:require\s+)?([\w.\-/~]+\.[\w.\-/~]+)\s+(v\S+)\s*(//.*)?$")
_TOOL = re.compile(r"^tool\s+(\S+)\s*$", re.M)
_TOOLS = re.compile(r"^tool\s*\(([^)]*)\)", re.M)
_TOOL_BLOCK = re.compile(r"(\S+)")
_dirs: dict[tuple[str, str], Path] = {}


def go_command() -> str:
    """The ``go`` executable; raises GoMissing with the command that installs one."""
    found = shutil.which("go") or next(
        (p for p in ("/usr/local/go/bin/go", "/usr/lib/go/bin/go") if os.access(p, os.X_OK)), None
    )
    if not found:
        raise GoMissing(f"no `go` command: the upstream schemas need one (`{ENABLE}`)")
    return found


def gomods() -> list[Path]:
    """Every go.mod under tools/ that pins upstream modules."""
    return sorted(TOOLS.glob("controlplane/*/go.mod")) + sorted(TOOLS.glob("schemas/go.mod"))


def pins() -> list[Pin]:
    """The modules each go.mod under tools/ is about, with their go.sum checksums.

    That is the module of each ``tool`` directive (`go mod tidy` marks it indirect, since no
    package of ours imports a program) and every direct requirement.
    """
    found = []
    for gomod in gomods():
        text = gomod.read_text()
        sums = {}
        if gomod.with_name("go.sum").exists():
            for line in gomod.with_name("go.sum").read_text().splitlines():
                module, version, checksum = line.split()
                sums[(module, version)] = checksum
        tools = _TOOL.findall(text) + _TOOL_BLOCK.findall(" ".join(_TOOLS.findall(text)))
        for line in text.splitlines():
            match = _REQUIRE.match(line)
            if not match:
                continue
            module, version, comment = match.group(1), match.group(2), match.group(3) or ""
            if "indirect" not in comment or any(
                tool == module or tool.startswith(module + "/") for tool in tools
            ):
                found.append(Pin(module, version, sums.get((module, version), ""), gomod))
    return found


def pin(module: str, version: str | None = None) -> Pin:
    """The pin of ``module`` (at ``version``; required when two versions are pinned)."""
    matches = [p for p in pins() if p.module == module and version in (None, p.version)]
    versions = sorted({p.version for p in matches})
    if not matches:
        raise LookupError(f"{module} {version or ''} is not pinned in any go.mod under {TOOLS}")
    if len(versions) > 1:
        raise LookupError(f"{module} is pinned at {versions}: say which version")
    if not matches[0].checksum:
        raise LookupError(f"{matches[0].gomod.with_name('go.sum')} has no checksum for {module}")
    return matches[0]


def module_dir(module: str, version: str | None = None) -> Path:
    """The directory of a pinned module in the Go module cache (downloaded if missing)."""
    p = pin(module, version)
    if (p.module, p.version) in _dirs:
        return _dirs[(p.module, p.version)]
    env = {**os.environ, "GO111MODULE": "on", "GOFLAGS": "", "GOWORK": "off"}
    result = subprocess.run(
        [go_command(), "mod", "download", "-json", f"{p.module}@{p.version}"],
        cwd=tempfile.gettempdir(),  # outside any module: only the pin's version matters
        env=env,
        capture_output=True,
        text=True,
    )
    info = json.loads(result.stdout or "{}")
    if result.returncode or info.get("Error") or not info.get("Dir"):
        raise RuntimeError(
            f"go mod download {p.module}@{p.version} failed: "
            f"{info.get('Error') or result.stderr.strip()}"
        )
    if info.get("Sum") != p.checksum:
        raise RuntimeError(
            f"{p.module}@{p.version}: Go reports checksum {info.get('Sum')}, "
            f"{p.gomod.with_name('go.sum')} pins {p.checksum}"
        )
    _dirs[(p.module, p.version)] = Path(info["Dir"])
    return _dirs[(p.module, p.version)]


def module_file(module: str, version: str | None, relative: str) -> Path:
    """One file of a pinned module; raises FileNotFoundError naming module and path."""
    path = module_dir(module, version) / relative
    if not path.is_file():
        raise FileNotFoundError(f"{module}@{version}: no file {relative}")
    return path


def schema_files(name: str) -> list[Path]:
    """The CRD files of one SCHEMAS entry (e.g. "kserve@v0.15.2"), sorted."""
    module, version, globs = SCHEMAS[name]
    root = module_dir(module, version)
    files = sorted({path for pattern in globs for path in root.glob(pattern)})
    if not files:
        raise FileNotFoundError(f"{module}@{version}: nothing matches {globs}")
    return files


def main(argv: list[str]) -> int:
    """Print the directory of each module named (default: every pin)."""
    wanted = argv or sorted({p.module for p in pins()})
    for module in wanted:
        for version in sorted({p.version for p in pins() if p.module == module}):
            print(f"{module}@{version} {module_dir(module, version)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
