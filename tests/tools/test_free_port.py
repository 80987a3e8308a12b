"""The harness never hands out one port twice (harness/processes.py, free_port).

On 2026-12-07 a tier run failed to start: the kernel picked port 49699 for Kueue's webhook,
and again for its health probe, both picked before Kueue bound either; Kueue died with
"listen tcp :49699: bind: address already in use".
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "controlplane"))
from harness import processes  # noqa: E402


class KernelPicking:
    """A socket whose bind to port 0 gets the kernel's next pick from a fixed list."""

    picks = iter([49699, 49699, 49700])

    def __init__(self) -> None:
        self.port = 0

    def __enter__(self) -> KernelPicking:
        return self

    def __exit__(self, *exc) -> None:
        pass

    def bind(self, address: tuple[str, int]) -> None:
        self.port = next(self.picks)

    def getsockname(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)


def test_a_port_the_kernel_picks_again_is_not_handed_out_again(monkeypatch):
    monkeypatch.setattr(processes, "_GIVEN", set())
    monkeypatch.setattr(processes.socket, "socket", KernelPicking)
    assert [processes.free_port(), processes.free_port()] == [49699, 49700]


def test_the_ports_handed_out_are_free_and_distinct(monkeypatch):
    monkeypatch.setattr(processes, "_GIVEN", set())
    ports = [processes.free_port() for _ in range(50)]
    assert len(set(ports)) == 50
    for port in ports:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))
