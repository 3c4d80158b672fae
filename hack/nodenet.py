#!/usr/bin/env python3
"""The two TCP relays that join the real nodes' network namespaces to the control plane.

Each real node (hack/cluster add-node --real) has a network namespace of its own holding only
`lo`, with the node's IP (198.18.0.N, a benchmarking range no real network uses) and the
kubernetes Service's ClusterIP on it. The machine's network is never changed: no interface,
route or iptables rule is added outside those namespaces. Two relays cross the boundary:

    python3 hack/nodenet.py egress --state STATE [--socket SOCK] [--listen IP:PORT]
        The kube-apiserver's egress proxy for its "cluster" traffic (EgressSelectorConfiguration,
        HTTP CONNECT over a unix socket): kubelet connections (logs, exec, port-forward) and
        calls to webhooks referenced by a Service (with --enable-aggregator-routing the apiserver
        resolves the Service to an endpoint, the webhook pod's IP). A CONNECT to a real node's IP
        is dialled inside that node's namespace; one to 198.18.0.1 (the range's first address,
        no node's) at a port state.json lists under "host_services" is dialled on the machine's
        loopback: a process of the machine behind a Service, e.g. metrics-server behind its
        APIService. Any other destination is refused at once (KWOK pods' made-up IPs are never
        dialled on the machine's network). `--listen 127.0.0.1:PORT` serves the same on TCP, the
        HTTPS_PROXY of a program of the machine that calls the kubelets (metrics-server).

    python3 hack/nodenet.py apiserver --netns FILE --listen IP:PORT ... --to 127.0.0.1:PORT
        Inside one node's namespace, listen where the node's processes look for the apiserver
        (127.0.0.1:<apiserver port> for the kubelet, the kubernetes Service 10.96.0.1:443 for
        pods, as kube-proxy would route it) and relay to the apiserver on the machine's loopback.

A socket belongs to the network namespace its creating thread was in (setns(2) is per thread),
so one process holds sockets on both sides. Standard library only (ctypes for setns).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import signal
import socket
import sys
import threading
from pathlib import Path
from typing import Any

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def setns(path: str) -> None:
    """Move the calling thread into the network namespace pinned at path."""
    fd = os.open(path, os.O_RDONLY)
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns({path}): {os.strerror(err)}")
    finally:
        os.close(fd)


def pipe(src: socket.socket, dst: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := src.recv(65536):
            dst.sendall(data)
    with contextlib.suppress(OSError):
        dst.shutdown(socket.SHUT_WR)


def relay(a: socket.socket, b: socket.socket) -> None:
    """Copy both ways until both sides have closed."""
    other = threading.Thread(target=pipe, args=(b, a), daemon=True)
    other.start()
    pipe(a, b)
    other.join()
    a.close()
    b.close()


def split_host_port(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host.strip("[]"), int(port)


# ---------------------------------------------------------------- egress (host side)


# The machine's own processes, as a Service's endpoint: the first address of the nodes' range,
# which hack/cluster gives no node.
HOST_IP = "198.18.0.1"


def read_state(state_dir: Path) -> dict[str, Any]:
    """The cluster's state.json (read per connection, so nodes and host services added or removed
    after start are known at once); {} if there is none."""
    try:
        state = json.loads((state_dir / "state.json").read_text())
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def node_netns_by_ip(state: dict[str, Any]) -> dict[str, str]:
    """{node IP: its network namespace file} of the cluster's real nodes."""
    return {
        record["ip"]: record["netns"]
        for record in state.get("real_nodes", {}).values()
        if record.get("ip") and record.get("netns")
    }


def host_ports(state: dict[str, Any]) -> set[int]:
    """The machine's loopback ports a CONNECT to HOST_IP may reach: the host services'."""
    return {int(port) for port in (state.get("host_services") or {}).values()}


def read_request_head(conn: socket.socket) -> bytes:
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = conn.recv(4096)
        if not chunk or len(head) > 16384:
            raise ConnectionError("incomplete CONNECT request")
        head += chunk
    return head


def serve_connect(conn: socket.socket, state_dir: Path) -> None:
    try:
        head = read_request_head(conn)
        method, target, _ = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ", 2)
        host, port = split_host_port(target)
        state = read_state(state_dir)
        netns = node_netns_by_ip(state).get(host)
        on_host = host == HOST_IP and port in host_ports(state)
        if method != "CONNECT" or (netns is None and not on_host):
            conn.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
            log(f"refused {method} {target}: not a real node's address nor a host service's")
            conn.close()
            return
        if netns is None:
            netns = "the machine's loopback"
            upstream = socket.create_connection(("127.0.0.1", port), timeout=10)
        else:
            setns(netns)  # this thread only: the upstream socket is created in the node's namespace
            upstream = socket.create_connection((host, port), timeout=10)
        upstream.settimeout(None)
    except (OSError, ValueError, ConnectionError) as err:
        with contextlib.suppress(OSError):
            conn.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n")
            conn.close()
        log(f"CONNECT failed: {err}")
        return
    log(f"CONNECT {target}: dialled in {netns}")
    conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
    relay(conn, upstream)


def egress(args: argparse.Namespace) -> None:
    servers = []
    if args.socket:
        sock_path = Path(args.socket)
        sock_path.unlink(missing_ok=True)
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(str(sock_path))
        sock_path.chmod(0o600)
        servers.append(server)
    for listen in args.listen or []:
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(split_host_port(listen))
        servers.append(server)
    for server in servers:
        server.listen(128)
    log(f"egress proxy on {', '.join(str(s.getsockname()) for s in servers)}")
    state_dir = Path(args.state)
    threads = [threading.Thread(target=accept_connects, args=(s, state_dir), daemon=True) for s in servers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def accept_connects(server: socket.socket, state_dir: Path) -> None:
    while True:
        conn, _ = server.accept()
        # A new OS thread per connection: its setns never leaks into another connection.
        threading.Thread(target=serve_connect, args=(conn, state_dir), daemon=True).start()


# ---------------------------------------------------------------- apiserver (node side)


def serve_forward(conn: socket.socket, target: tuple[str, int]) -> None:
    try:
        upstream = socket.create_connection(target, timeout=10)
        upstream.settimeout(None)
    except OSError as err:
        log(f"apiserver {target[0]}:{target[1]}: {err}")
        conn.close()
        return
    relay(conn, upstream)


def accept_loop(server: socket.socket, target: tuple[str, int]) -> None:
    while True:
        conn, _ = server.accept()
        threading.Thread(target=serve_forward, args=(conn, target), daemon=True).start()


def apiserver(args: argparse.Namespace) -> None:
    host_netns = os.open("/proc/self/ns/net", os.O_RDONLY)
    servers = []
    setns(args.netns)
    try:
        for listen in args.listen:
            server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            server.bind(split_host_port(listen))
            server.listen(128)
            servers.append(server)
    finally:
        if _libc.setns(host_netns, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "setns back to the host's network namespace")
        os.close(host_netns)
    target = split_host_port(args.to)
    log(f"node {args.netns}: {', '.join(args.listen)} -> {args.to}")
    threads = [threading.Thread(target=accept_loop, args=(s, target), daemon=True) for s in servers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def log(message: str) -> None:
    print(json.dumps({"msg": message}), flush=True)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="hack/nodenet.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("egress")
    p.add_argument("--state", required=True, help="the cluster's state directory")
    p.add_argument("--socket", help="unix socket the apiserver's egress selector dials")
    p.add_argument("--listen", action="append", help="IP:PORT to serve on TCP too (a program's HTTPS_PROXY)")
    p = sub.add_parser("apiserver")
    p.add_argument("--netns", required=True, help="the node's pinned network namespace")
    p.add_argument("--listen", action="append", required=True, help="IP:PORT inside the node's namespace")
    p.add_argument("--to", required=True, help="the apiserver, IP:PORT on the machine")
    args = parser.parse_args(argv)
    if args.command == "egress" and not (args.socket or args.listen):
        parser.error("egress: --socket or --listen")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    if args.command == "egress":
        egress(args)
    else:
        apiserver(args)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
