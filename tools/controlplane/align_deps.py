#!/usr/bin/env python3
"""Give the tier's Go modules of one Kubernetes generation one version of each shared dependency.

Go's build cache keys a compiled package on its source and on its dependencies' versions, so
client-go, apimachinery, controller-runtime, gRPC ... compile once for all the programs of a
group only where every module of the group resolves every one of them to the same version.
This raises each shared dependency to the highest version any member requires (what MVS
would pick if they were one module), then tidies, until nothing changes. The programs' own
code stays the tagged release each go.mod pins. Run it after changing a pin in a group:

    python tools/controlplane/align_deps.py

tests/tools/test_aligned_deps.py fails when a group is not aligned.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

CONTROLPLANE = Path(__file__).resolve().parent
# Modules built on the same Kubernetes minor, whose shared dependencies can be one version.
GROUPS = (
    ("kubernetes", "kwok", "jobset", "kueue", "trainer-v2.3.0", "training-operator", "kube-router"),
    ("containerd", "coredns"),
)
_SEMVER = re.compile(r"v(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$")


def semver_key(version: str) -> tuple:
    """A sort key for a Go module version (pseudo-versions are prereleases, as in Go)."""
    match = _SEMVER.match(version)
    if not match:
        raise ValueError(f"not a module version: {version}")
    major, minor, patch, pre = match.groups()
    if pre is None:
        return (int(major), int(minor), int(patch), 1, ())
    parts = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in pre.split("."))
    return (int(major), int(minor), int(patch), 0, parts)


def _directives(text: str, verb: str) -> list[list[str]]:
    """The words of each ``verb`` line of a go.mod, in a block or alone, comments cut."""
    found, block = [], False
    for raw in text.splitlines():
        line = raw.split("//")[0].strip()
        if block:
            block = line != ")"
            if block and line:
                found.append(line.split())
        elif line == f"{verb} (":
            block = True
        elif line.startswith(f"{verb} "):
            found.append(line.split()[1:])
    return found


def versions(folder: str) -> dict[str, tuple[str, bool]]:
    """Module -> (the version it resolves to, whether a replace sets it), for one member."""
    text = (CONTROLPLANE / folder / "go.mod").read_text()
    found = {words[0]: (words[1], False) for words in _directives(text, "require")}
    for words in _directives(text, "replace"):
        old, new = words[0], words[words.index("=>") + 1 :]
        if len(new) == 2 and new[0] == old:
            found[old] = (new[1], True)
    return found


def misaligned(group: tuple[str, ...]) -> dict[str, dict[str, str]]:
    """Module -> {member: version}, for each shared module whose versions differ."""
    by_member = {member: versions(member) for member in group}
    shared: dict[str, dict[str, str]] = {}
    for member, found in by_member.items():
        for module, (version, _) in found.items():
            shared.setdefault(module, {})[member] = version
    return {m: v for m, v in shared.items() if len(v) > 1 and len(set(v.values())) > 1}


def _go(folder: str, *args: str) -> None:
    env = {**os.environ, "GOWORK": "off", "GOFLAGS": "-mod=mod"}
    subprocess.run(["go", *args], cwd=CONTROLPLANE / folder, env=env, check=True)


def align(group: tuple[str, ...]) -> None:
    """Raise every shared dependency of the group to its highest version; tidy; repeat."""
    for _ in range(8):
        todo = misaligned(group)
        if not todo:
            return
        for member in group:
            found = versions(member)
            edits = []
            for module, by_member in todo.items():
                if member not in by_member:
                    continue
                highest = max(by_member.values(), key=semver_key)
                version, replaced = found[module]
                if version != highest:
                    flag = f"-replace={module}={module}@{highest}" if replaced else None
                    edits.append(flag or f"-require={module}@{highest}")
            if edits:
                _go(member, "mod", "edit", *edits)
                _go(member, "mod", "tidy")
    raise SystemExit(f"{group} did not settle in 8 rounds: {sorted(misaligned(group))}")


def main() -> None:
    """Align every group."""
    for group in GROUPS:
        print(f"aligning {', '.join(group)}", flush=True)
        align(group)
    print("aligned")


if __name__ == "__main__":
    sys.exit(main())
