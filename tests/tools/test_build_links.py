"""build/cluster/'s links (harness/build.py ``build_all`` and ``link``): replaced in place,
never missing while a cluster runs from them; and what a cluster of kwok's nodes needs
(harness/components.py ``without_nodes``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "controlplane"))
from harness import build as builds  # noqa: E402
from harness.components import Component, components, without_nodes  # noqa: E402


def built_folder(root: Path, name: str, binaries: list[str], files: list[str] = ()) -> Path:
    """A component's cache folder as ``build`` leaves it."""
    folder = root / "cache" / name
    (folder / "bin").mkdir(parents=True)
    for binary in binaries:
        (folder / "bin" / binary).write_text(f"{name} {binary}")
    (folder / "manifests.yaml").write_text(f"{name} manifests")
    for file in files:
        (folder / "files").mkdir(exist_ok=True)
        (folder / "files" / file).write_text(file)
    return folder


@pytest.fixture
def cluster_build(tmp_path, monkeypatch) -> Path:
    """build/cluster/ in a scratch folder."""
    monkeypatch.setattr(builds, "BUILD", tmp_path / "cluster")
    monkeypatch.setattr(builds, "BIN", tmp_path / "cluster" / "bin")
    return tmp_path / "cluster"


def test_build_all_links_what_is_wanted_and_drops_the_rest(cluster_build, tmp_path, monkeypatch):
    folders = {
        "kubernetes": built_folder(tmp_path, "kubernetes", ["kube-apiserver", "kubelet"]),
        "kwok": built_folder(tmp_path, "kwok", ["kwok"], ["pod-ready.yaml"]),
    }
    stale = built_folder(tmp_path, "kserve-old", ["kserve-manager"], ["old.yaml"])
    builds.link("kserve-old", stale)
    monkeypatch.setattr(builds, "build", lambda component: folders[component.name])
    wanted = {name: Component(name, name, {}) for name in folders}

    builds.build_all(wanted)

    links = {
        p.relative_to(cluster_build).as_posix() for p in cluster_build.rglob("*") if p.is_symlink()
    }
    assert links == {
        "bin/kube-apiserver",
        "bin/kubelet",
        "bin/kwok",
        "manifests/kubernetes.yaml",
        "manifests/kwok.yaml",
        "files/kwok/pod-ready.yaml",
    }
    assert (cluster_build / "bin" / "kubelet").read_text() == "kubernetes kubelet"


def test_a_new_build_replaces_a_link_in_place(cluster_build, tmp_path, monkeypatch):
    """The link's inode changes by a rename over it, so no reader ever finds it missing."""
    old = built_folder(tmp_path / "old", "kubernetes", ["kube-apiserver"])
    new = built_folder(tmp_path / "new", "kubernetes", ["kube-apiserver"])
    builds.link("kubernetes", old)
    removed = []
    real_unlink = Path.unlink
    monkeypatch.setattr(
        Path, "unlink", lambda self, **kw: removed.append(self) or real_unlink(self, **kw)
    )

    made = builds.link("kubernetes", new)

    apiserver = cluster_build / "bin" / "kube-apiserver"
    assert apiserver in made and apiserver.resolve() == (new / "bin" / "kube-apiserver").resolve()
    assert apiserver not in removed


def test_a_cluster_of_kwok_nodes_needs_neither_the_nodes_programs_nor_the_registry():
    wanted = components("v2.3.0", "v0.15.2")
    kept = without_nodes(wanted)
    assert set(wanted) - set(kept) == {
        "kubelet",
        "containerd",
        "coredns",
        "registry",
        "kube-router",
    }
    assert {"kubernetes", "etcd", "kwok", "kueue", "kserve-v0.15.2"} <= set(kept)
    # build order: the control plane and the controllers before the nodes' programs
    assert list(wanted)[: len(kept)] == list(kept)
