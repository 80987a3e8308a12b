"""Relay every TCP connection to one address: a Service's ClusterIP for pods, with no kube-proxy.

    python3 tcp_forward.py LISTEN_HOST:LISTEN_PORT TARGET_HOST:TARGET_PORT

The harness listens on the ``kubernetes`` Service's ClusterIP (10.96.0.1:443, held by this
machine's loopback interface) and relays to the kube-apiserver, which serves on loopback only:
a pod's in-cluster client (``KUBERNETES_SERVICE_HOST``) reaches the API as on a cluster, and TLS
passes through untouched (the serving certificate names 10.96.0.1).
"""

from __future__ import annotations

import socket
import sys
import threading

from connect_proxy import address, splice


def relay(client: socket.socket, target: tuple[str, int]) -> None:
    """Connect to ``target`` and copy bytes both ways until either side closes."""
    try:
        upstream = socket.create_connection(target, timeout=10)
    except OSError as error:
        print(f"cannot reach {target[0]}:{target[1]}: {error}", flush=True)
        client.close()
        return
    upstream.settimeout(None)
    splice(client, upstream)


def main(argv: list[str]) -> int:
    """Listen on LISTEN_HOST:LISTEN_PORT until killed."""
    listen, target = address(argv[0]), address(argv[1])
    listener = socket.create_server(listen)
    print(f"relaying {listen[0]}:{listen[1]} to {target[0]}:{target[1]}", flush=True)
    while True:
        client, _ = listener.accept()
        threading.Thread(target=relay, args=(client, target), daemon=True).start()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
