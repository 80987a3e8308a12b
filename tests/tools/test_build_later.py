"""Karmada is built apart from the rest of the tier: `up` leaves it to `cluster.py karmada`.

.ci/run builds it beside the cluster tier's first tests (``build --skip karmada`` before,
``build --only karmada`` beside), so linking it must add its binaries to those of a running
cluster without touching theirs. Checked on folders shaped like the build cache's; nothing
is compiled.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "controlplane"))
from harness import build, commands  # noqa: E402


def cached(root: Path, name: str, binaries: list[str]) -> Path:
    """A component's cache folder: its binaries, rendered manifests and one file."""
    folder = root / name
    (folder / "bin").mkdir(parents=True)
    for binary in binaries:
        (folder / "bin" / binary).write_text(binary)
    (folder / "manifests.yaml").write_text(f"# {name}\n")
    (folder / "files").mkdir()
    (folder / "files" / "crd.yaml").write_text(name)
    return folder


def test_linking_karmada_later_keeps_the_running_clusters_binaries(tmp_path, monkeypatch):
    out = tmp_path / "cluster"
    monkeypatch.setattr(build, "BUILD", out)
    monkeypatch.setattr(build, "BIN", out / "bin")
    folders = {
        "kubernetes": cached(tmp_path / "cache", "kubernetes", ["kube-apiserver", "kubelet"]),
        "karmada": cached(tmp_path / "cache", "karmada", ["karmada-apiserver"]),
    }
    monkeypatch.setattr(build, "build", lambda component: folders[component])
    build.build_all({"kubernetes": "kubernetes"})
    assert sorted(path.name for path in (out / "bin").iterdir()) == ["kube-apiserver", "kubelet"]
    for _ in range(2):  # attached once, then again: the links are replaced
        build.link("karmada", folders["karmada"])
    assert sorted(path.name for path in (out / "bin").iterdir()) == [
        "karmada-apiserver",
        "kube-apiserver",
        "kubelet",
    ]
    assert (out / "bin" / "kubelet").read_text() == "kubelet"
    assert (out / "manifests" / "karmada.yaml").read_text() == "# karmada\n"
    assert (out / "files" / "karmada" / "crd.yaml").read_text() == "karmada"


def test_up_builds_everything_but_karmada():
    wanted = commands.components("v2.3.0", "v0.15.2")
    assert "karmada" in wanted
    assert set(commands.without(wanted, commands.LATER)) == set(wanted) - {"karmada"}


@pytest.mark.parametrize(
    ("argv", "skip", "only"),
    [
        (["build"], [], []),
        (["build", "--skip", "karmada"], ["karmada"], []),
        (["build", "--only", "karmada"], [], ["karmada"]),
    ],
)
def test_the_build_command_leaves_karmada_for_later_when_told(argv, skip, only):
    args = commands.parser("").parse_args(argv)
    assert (args.skip, args.only) == (skip, only)


def test_only_later_components_can_be_left_out():
    with pytest.raises(SystemExit):
        commands.parser("").parse_args(["build", "--skip", "kubernetes"])
    with pytest.raises(SystemExit):
        commands.parser("").parse_args(["build", "--skip", "karmada", "--only", "karmada"])
