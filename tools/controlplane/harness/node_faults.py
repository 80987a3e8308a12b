"""Losing a real node and getting it back, the way a power cut and a reboot do.

``power_off`` kills the node's kubelet, kube-proxy and policy enforcer (harness/enforcer.py)
and every container it runs (SIGKILL: nothing is told); its containerd stays, as an image
store, and so do the enforcer's rules. ``power_on`` starts the three again with the commands
``cluster-up`` gave them; the kubelet then finds its pods' containers dead and its pods'
fate in the API (a job deleted meanwhile takes them).
The fault tests (tests/cluster/test_faults.py) use both; so can a person:

    python tools/controlplane/cluster.py node-off 2
    python tools/controlplane/cluster.py node-on 2
"""

from __future__ import annotations

import json
import subprocess

from harness.node import NODES, RealNode, wait_ready
from harness.paths import STATE
from harness.processes import Process, alive, terminate

PROGRAMS = ("kubelet", "kube-proxy", "kube-router")  # with the node's policy enforcer


def node(index: int) -> RealNode:
    """The real node of that index (1, 2)."""
    (found,) = [n for n in NODES if n.index == index]
    return found


def power_off(real: RealNode) -> None:
    """Kill the node's kubelet, kube-proxy, enforcer and containers at once."""
    state = json.loads(STATE.read_text())
    pids = [state["pids"][real.program(p)] for p in PROGRAMS if real.program(p) in state["pids"]]
    for pid in pids:
        subprocess.run(["kill", "-KILL", str(pid)], capture_output=True)
    ctr = [*real.ctr(), "-n", "k8s.io", "tasks"]
    tasks = subprocess.run([*ctr, "list", "-q"], capture_output=True, text=True).stdout.split()
    for task in tasks:
        subprocess.run([*ctr, "kill", "-s", "SIGKILL", task], capture_output=True)
    terminate(pids, 5)


def power_on(real: RealNode, api) -> None:
    """Start the node's kubelet, kube-proxy and enforcer again; wait until the node is Ready."""
    state = json.loads(STATE.read_text())
    recorded = {p["name"]: p for p in state.get("processes", [])}
    for program in PROGRAMS:
        name = real.program(program)
        if alive(state["pids"].get(name, 0)):
            continue
        state["pids"][name] = Process(**recorded[name]).start()
    STATE.write_text(json.dumps(state, indent=1))
    wait_ready(api, real)
