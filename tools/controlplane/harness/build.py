"""Building the components: ``go build`` into a machine-level cache, manifests rendered once.

Each component's folder in the cache is keyed by its go.mod, go.sum and recipe, so a fresh
clone of the project relinks what this machine built before instead of building it again.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import yaml

from harness.components import Component
from harness.paths import BIN, BUILD, CACHE
from harness.pins import upstream
from harness.processes import run

RECIPE = "1"  # bump when the way a component is built or rendered changes
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: the CRDs are megabytes
KEEP_KINDS = {
    "Namespace",
    "CustomResourceDefinition",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
    "ConfigMap",
}


def cache_dir(component: Component) -> Path:
    """Where this component's build lives: keyed by its go.mod, go.sum and recipe."""
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum"):
        digest.update((component.dir / name).read_bytes())
    digest.update(
        json.dumps(
            [
                RECIPE,
                component.tools,
                component.manifests,
                component.namespace,
                component.files,
                component.ldflags,
            ]
        ).encode()
    )
    return CACHE / f"{component.name}-{digest.hexdigest()[:16]}"


def go_env() -> dict[str, str]:
    """The environment of `go build`: static binaries, this module's go.sum only."""
    return {**os.environ, "CGO_ENABLED": "0", "GOWORK": "off", "GOFLAGS": "-mod=readonly"}


def build(component: Component) -> Path:
    """Build (or find in the cache) one component; returns its cache folder."""
    out = cache_dir(component)
    if (out / "built.json").exists():
        return out
    CACHE.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{component.name}-", dir=CACHE))
    started = time.monotonic()
    try:
        print(f"building {component.name} ({component.module} {component.version})", flush=True)
        ldflags = " ".join(("-s", "-w") + component.ldflags)
        # No DWARF: the linker's -s -w drops it anyway, and not making it cut kwok's cold
        # compile by 16 % (docs/benchmarks.md). Same behaviour, so RECIPE stays.
        command = ["go", "build", "-trimpath", "-gcflags=all=-dwarf=false", "-ldflags", ldflags]
        (tmp / "bin").mkdir()
        for binaries in invocations(component.tools):
            built = tmp / "go-build"
            packages = [component.tools[binary] for binary in binaries]
            run([*command, "-o", f"{built}/", *packages], component.dir, go_env())
            for binary, package in zip(binaries, packages, strict=True):
                (built / default_name(package)).rename(tmp / "bin" / binary)
            built.rmdir()
        root = upstream.module_dir(component.module, component.version)
        if component.manifests:
            (tmp / "manifests.yaml").write_text(render(root, component, tmp))
        for relative in component.files:
            (tmp / "files").mkdir(exist_ok=True)
            shutil.copyfile(root / relative, tmp / "files" / Path(relative).name)
        _finish(tmp, out, component, round(time.monotonic() - started, 1))
        return out
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def default_name(package: str) -> str:
    """The file name ``go build -o <dir>/`` gives a main package.

    Its last path element, or the one before a major-version suffix such as ``/v3`` (Go 1.26
    ``cmd/go/internal/load/pkg.go``, ``DefaultExecName`` and ``isVersionElement``: ``v1`` and
    ``v0…`` are no suffix).
    """
    parts = package.split("/")
    if len(parts) > 1 and re.fullmatch(r"v(?:[2-9][0-9]*|1[0-9]+)", parts[-1]):
        return parts[-2]
    return parts[-1]


def invocations(tools: dict[str, str]) -> list[list[str]]:
    """The binaries of a module in as few ``go build`` runs as their file names allow.

    One run for several programs compiles what they share once, with the links in parallel
    (kubernetes' control plane: three programs); programs whose default names clash
    (Katib's four end in ``/v1beta1``) each get a run of their own.
    """
    runs: list[list[str]] = []
    for binary, package in tools.items():
        free = [run for run in runs if default_name(package) not in _names(tools, run)]
        if free:
            free[0].append(binary)
        else:
            runs.append([binary])
    return runs


def _names(tools: dict[str, str], binaries: list[str]) -> set[str]:
    return {default_name(tools[binary]) for binary in binaries}


def _finish(tmp: Path, out: Path, component: Component, seconds: float) -> None:
    """Record what was built and move it into place (another run may have been faster)."""
    info = {
        "module": component.module,
        "version": component.version,
        "seconds": seconds,
        "go": subprocess.run(
            ["go", "env", "GOVERSION"], capture_output=True, text=True
        ).stdout.strip(),
    }
    (tmp / "built.json").write_text(json.dumps(info, indent=1))
    try:
        tmp.rename(out)
    except OSError:  # built meanwhile by another run
        shutil.rmtree(tmp)
    print(f"built {component.name} in {seconds} s", flush=True)


def render(root: Path, component: Component, scratch: Path) -> str:
    """The module's kustomizations, rendered by kubectl, cut to KEEP_KINDS."""
    kustomization = scratch / "kustomize"
    kustomization.mkdir()
    resources = [os.path.relpath(root / folder, kustomization) for folder in component.manifests]
    spec = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": resources,
    }
    if component.namespace:
        spec["namespace"] = component.namespace
    (kustomization / "kustomization.yaml").write_text(yaml.safe_dump(spec))
    rendered = run(["kubectl", "kustomize", str(kustomization)], capture=True)
    shutil.rmtree(kustomization)
    kept = [
        doc for doc in yaml.load_all(rendered, Loader=LOADER) if doc and doc["kind"] in KEEP_KINDS
    ]
    return yaml.safe_dump_all(kept, sort_keys=False)


def build_all(wanted: dict[str, Component]) -> dict[str, Path]:
    """Build every component; link binaries and manifests into build/cluster/, drop the rest.

    Links are replaced one by one, never removed first: a cluster already running from some
    of them (``up --without-nodes`` while the build goes on) finds each one at every moment.
    """
    built = {name: build(component) for name, component in wanted.items()}
    kept = set()
    for name, folder in built.items():
        kept |= link(name, folder)
    for sub in ("bin", "manifests", "files"):
        for path in (BUILD / sub).rglob("*"):
            if path.is_symlink() and path not in kept:
                path.unlink()
    return built


def link(name: str, folder: Path) -> set[Path]:
    """Link one built component's binaries, manifests and files into build/cluster/.

    Returns the links it made.
    """
    made = {BIN / binary.name: binary for binary in (folder / "bin").iterdir()}
    if (folder / "manifests.yaml").exists():
        made[BUILD / "manifests" / f"{name}.yaml"] = folder / "manifests.yaml"
    for path in (folder / "files").glob("*"):
        made[BUILD / "files" / name / path.name] = path
    for where, target in made.items():
        where.parent.mkdir(parents=True, exist_ok=True)
        fresh = where.with_name(f".{where.name}.new")
        fresh.unlink(missing_ok=True)
        fresh.symlink_to(target)
        fresh.replace(where)
    return set(made)
