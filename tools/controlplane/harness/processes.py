"""Local programs: running, starting in the background, probing, waiting, stopping."""

from __future__ import annotations

import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from harness.paths import KUBECONFIG, LOGS, PIDS, RUN


def run(
    command: list[str], cwd: Path | None = None, env: dict | None = None, capture: bool = False
) -> str:
    """Run a command; on failure raise with its output."""
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    if result.returncode:
        output = (result.stdout + result.stderr).strip()[-4000:]
        raise SystemExit(f"command failed ({result.returncode}): {' '.join(command)}\n{output}")
    return result.stdout if capture else ""


_GIVEN: set[int] = set()  # ports handed out by this process, maybe not bound yet


def free_port() -> int:
    """A TCP port nothing listens on now (the kernel's pick), and not handed out before.

    The kernel may pick the same port twice in a row once the first socket is closed, and a
    port handed out is often bound only later, by a program started after the next pick: in
    the tier Kueue got the same port for its webhook and its health probe, and died.
    """
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port not in _GIVEN:
            _GIVEN.add(port)
            return port


def port_free(port: int) -> bool:
    """Whether ``port`` can be bound on every address."""
    with socket.socket() as sock:
        try:
            sock.bind(("0.0.0.0", port))
            return True
        except OSError:
            return False


def log_tail(path: Path, lines: int = 40) -> str:
    """The last lines of a log file (for error messages)."""
    if not path.exists():
        return f"(no log at {path})"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


@dataclass
class Process:
    """A program the harness starts and keeps the pid of."""

    name: str
    command: list[str]
    env: dict[str, str] = field(default_factory=dict)
    health: str = ""  # http URL answering 200 when ready
    webhook_port: int = 0  # answers TLS with our certificate when ready

    def start(self) -> int:
        """Start it in its own session, output to build/cluster/logs/<name>.log; return its pid."""
        log = (LOGS / f"{self.name}.log").open("ab")
        env = {**os.environ, "KUBECONFIG": str(KUBECONFIG), **self.env}
        child = subprocess.Popen(
            self.command,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=RUN,
            start_new_session=True,
        )
        (PIDS / f"{self.name}.pid").write_text(str(child.pid))
        return child.pid


def wait_for(what: str, check, timeout: float, component: str | None = None) -> None:
    """Poll ``check()`` until true; on timeout exit naming ``what`` with the component's log."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.25)
    log = LOGS / f"{component}.log" if component else None
    tail = f"\n--- last lines of {log}:\n{log_tail(log)}" if log else ""
    raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}{tail}")


def http_ok(url: str) -> bool:
    """Whether ``url`` answers 200."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def tls_ok(port: int, ca: Path) -> bool:
    """The webhook server answers HTTPS on 127.0.0.1 with a certificate our CA signed."""
    context = ssl.create_default_context(cafile=str(ca))
    try:
        request = urllib.request.Request(
            f"https://127.0.0.1:{port}/healthz-probe", method="POST", data=b"{}"
        )
        urllib.request.urlopen(request, context=context, timeout=2)
        return True
    except urllib.error.HTTPError:  # any HTTP answer over verified TLS will do
        return True
    except OSError:
        return False


def wait_ready(process: Process, pid: int, ca: Path, timeout: float = 120) -> None:
    """Wait until a started process answers its readiness probe and TLS port (those it has).

    Exits with the last lines of its log if it dies first.
    """

    def ready() -> bool:
        if not alive(pid):
            log = LOGS / f"{process.name}.log"
            raise SystemExit(
                f"{process.name} exited while starting; last lines of {log}:\n{log_tail(log)}"
            )
        probe_ok = not process.health or http_ok(process.health)
        return probe_ok and (not process.webhook_port or tls_ok(process.webhook_port, ca))

    wait_for(f"{process.name} (readiness probe and TLS)", ready, timeout, process.name)


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists and has not exited."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped) counts as gone
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def wait_gone(pids: list[int], timeout: float) -> None:
    """Wait until the processes exit; SIGKILL what is left after ``timeout``."""
    deadline = time.monotonic() + timeout
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
    while any(alive(p) for p in pids):
        time.sleep(0.05)


def terminate(pids: list[int], timeout: float) -> None:
    """SIGTERM each process (its whole group when it leads one), then wait as ``wait_gone``."""
    for pid in pids:
        if alive(pid):
            if os.getpgid(pid) == pid:
                os.killpg(pid, signal.SIGTERM)
            else:
                os.kill(pid, signal.SIGTERM)
    wait_gone(pids, timeout)
