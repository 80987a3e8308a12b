"""The Dockerfiles: pinned bases, a non-root user, dependencies before sources, real entry points.

No image is built here (that needs a registry); the checks read the Dockerfiles and the
.dockerignore the way ``docker build`` does.
"""

from __future__ import annotations

import fnmatch
import json
import re
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from components.images import RUNTIMES
from components.runtime.commit import BUILD_ARG, ENV_VAR

REPO = Path(__file__).resolve().parents[2]
DOCKERFILES = sorted((REPO / "images").glob("*.Dockerfile"))
OWN = ["trainer", "components"]  # the serving image belongs to the serving package
SECRET_WORDS = ("TOKEN", "PASSWORD", "SECRET", "CREDENTIAL", "API_KEY", "ACCESS_KEY")


def instructions(path: Path) -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` pairs: comments dropped, continuation lines joined."""
    result, pending = [], ""
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1]
            continue
        text = (pending + line).strip()
        pending = ""
        if text:
            keyword, _, rest = text.partition(" ")
            result.append((keyword.upper(), rest.strip()))
    return result


def final_stage(steps: list[tuple[str, str]]) -> list[tuple[str, str]]:
    start = max(i for i, (keyword, _) in enumerate(steps) if keyword == "FROM")
    return steps[start:]


def exec_form(arguments: str) -> list[str]:
    words = json.loads(arguments)
    assert isinstance(words, list), f"use the exec (JSON) form: {arguments}"
    return words


def dockerignore() -> list[str]:
    lines = (REPO / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def ignored(path: str, patterns: list[str]) -> bool:
    """Whether .dockerignore keeps ``path`` (or a folder above it) out of the context."""
    parts = Path(path.rstrip("/")).parts
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for pattern in patterns:
        plain = pattern.removeprefix("**/")
        for prefix in prefixes:
            name = prefix.rsplit("/", 1)[-1] if pattern.startswith("**/") else prefix
            if fnmatch.fnmatchcase(name, plain):
                return True
    return False


def test_one_dockerfile_per_runtime():
    assert [path.name for path in DOCKERFILES if path.stem in OWN] == [
        f"{name}.Dockerfile" for name in sorted(OWN)
    ]
    assert {path.stem for path in DOCKERFILES} <= set(RUNTIMES)


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_bases_are_pinned(path):
    steps = instructions(path)
    defaults = dict(arg.split("=", 1) for keyword, arg in steps if keyword == "ARG" and "=" in arg)
    stages = {arguments.split()[-1] for keyword, arguments in steps if " AS " in arguments}
    for keyword, arguments in steps:
        if keyword != "FROM":
            continue
        image = re.sub(r"\$\{(\w+)\}", lambda m: defaults[m.group(1)], arguments.split()[0])
        if image in stages:
            continue
        name, _, tag = image.partition("@")[0].rpartition(":")
        assert "@sha256:" in image or (name and re.search(r"\d+\.\d+", tag)), (
            f"{path.name}: {image} is not pinned to a digest or an exact version tag"
        )
        assert not tag.startswith("latest")


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_runs_as_a_numeric_non_root_user(path):
    users = [
        arguments for keyword, arguments in final_stage(instructions(path)) if keyword == "USER"
    ]
    assert users, f"{path.name}: the final stage sets no USER (it would run as root)"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0, f"{path.name}: USER {users[-1]}"


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_entry_point_module_exists(path):
    steps = final_stage(instructions(path))
    command = [
        word
        for keyword, arguments in steps
        if keyword in ("ENTRYPOINT", "CMD")
        for word in exec_form(arguments)
    ]
    assert "-m" in command, f"{path.name}: no `-m <module>` entry point"
    module = command[command.index("-m") + 1]
    base = REPO.joinpath(*module.split("."))
    assert (base / "__main__.py").is_file() or base.with_suffix(".py").is_file(), module


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_copied_sources_exist_and_reach_the_build_context(path):
    patterns = dockerignore()
    for keyword, arguments in instructions(path):
        if keyword != "COPY" or "--from=" in arguments:
            continue
        for source in arguments.split()[:-1]:
            if source.startswith("--"):
                continue
            assert (REPO / source).exists(), f"{path.name}: COPY {source}: no such file"
            assert not ignored(source, patterns), f"{path.name}: .dockerignore drops {source}"


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_no_secrets_in_env_or_build_args(path):
    for keyword, arguments in instructions(path):
        if keyword in ("ENV", "ARG"):
            assert not any(word in arguments.upper() for word in SECRET_WORDS), arguments


def test_dockerignore_keeps_local_state_out():
    patterns = dockerignore()
    for path in (
        ".git",
        ".venv",
        "build",
        "tests",
        "k8s",
        "docs",
        "trainer/__pycache__",
        "fmnist_pipeline.egg-info",
        ".env",
    ):
        assert ignored(path, patterns), path
    for path in ("pyproject.toml", "README.md", "trainer/train.py", "components/runtime/kube.py"):
        assert not ignored(path, patterns), path


def test_components_image_installs_dependencies_before_sources():
    steps = instructions(REPO / "images" / "components.Dockerfile")
    install = next(
        i
        for i, (keyword, arguments) in enumerate(steps)
        if keyword == "RUN" and "-r requirements.txt" in arguments
    )
    sources = [
        i
        for i, (keyword, arguments) in enumerate(steps)
        if keyword == "COPY"
        and arguments.split()[0].rstrip("/")
        in ("trainer", "serving", "components", "pipelines", "cli")
    ]
    assert sources and min(sources) > install
    copied_first = [arguments for keyword, arguments in steps[:install] if keyword == "COPY"]
    assert copied_first == ["pyproject.toml README.md /src/"]


def test_torch_versions_agree_across_images_and_pyproject():
    trainer = (REPO / "images" / "trainer.Dockerfile").read_text()
    components = (REPO / "images" / "components.Dockerfile").read_text()
    base = re.search(r"^ARG BASE=pytorch/pytorch:(\d+\.\d+\.\d+)-cuda(\d+\.\d+)-", trainer, re.M)
    torch_version, cuda_version = base.groups()
    # The build-time check in the trainer image asserts the same pair as the tag.
    assert f"startswith('{torch_version}')" in trainer
    assert f"torch.version.cuda == '{cuda_version}'" in trainer
    assert f"torch=={torch_version} " in components
    assert f"torch=={torch_version} " in trainer  # its CPU variant's stage
    requirements = [Requirement(text) for text in metadata.requires("fmnist-pipeline")]
    (torch,) = [req for req in requirements if req.name == "torch" and not req.marker]
    assert torch_version in torch.specifier  # the package's own torch range admits it


def test_torch_excludes_the_releases_whose_safe_loading_runs_code():
    """``torch.load(weights_only=True)`` runs code from a crafted file in torch <= 2.5.1.

    CVE-2025-32434 (GHSA-53q9-r3pm-6pq6), fixed in torch 2.6.0; the predictor, the
    evaluate step and a resumed job load files with it.
    """
    (found,) = re.findall(r'"torch([<>=!~][^"]*)"', (REPO / "pyproject.toml").read_text())
    allowed = Requirement(f"torch{found}").specifier
    assert not [v for v in ("2.3.0", "2.4.1", "2.5.1") if v in allowed]
    assert "2.6.0" in allowed


def test_trainer_image_hides_gpus_from_pods_that_request_none():
    env = [
        arguments
        for keyword, arguments in instructions(REPO / "images" / "trainer.Dockerfile")
        if keyword == "ENV"
    ]
    assert any("NVIDIA_VISIBLE_DEVICES=void" in arguments.split() for arguments in env)


def test_components_image_carries_the_raw_data_where_the_pack_step_looks():
    from trainer.data import DEBIAN_DIR

    steps = instructions(REPO / "images" / "components.Dockerfile")
    installs = [arguments for keyword, arguments in final_stage(steps) if keyword == "RUN"]
    assert any("apt-get install" in run and "dataset-fashion-mnist=" in run for run in installs)
    # Debian's dataset-fashion-mnist puts the four IDX files here.
    assert str(DEBIAN_DIR) == "/usr/share/datasets/fashion-mnist"


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.stem)
def test_apt_leaves_no_caches_in_a_layer(path):
    """A RUN that installs Debian packages cleans up in the same layer: the package lists
    and apt's binary caches (/var/cache/apt/*.bin: 110 MB in the components image on a
    plain Debian base, which, unlike python:*-slim's, has apt keep them)."""
    for keyword, run in instructions(path):
        if keyword == "RUN" and "apt-get install" in run:
            assert "apt-get clean" in run and "rm -rf /var/lib/apt/lists/*" in run, run


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.stem)
def test_the_commit_argument_comes_after_every_layer_it_could_rebuild(path):
    """A new commit changes one setting: the ARG follows every RUN, COPY and ADD (the torch
    stage's included), in the final stage, and sets the variable the report reads."""
    steps = instructions(path)
    (declared,) = [i for i, step in enumerate(steps) if step[0] == "ARG" and step[1] == BUILD_ARG]
    last_from = max(i for i, (keyword, _) in enumerate(steps) if keyword == "FROM")
    built = [i for i, (keyword, _) in enumerate(steps) if keyword in ("RUN", "COPY", "ADD")]
    assert last_from < declared and max(built) < declared
    assert ("ENV", f'{ENV_VAR}="${{{BUILD_ARG}}}"') in steps[declared:]
    assert not any(BUILD_ARG in arguments for _, arguments in steps[:declared])
