"""The tier's Go modules of one Kubernetes generation share one version of each dependency.

Go's build cache then compiles client-go, controller-runtime, gRPC ... once for the whole
group (tools/controlplane/align_deps.py says why); a pin bumped without re-aligning would
compile them again for one program, minutes on a new machine, and this fails instead.
"""

import importlib.util
from pathlib import Path

import pytest

CONTROLPLANE = Path(__file__).resolve().parents[2] / "tools" / "controlplane"
spec = importlib.util.spec_from_file_location("align_deps", CONTROLPLANE / "align_deps.py")
align_deps = importlib.util.module_from_spec(spec)
spec.loader.exec_module(align_deps)


@pytest.mark.parametrize("group", align_deps.GROUPS, ids=lambda group: "+".join(group))
def test_every_shared_dependency_has_one_version_in_the_group(group):
    assert align_deps.misaligned(group) == {}


def test_the_client_libraries_are_shared_by_every_kubernetes_136_program():
    group = align_deps.GROUPS[0]
    client_go = {member: align_deps.versions(member)["k8s.io/client-go"][0] for member in group}
    assert set(client_go.values()) == {"v0.36.3"}, client_go


def test_a_replace_sets_the_version_a_member_resolves_to():
    found = align_deps.versions("kubernetes")
    assert found["k8s.io/api"] == ("v0.36.3", True)
    assert found["k8s.io/kubernetes"] == ("v1.36.3", False)


def test_versions_sort_as_go_sorts_them():
    ordered = [
        "v0.0.0-20250730193827-2d320260d730",
        "v0.0.0-20260317180543-43fb72c5454a",
        "v0.35.4-devel",
        "v0.35.4",
        "v1.36.12-0.20260120151049-f2248ac996af",
        "v1.36.12",
    ]
    assert sorted(reversed(ordered), key=align_deps.semver_key) == ordered


def test_a_misaligned_group_is_reported_with_each_members_version(tmp_path, monkeypatch):
    for member, version in (("a", "v0.36.2"), ("b", "v0.36.3")):
        (tmp_path / member).mkdir()
        require = f"require (\n\tk8s.io/client-go {version} // indirect\n)\n"
        (tmp_path / member / "go.mod").write_text(f"module m/{member}\n\ngo 1.26\n\n{require}")
    monkeypatch.setattr(align_deps, "CONTROLPLANE", tmp_path)
    assert align_deps.misaligned(("a", "b")) == {
        "k8s.io/client-go": {"a": "v0.36.2", "b": "v0.36.3"}
    }
