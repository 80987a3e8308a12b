"""The cluster tier's images (tools/controlplane/harness/images.py, image_builds.py), checked
without podman.

Building them takes podman and minutes (``cluster.py images``); what is checked here is what
decides their content: the Dockerfiles' defaults are the upstream bases, the stand-ins carry
the names (and users, paths) the pinned upstream modules use, the torch stage is the same
everywhere (one shared layer), and the cache key follows the files an image copies.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from components.images import Images
from components.runtime.commit import checkout_commit

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "controlplane"))
from harness import image_builds, images  # noqa: E402
from harness.pins import upstream  # noqa: E402  (tools/upstream.py: needs Go)

STANDINS = REPO / "tools" / "controlplane" / "images"


def instructions(path: Path) -> list[str]:
    """The instructions of a Containerfile: comments dropped, continuation lines joined."""
    text = re.sub(r"\\\n", " ", path.read_text())
    return [" ".join(line.split()) for line in text.splitlines() if line.strip()[:1] not in "#"]


def stage(path: Path, name: str) -> list[str]:
    """The instructions of one named stage (its FROM line included)."""
    steps = instructions(path)
    start = next(i for i, step in enumerate(steps) if step.endswith(f" AS {name}"))
    end = next((i for i in range(start + 1, len(steps)) if steps[i].startswith("FROM ")), None)
    return steps[start:end]


def arg_default(path: Path, name: str) -> str:
    """The default of ``ARG name=...`` in a Containerfile."""
    (value,) = [s.split("=", 1)[1] for s in instructions(path) if s.startswith(f"ARG {name}=")]
    return value


def upstream_text(module: str, version: str | None, relative: str) -> str:
    """A file of a pinned upstream module."""
    return upstream.module_file(module, version, relative).read_text()


def normalized(image: str) -> str:
    """An image name as containerd stores it (docker.io/library/ for a short name)."""
    first = image.split("/")[0]
    if "/" not in image:
        return f"docker.io/library/{image}"
    return image if "." in first or ":" in first else f"docker.io/{image}"


@pytest.mark.parametrize("dockerfile", ["components", "serving"])
def test_the_dockerfiles_default_to_the_upstream_base(dockerfile):
    path = REPO / "images" / f"{dockerfile}.Dockerfile"
    assert arg_default(path, "BASE") == "python:3.11.11-slim-bookworm"
    froms = [step.split()[1] for step in instructions(path) if step.startswith("FROM ")]
    assert froms == ["${BASE}", "torch"]


def test_the_trainer_is_cuda_torch_or_the_cpu_torch_stage_by_one_argument():
    path = REPO / "images" / "trainer.Dockerfile"
    assert arg_default(path, "TORCH") == "cuda"
    assert arg_default(path, "BASE") == "pytorch/pytorch:2.9.0-cuda12.8-cudnn9-runtime"
    assert arg_default(path, "CPU_BASE") == arg_default(
        REPO / "images" / "serving.Dockerfile", "BASE"
    )
    froms = [step.split()[1:] for step in instructions(path) if step.startswith("FROM ")]
    assert froms == [["${BASE}", "AS", "cuda"], ["${CPU_BASE}", "AS", "cpu"], ["${TORCH}"]]
    # The CPU stage installs torch as the other images do: one shared layer.
    cpu = stage(path, "cpu")
    assert cpu[1:] == stage(REPO / "images" / "components.Dockerfile", "torch")[1:]


@pytest.mark.parametrize("dockerfile", ["components", "serving"])
def test_torch_comes_from_the_cpu_index_unless_told(dockerfile):
    path = REPO / "images" / f"{dockerfile}.Dockerfile"
    assert arg_default(path, "TORCH_INDEX") == "https://download.pytorch.org/whl/cpu"
    assert any('--index-url "${TORCH_INDEX}"' in step for step in stage(path, "torch"))


def test_the_torch_stage_is_the_same_wherever_torch_is_installed():
    """Same instructions on the same base: podman's cache makes them one layer."""
    components = stage(REPO / "images" / "components.Dockerfile", "torch")
    assert stage(REPO / "images" / "serving.Dockerfile", "torch") == components
    assert stage(STANDINS / "pytorch.Containerfile", "torch") == components
    assert any("torch==2.9.0 torchvision==0.24.0" in step for step in components)


def test_the_tier_builds_our_images_on_its_bases_under_the_pipeline_names():
    built = {image.name: image for image in images.images()}
    ours = Images.resolve()
    commit = {"GIT_COMMIT": checkout_commit(REPO) or ""}  # the report's, in every image of ours
    cuda = {"TORCH": "cuda", "BASE": images.PYTORCH, **commit}
    assert dict(built[ours.trainer].args) == cuda
    cpu = {"TORCH": "cpu", "CPU_BASE": images.PYTHON, "TORCH_INDEX": images.PYPI, **commit}
    assert dict(built[ours.trainer_cpu].args) == cpu
    for name in (ours.components, ours.serving):
        assert dict(built[name].args) == {
            "BASE": images.PYTHON,
            "TORCH_INDEX": images.PYPI,
            **commit,
        }
    assert dict(built[images.PYTORCH].args) == {"BASE": images.PYTHON, "TORCH_INDEX": images.PYPI}
    assert images.IMAGE_NAMES == [
        ours.trainer,
        ours.trainer_cpu,
        ours.components,
        ours.serving,
        images.SANDBOX_IMAGE,
        images.INIT_PYTORCH,
        images.COLLECTOR,
        images.GOPTUNA,
    ]
    for image in built.values():  # each base comes before the images built on it
        order = list(built)
        assert all(order.index(base) < order.index(image.name) for base in image.bases)


def test_the_sandbox_image_is_containerds_default_built_as_kubernetes_builds_it():
    config = upstream_text(
        "github.com/containerd/containerd/v2", None, "internal/cri/config/config.go"
    )
    assert f'DefaultSandboxImage = "{images.SANDBOX_IMAGE}"' in config
    makefile = upstream_text("k8s.io/kubernetes", None, "build/pause/Makefile")
    assert f"TAG ?= {images.SANDBOX_IMAGE.rsplit(':', 1)[1]}\n" in makefile
    cflags = re.search(r"^CFLAGS = (.*)$", makefile, re.M).group(1)
    assert " ".join(images.PAUSE_CFLAGS) == cflags.replace("$(TAG)-$(REV)", "3.10.2-0")
    dockerfile = instructions(
        upstream.module_file("k8s.io/kubernetes", None, "build/pause/Dockerfile")
    )
    ours = instructions(STANDINS / "pause.Containerfile")
    assert [s for s in dockerfile if s.split()[0] in ("USER", "ENTRYPOINT")] == ours[-2:]
    assert ours[0] == "FROM scratch"  # BASE.linux := scratch in the Makefile
    assert "BASE.linux := scratch" in makefile


def test_init_pytorch_runs_the_training_operators_default_image():
    config = upstream_text(
        "github.com/kubeflow/training-operator", "v1.9.4", "pkg/config/config.go"
    )
    (default,) = re.findall(r'PyTorchInitContainerImageDefault = "([^"]+)"', config)
    assert normalized(default) == images.INIT_PYTORCH
    # root (alpine has no USER), with `sh` for the command initcontainer.go runs.
    steps = instructions(STANDINS / "alpine.Containerfile")
    assert not [s for s in steps if s.startswith("USER ")]
    assert 'CMD ["/bin/sh"]' in steps


def katib_config() -> dict:
    """Katib v0.19.0's standalone katib-config (the images it names)."""
    path = "manifests/v1beta1/installs/katib-standalone/katib-config.yaml"
    return yaml.safe_load(upstream_text("github.com/kubeflow/katib", "v0.19.0", path))


def kept_final_steps(steps: list[str], replace: dict[str, str] | None = None) -> list[str]:
    """The WORKDIR, ENTRYPOINT and USER steps of a Containerfile's last stage."""
    final = steps[max(i for i, s in enumerate(steps) if s.startswith("FROM ")) :]
    for old, new in (replace or {}).items():
        final = [s.replace(old, new) for s in final]
    return [s for s in final if s.split()[0] in ("WORKDIR", "ENTRYPOINT", "USER")]


def upstream_dockerfile(folder: str) -> list[str]:
    """The steps of a Dockerfile in the pinned katib module."""
    path = f"{folder}/Dockerfile"
    return instructions(upstream.module_file("github.com/kubeflow/katib", "v0.19.0", path))


def test_the_metrics_collector_is_katibs_stdout_collector_where_its_dockerfile_puts_it():
    collectors = {c["kind"]: c["image"] for c in katib_config()["runtime"]["metricsCollectors"]}
    assert collectors["StdOut"] == collectors["File"] == images.COLLECTOR
    folder = "cmd/metricscollector/v1beta1/file-metricscollector"
    ours = instructions(STANDINS / "file-metricscollector.Containerfile")
    assert kept_final_steps(ours) == kept_final_steps(upstream_dockerfile(folder))
    katib = images.components("v2.1.0", "v0.15.2")["katib"]
    assert katib.tools["file-metricscollector"] == f"github.com/kubeflow/katib/{folder}"


def test_copied_sources_are_what_the_copy_lines_name():
    assert image_builds.copied_sources(REPO / "images" / "components.Dockerfile") == [
        "pyproject.toml",
        "README.md",
        "trainer/",
        "serving/",
        "components/",
        "pipelines/",
        "cli/",
    ]
    assert image_builds.copied_sources(STANDINS / "alpine.Containerfile") == []  # --from only


def test_the_cache_key_follows_the_copied_files_the_arguments_and_the_bases(tmp_path):
    (tmp_path / "pkg" / "__pycache__").mkdir(parents=True)
    (tmp_path / "pkg" / "code.py").write_text("A = 1\n")
    (tmp_path / "pkg" / "__pycache__" / "code.pyc").write_bytes(b"1")
    (tmp_path / "notes.txt").write_text("not copied\n")
    (tmp_path / ".dockerignore").write_text("**/__pycache__\n")
    containerfile = tmp_path / "Containerfile"
    containerfile.write_text("ARG BASE\nFROM ${BASE}\nCOPY pkg/ \\\n    /src/pkg/\n")
    image = images.Image("localhost/x:1", containerfile, lambda: tmp_path, (("BASE", "b"),), ("b",))

    def key(base_key="k1", args=image.args):
        changed = images.Image(image.name, containerfile, image.context, args, image.bases)
        return image_builds.image_key(changed, tmp_path, {"b": base_key})

    first = key()
    (tmp_path / "pkg" / "__pycache__" / "code.pyc").write_bytes(b"2")  # ignored
    (tmp_path / "notes.txt").write_text("still not copied\n")
    assert key() == first
    (tmp_path / "pkg" / "code.py").write_text("A = 2\n")
    second = key()
    assert second != first
    (tmp_path / "pkg" / "more.py").write_text("")
    assert key() != second
    assert key(base_key="k2") != key()
    assert key(args=(("BASE", "c"),)) != key()
    containerfile.write_text(containerfile.read_text() + "USER 10001\n")
    assert key() != second


def run_make_images(path: str) -> str:
    """What `make -n images` would run with PATH as given."""
    result = subprocess.run(
        ["make", "-n", "-W", "pyproject.toml", "images", "STAMP="],
        cwd=REPO,
        env={"PATH": path},
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout


def test_make_images_uses_podman_where_no_docker_daemon_answers(tmp_path):
    (tmp_path / "docker").write_text("#!/bin/sh\nexit 1\n")  # a client, no daemon
    (tmp_path / "docker").chmod(0o755)
    commands = run_make_images(f"{tmp_path}:/usr/bin:/bin")
    assert "podman" in commands and "docker build" not in commands
    assert f'--build-arg "GIT_COMMIT={checkout_commit(REPO) or ""}"' in commands
    assert "--network host --ulimit nofile=1024:1024 --ulimit nproc=1024:1024" in commands
    (tmp_path / "docker").write_text("#!/bin/sh\nexit 0\n")  # `docker info` answers
    assert "docker build" in run_make_images(f"{tmp_path}:/usr/bin:/bin")


def test_the_suggestion_stand_in_is_katibs_goptuna_where_its_dockerfile_puts_it():
    suggestions = {s["algorithmName"]: s["image"] for s in katib_config()["runtime"]["suggestions"]}
    assert suggestions["cmaes"] == suggestions["sobol"] == images.GOPTUNA
    folder = "cmd/suggestion/goptuna/v1beta1"
    ours = instructions(STANDINS / "suggestion-goptuna.Containerfile")
    upstream_steps = kept_final_steps(upstream_dockerfile(folder), {"${TARGET_DIR}": "/opt/katib"})
    assert kept_final_steps(ours) == upstream_steps
    katib = images.components("v2.3.0", "v0.15.2")["katib"]
    assert katib.tools["goptuna-suggestion"] == f"github.com/kubeflow/katib/{folder}"


def test_debootstrap_makes_another_machines_debian_when_told(monkeypatch, tmp_path):
    """Fake: debootstrap, tar and podman are recorded, not run (they take root and a minute;
    the arm64 base of benchmarks/image_sizes.py was made for real, docs/benchmarks.md)."""
    commands = []
    done = subprocess.CompletedProcess([], 0, "", "")
    monkeypatch.setattr(image_builds, "STORE", tmp_path)
    monkeypatch.setattr(image_builds, "run", commands.append)
    monkeypatch.setattr(
        image_builds.subprocess,
        "Popen",
        lambda command, **_: (
            commands.append(command) or type("Tar", (), {"stdout": None, "wait": lambda self: 0})()
        ),
    )
    monkeypatch.setattr(
        image_builds.subprocess, "run", lambda command, **_: commands.append(command) or done
    )
    image_builds.debootstrap("localhost/d:arm64", "arm64")
    debootstrap, _, podman_import = commands
    assert debootstrap[:3] == ["debootstrap", "--arch", "arm64"]
    assert podman_import[podman_import.index("import") + 1 :][:2] == ["--arch", "arm64"]
    commands.clear()
    image_builds.debootstrap("localhost/d:host")
    assert not any("--arch" in command for command in commands)
    assert not list(tmp_path.iterdir())  # the root it made is gone


def test_the_image_size_benchmark_builds_for_the_platform_and_finds_the_torch_layer(monkeypatch):
    """Fake: podman's answers are canned (the history as podman 4.3 prints it, newest
    layer first); the benchmark's real run is in docs/benchmarks.md."""
    from benchmarks import image_sizes

    history = [
        {"size": 400, "CreatedBy": "/bin/sh -c pip install ... /src"},
        {"size": 700, "CreatedBy": "|1 TORCH_INDEX=x /bin/sh -c pip install torch==2.9.0"},
        {"size": 20, "CreatedBy": "/bin/sh -c python -m venv /opt/venv"},
        {"size": 150, "CreatedBy": "/bin/sh -c apt-get update"},
        {"size": 200, "CreatedBy": "/bin/sh -c #(nop) ADD file:abc in /"},
    ]
    calls = []

    def podman(*args):
        calls.append(args)
        return subprocess.CompletedProcess(args, 0, json.dumps(history), "")

    monkeypatch.setattr(image_builds, "podman", podman)
    assert image_sizes.torch_and_base("t") == (700, 350)
    image_sizes.build_all("linux/arm64", "base:1", "https://pypi.org/simple", "/w")
    assert len(calls) == 1 + len(image_sizes.CPU_IMAGES)
    serving, _, trainer = (" ".join(call) for call in calls[1:])
    assert "--platform linux/arm64" in serving and "--volume /w:/wheels:ro" in serving
    assert "--build-arg BASE=base:1" in serving and "TORCH_INDEX=https://pypi.org/simple" in serving
    assert "--build-arg TORCH=cpu" in trainer and "--build-arg CPU_BASE=base:1" in trainer
