"""Restarting one controller of a running tier with more flags (a cluster admin's change).

Tests use it to run a controller as an admin would configure it for one case, e.g. the
Training Operator with ``--pytorch-init-container-template-file`` for namespaces enforcing
Pod Security "restricted", then restore it.
"""

from __future__ import annotations

import json

from harness.paths import LOGS, PKI, STATE
from harness.processes import Process, alive, http_ok, log_tail, terminate, tls_ok, wait_for


def restart(name: str, extra_args: tuple[str, ...] = ()) -> None:
    """Stop controller ``name``, start its recorded command plus ``extra_args``, wait for it."""
    state = json.loads(STATE.read_text())
    (recorded,) = [p for p in state["processes"] if p["name"] == name]
    terminate([state["pids"][name]], 15)
    process = Process(**{**recorded, "command": [*recorded["command"], *extra_args]})
    pid = process.start()
    state["pids"][name] = pid

    def ready() -> bool:
        if not alive(pid):
            raise SystemExit(f"{name} exited on restart:\n{log_tail(LOGS / f'{name}.log')}")
        return http_ok(process.health) and tls_ok(process.webhook_port, PKI / "ca.crt")

    wait_for(f"{name} to be ready again", ready, 120, name)
    STATE.write_text(json.dumps(state, indent=1))
