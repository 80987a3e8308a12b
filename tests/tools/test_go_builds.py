"""The tier's Go programs build in as few `go build` runs as their names allow
(harness/build.py, ``invocations``), each program found under the name cmd/go gives it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "controlplane"))
from harness.build import default_name, invocations  # noqa: E402
from harness.components import components  # noqa: E402


def test_kubernetes_programs_build_in_two_runs_the_control_plane_s_first():
    """One module, two components: what kwok's nodes need, then what the real nodes run."""
    found = components("v2.3.0", "v0.15.2")
    control_plane, nodes = found["kubernetes"].tools, found["kubelet"].tools
    assert invocations(control_plane) == [
        ["kube-apiserver", "kube-controller-manager", "kube-scheduler"]
    ]
    assert invocations(nodes) == [["kubelet", "kube-proxy"]]
    assert found["kubelet"].dir == found["kubernetes"].dir
    assert found["kubelet"].version == found["kubernetes"].version
    assert list(found).index("kubelet") > list(found).index("kserve-v0.15.2")


def test_katibs_programs_that_all_end_in_v1beta1_get_a_run_each():
    tools = components("v2.3.0", "v0.15.2")["katib"].tools
    assert invocations(tools) == [
        ["katib-controller", "file-metricscollector"],
        ["goptuna-suggestion"],
        ["katib-db-manager"],
    ]


def test_default_names_follow_cmd_go_for_major_version_suffixes(tmp_path):
    """Go 1.26 cmd/go/internal/load/pkg.go, DefaultExecName: a last element v2, v10... is a
    major-version suffix and the one before it names the program; v1, v1beta1 are not.
    Checked against a real `go build -o <dir>/` of main packages under those paths."""
    packages = ["cmd/tool/v3", "cmd/other/v10", "cmd/api/v1", "cmd/db/v1beta1", "cmd/plain"]
    (tmp_path / "go.mod").write_text("module example.com/m\n\ngo 1.22\n")
    for package in packages:
        (tmp_path / package).mkdir(parents=True)
        (tmp_path / package / "main.go").write_text("package main\n\nfunc main() {}\n")
    out = tmp_path / "bin"
    subprocess.run(
        ["go", "build", "-o", f"{out}/", *[f"example.com/m/{p}" for p in packages]],
        cwd=tmp_path,
        check=True,
        env={**os.environ, "GOWORK": "off", "GOFLAGS": "-mod=mod"},
    )
    assert sorted(path.name for path in out.iterdir()) == [
        "other",
        "plain",
        "tool",
        "v1",
        "v1beta1",
    ]
    assert [default_name(f"example.com/m/{p}") for p in packages] == [
        "tool",
        "other",
        "v1",
        "v1beta1",
        "plain",
    ]
