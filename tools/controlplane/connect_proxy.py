"""An HTTP CONNECT proxy that sends every tunnel to one local address (or a route's).

Katib's controller reaches a Suggestion's algorithm service by its Service name,
``<suggestion>-<algorithm>.<namespace>:6789`` (katib v0.19.0
pkg/controller.v1beta1/util/suggestion.go, GetAlgorithmEndpoint). The controller runs on
this machine, outside the pod network and its DNS, and so does Katib's Go suggestion service
(goptuna); the harness starts the controller with HTTPS_PROXY pointing at this proxy: grpc-go
then tunnels through it with CONNECT and leaves the name unresolved (grpc-go >= 1.71,
internal/resolver/delegatingresolver), and the proxy connects to the local service.

    python3 connect_proxy.py LISTEN_PORT TARGET_HOST:TARGET_PORT [HOST_PREFIX=HOST:PORT ...]
        [--pods-on NODE[,NODE...] --kubeconfig FILE]

A tunnel to a host starting with a HOST_PREFIX goes to that prefix's address instead: the
harness sends ``katib-db-manager.`` to Katib's DB manager (harness/controllers/katib.py), so
that the suggestion service never answers in its place.

With ``--pods-on``, a tunnel to ``<service>.<namespace>`` whose Service has a ready endpoint
on one of those (real) nodes goes to the endpoint's pod address: each Experiment then talks
to its own suggestion pod, as on a cluster. The local goptuna keeps one study per process, the first
Experiment's (katib v0.19.0 pkg/suggestion/v1beta1/goptuna/service.go), so it can stand in
only for Experiments whose pods are kwok's.
"""

from __future__ import annotations

import argparse
import socket
import sys
import threading
from collections.abc import Callable

Resolver = Callable[[str, int], tuple[str, int] | None]


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


def splice(client: socket.socket, upstream: socket.socket) -> None:
    """Copy bytes both ways until either side closes."""
    threading.Thread(target=pipe, args=(upstream, client), daemon=True).start()
    pipe(client, upstream)


def serve(
    client: socket.socket,
    target: tuple[str, int],
    routes: dict[str, tuple[str, int]],
    resolve: Resolver,
) -> None:
    """Read one CONNECT request, answer 200, then relay to ``target`` (or a route's, or a pod's)."""
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
    host, port = address(head.split()[1].decode())
    routed = next((t for prefix, t in routes.items() if host.startswith(prefix)), None)
    target = routed or resolve(host, port) or target
    try:
        upstream = socket.create_connection(target, timeout=10)
        upstream.settimeout(None)
    except OSError as error:
        message = f"cannot reach {target}: {error}".encode()
        client.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: %d\r\n\r\n" % len(message))
        client.sendall(message)
        client.close()
        return
    print(f"CONNECT {host}:{port} -> {target[0]}:{target[1]}", flush=True)
    client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
    if rest:
        upstream.sendall(rest)
    splice(client, upstream)


def address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` as a socket address."""
    host, port = text.rsplit(":", 1)
    return host, int(port)


def pod_resolver(nodes: str, kubeconfig: str) -> Resolver:
    """A resolver to a ready endpoint, on one of ``nodes`` (comma-separated), of a Service.

    The Service is the one a ``<service>.<namespace>`` host names.
    """
    from kubernetes import client, config
    from urllib3.exceptions import HTTPError

    discovery = client.DiscoveryV1Api(config.new_client_from_config(kubeconfig))
    real = set(nodes.split(","))

    def resolve(host: str, port: int) -> tuple[str, int] | None:
        service, _, rest = host.partition(".")
        namespace = rest.split(".", 1)[0]
        if not namespace:
            return None
        try:
            slices = discovery.list_namespaced_endpoint_slice(
                namespace, label_selector=f"kubernetes.io/service-name={service}"
            ).items
        except (client.ApiException, HTTPError) as error:
            print(f"cannot read {namespace}/{service}'s endpoints: {error}", flush=True)
            return None
        for endpoint in (e for s in slices for e in s.endpoints or []):
            if endpoint.node_name in real and (endpoint.conditions.ready is not False):
                return endpoint.addresses[0], port
        return None

    return resolve


def main(argv: list[str]) -> int:
    """Listen on 127.0.0.1:LISTEN_PORT until killed."""
    parser = argparse.ArgumentParser(description="CONNECT proxy to local services")
    parser.add_argument("port", type=int)
    parser.add_argument("target", type=address)
    parser.add_argument("routes", nargs="*", metavar="HOST_PREFIX=HOST:PORT")
    parser.add_argument("--pods-on", metavar="NODE[,NODE...]")
    parser.add_argument("--kubeconfig")
    args = parser.parse_args(argv)
    routes = {prefix: address(to) for prefix, to in (r.split("=", 1) for r in args.routes)}
    resolve = pod_resolver(args.pods_on, args.kubeconfig) if args.pods_on else lambda h, p: None
    listener = socket.create_server(("127.0.0.1", args.port))
    print(f"proxy on 127.0.0.1:{args.port} -> {args.target}, routes {routes}", flush=True)
    while True:
        client, _ = listener.accept()
        work = (client, args.target, routes, resolve)
        threading.Thread(target=serve, args=work, daemon=True).start()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
