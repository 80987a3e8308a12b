"""An HTTP CONNECT proxy that sends every tunnel to one local address (or a route's).

Katib's controller reaches a Suggestion's algorithm service by its Service name,
``<suggestion>-<algorithm>.<namespace>:6789`` (katib v0.19.0
pkg/controller.v1beta1/util/suggestion.go, GetAlgorithmEndpoint). The controller runs on
this machine, outside the pod network and its DNS, and so does Katib's Go suggestion service
(goptuna); the harness starts the controller with HTTPS_PROXY pointing at this proxy: grpc-go
then tunnels through it with CONNECT and leaves the name unresolved (grpc-go >= 1.71,
internal/resolver/delegatingresolver), and the proxy connects to the local service.

    python3 connect_proxy.py LISTEN_PORT TARGET_HOST:TARGET_PORT [HOST_PREFIX=HOST:PORT ...]

A tunnel to a host starting with a HOST_PREFIX goes to that prefix's address instead: the
harness sends ``katib-db-manager.`` to Katib's DB manager (harness/controllers/katib.py), so
that the suggestion service never answers in its place.
"""

from __future__ import annotations

import socket
import sys
import threading


def pipe(source: socket.socket, sink: socket.socket) -> None:
    """Copy bytes one way until either side closes."""
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (source, sink):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def serve(
    client: socket.socket, target: tuple[str, int], routes: dict[str, tuple[str, int]]
) -> None:
    """Read one CONNECT request, answer 200, then relay to ``target`` (or a route's)."""
    request = b""
    while b"\r\n\r\n" not in request:
        chunk = client.recv(4096)
        if not chunk:
            client.close()
            return
        request += chunk
    head, _, rest = request.partition(b"\r\n\r\n")
    if not head.startswith(b"CONNECT "):
        client.sendall(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
        client.close()
        return
    host = head.split()[1].decode()
    target = next((t for prefix, t in routes.items() if host.startswith(prefix)), target)
    try:
        upstream = socket.create_connection(target, timeout=10)
        upstream.settimeout(None)
    except OSError as error:
        message = f"cannot reach {target}: {error}".encode()
        client.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: %d\r\n\r\n" % len(message))
        client.sendall(message)
        client.close()
        return
    print(f"CONNECT {host} -> {target[0]}:{target[1]}", flush=True)
    client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
    if rest:
        upstream.sendall(rest)
    threading.Thread(target=pipe, args=(upstream, client), daemon=True).start()
    pipe(client, upstream)


def address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` as a socket address."""
    host, port = text.rsplit(":", 1)
    return host, int(port)


def main(argv: list[str]) -> int:
    """Listen on 127.0.0.1:LISTEN_PORT until killed."""
    port, target = int(argv[0]), address(argv[1])
    routes = {prefix: address(to) for prefix, to in (route.split("=", 1) for route in argv[2:])}
    listener = socket.create_server(("127.0.0.1", port))
    print(f"proxy on 127.0.0.1:{port} -> {target[0]}:{target[1]}, routes {routes}", flush=True)
    while True:
        client, _ = listener.accept()
        args = (client, target, routes)
        threading.Thread(target=serve, args=args, daemon=True).start()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
