r"""The CPU images' sizes against the same images on PyPI's torch, built side by side.

Builds our three CPU images (serving, components, the trainer's ``TORCH=cpu``) from
images/*.Dockerfile for ``--platform``, with torch from ``--torch-index``, and as the
baseline the same Dockerfiles for linux/amd64 with torch from PyPI, whose x86_64 wheel is
the CUDA build with its nvidia-* wheels (the images before the CPU variant). Prints each
image's size, its torch layer and its base, and the ratio to its baseline.

Defaults are what we publish: PyTorch's CPU index and python:3.11.11-slim-bookworm.
``--standin`` builds on the cluster tier's stand-in bases instead (harness/images.py,
made for the platform: another machine's through qemu-user-static), for a machine that
cannot pull the upstream base. ``--find-links DIR`` offers the builds wheels that PyPI
lacks for the platform (psutil<6, KServe's pin, has none for arm64).

    python -m benchmarks.image_sizes
    python -m benchmarks.image_sizes --standin --platform linux/arm64 \
        --torch-index https://pypi.org/simple --find-links build/wheels-arm64
"""

from __future__ import annotations

import argparse
import json
import platform as host
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools" / "controlplane"))

from harness import image_builds  # noqa: E402
from harness.image_builds import gb  # noqa: E402
from harness.images import DEBIAN, PYPI, PYTHON, STANDINS, Image  # noqa: E402

from components.images import BUILDS  # noqa: E402

CPU_IMAGES = ("serving", "components", "trainer_cpu")  # keys of components.images.BUILDS
BASELINE_PLATFORM = "linux/amd64"
TAG = "localhost/fmnist-bench"


def arch(platform: str) -> str:
    """The Debian (and OCI) architecture of a ``linux/<arch>`` platform."""
    return platform.removeprefix("linux/")


def host_platform() -> str:
    """This machine's platform, as podman names it."""
    machine = host.machine()
    return "linux/" + {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)


def standin_base(platform: str) -> str:
    """The tier's stand-in Python base for ``platform``, built when missing."""
    if platform == host_platform():
        image_builds.ensure_bases()
        return PYTHON
    debian, python = f"{DEBIAN}-{arch(platform)}", f"{PYTHON}-{arch(platform)}"
    if not image_builds.image_id(debian):
        image_builds.debootstrap(debian, arch(platform))
    if not image_builds.image_id(python):
        containerfile = STANDINS / "python.Containerfile"
        build(python, containerfile, STANDINS, platform, [("DEBIAN", debian)])
    return python


def build(tag: str, containerfile: Path, context: Path, platform: str, args, find_links=None):
    """``podman build`` for ``platform``, with the host's CA bundle (pip downloads)."""
    image = Image(tag, containerfile, lambda: context, tuple(args), pypi=True)
    print(f"building {tag} ({platform})", flush=True)
    with tempfile.TemporaryDirectory() as folder:
        flags = ["--platform", platform]
        if find_links:  # pip in every RUN reads /etc/pip.conf
            (Path(folder) / "pip.conf").write_text("[global]\nfind-links = /wheels\n")
            flags += ["--volume", f"{Path(find_links).resolve()}:/wheels:ro"]
            flags += ["--volume", f"{folder}/pip.conf:/etc/pip.conf:ro"]
        image_builds.build_image(image, context, *flags)


def torch_and_base(tag: str) -> tuple[int, int]:
    """Bytes of the image's torch layer, and of the layers below its venv (the base)."""
    history = json.loads(image_builds.podman("history", "--format", "json", tag).stdout)
    made = [(entry["size"], entry["CreatedBy"]) for entry in reversed(history)]  # base first
    venv = next(i for i, (_, by) in enumerate(made) if "python -m venv" in by)
    torch = next(size for size, by in made if "torch==" in by)
    return torch, sum(size for size, _ in made[:venv])


def build_all(platform: str, base: str | None, torch_index: str | None, find_links=None):
    """Our CPU images for ``platform`` (None: the Dockerfiles' default): name -> tag."""
    tags = {}
    for name in CPU_IMAGES:
        image = BUILDS[name]
        base_arg = "CPU_BASE" if "TORCH" in image.args else "BASE"  # the trainer's CPU stage
        args = [*image.args.items(), (base_arg, base), ("TORCH_INDEX", torch_index)]
        tags[name] = f"{TAG}/{name}:{arch(platform)}-{'pypi' if torch_index == PYPI else 'cpu'}"
        dockerfile = REPO / "images" / f"{image.dockerfile}.Dockerfile"
        given = [(key, value) for key, value in args if value]
        build(tags[name], dockerfile, REPO, platform, given, find_links)
    return tags


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--platform", default=host_platform(), help="linux/amd64, linux/arm64")
    parser.add_argument("--torch-index", help="where torch comes from (PyTorch's CPU index)")
    parser.add_argument("--standin", action="store_true", help="the tier's stand-in bases")
    parser.add_argument("--find-links", help="a folder of wheels PyPI lacks for the platform")
    args = parser.parse_args(argv)

    base = standin_base(args.platform) if args.standin else None
    ours = build_all(args.platform, base, args.torch_index, args.find_links)
    baseline_base = standin_base(BASELINE_PLATFORM) if args.standin else None
    baseline = build_all(BASELINE_PLATFORM, baseline_base, PYPI)

    default = "the Dockerfiles' default"
    print(
        f"\nours: {args.platform}, torch from {args.torch_index or default}, on {base or default}"
    )
    print(f"baseline: {BASELINE_PLATFORM}, torch from {PYPI}, on {baseline_base or default}\n")
    print(f"{'image':12} {'ours':>8} {'torch':>8} {'base':>8} {'baseline':>9} {'torch':>8}  ratio")
    for name, tag in ours.items():
        size, old = image_builds.image_size(tag), image_builds.image_size(baseline[name])
        (torch, under), (old_torch, _) = torch_and_base(tag), torch_and_base(baseline[name])
        row = f"{name:12} {gb(size):>8} {gb(torch):>8} {gb(under):>8}"
        print(f"{row} {gb(old):>9} {gb(old_torch):>8}  {size / old:.2f}x")


if __name__ == "__main__":
    main()
