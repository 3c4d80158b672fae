"""hack/nodenet.py's egress proxy: anything but a real node's address or a host service's port is
refused at once and never dialled. The relay into a node's network namespace (setns, root):
tests/cluster/test_nodenet.py."""

from __future__ import annotations

import argparse
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from hack import nodenet


@pytest.fixture
def echo_server() -> Iterator[int]:
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                while data := conn.recv(1024):
                    conn.sendall(data.upper())

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[1]
    server.close()


@pytest.fixture
def proxy(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """The egress proxy on a unix socket, for a state dir whose one real node is this process's
    own network namespace at 127.0.0.1."""
    state = tmp_path / "state"
    state.mkdir()
    sock = tmp_path / "egress.sock"
    args = argparse.Namespace(state=str(state), socket=str(sock), listen=[])
    threading.Thread(target=nodenet.egress, args=(args,), daemon=True).start()
    for _ in range(100):
        if sock.exists():
            break
        threading.Event().wait(0.02)
    yield state, sock


def write_nodes(state: Path, nodes: dict[str, dict[str, str]], host_services: dict[str, int] | None = None) -> None:
    (state / "state.json").write_text(json.dumps({"real_nodes": nodes, "host_services": host_services or {}}))


def connect(sock: Path, target: str) -> tuple[socket.socket, bytes]:
    for _ in range(100):  # the socket file exists from bind(), connections from listen()
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.settimeout(5)
        try:
            client.connect(str(sock))
            break
        except ConnectionRefusedError:
            client.close()
            threading.Event().wait(0.02)
    client.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = client.recv(1024)
        if not chunk:
            break
        head += chunk
    return client, head


def test_connect_to_any_other_address_is_refused_without_dialling(proxy: tuple[Path, Path], echo_server: int) -> None:
    state, sock = proxy
    write_nodes(state, {"n1": {"ip": "198.18.0.2", "netns": "/proc/self/ns/net"}})
    # The echo server listens there, but 127.0.0.1 is no real node's address: never dialled.
    client, head = connect(sock, f"127.0.0.1:{echo_server}")
    assert head.startswith(b"HTTP/1.1 502"), head
    assert client.recv(1024) == b""  # closed
    client.close()


def test_a_host_service_is_dialled_on_the_machines_loopback(proxy: tuple[Path, Path], echo_server: int) -> None:
    state, sock = proxy
    write_nodes(state, {}, host_services={"metrics-server": echo_server})
    client, head = connect(sock, f"{nodenet.HOST_IP}:{echo_server}")
    assert head.startswith(b"HTTP/1.1 200"), head
    client.sendall(b"ping")
    assert client.recv(1024) == b"PING"
    client.close()
    # Another port of the machine, or the host's address under another name: never dialled.
    for target in (f"{nodenet.HOST_IP}:{echo_server + 1}", f"127.0.0.1:{echo_server}"):
        client, head = connect(sock, target)
        assert head.startswith(b"HTTP/1.1 502"), (target, head)
        client.close()


def test_the_proxy_serves_on_tcp_too(tmp_path: Path, echo_server: int) -> None:
    """`--listen`: a program of the machine uses it as its HTTPS_PROXY (metrics-server)."""
    state = tmp_path / "state"
    state.mkdir()
    write_nodes(state, {}, host_services={"x": echo_server})
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()
    args = argparse.Namespace(state=str(state), socket=None, listen=[f"127.0.0.1:{port}"])
    threading.Thread(target=nodenet.egress, args=(args,), daemon=True).start()
    for _ in range(100):
        try:
            client = socket.create_connection(("127.0.0.1", port), timeout=5)
            break
        except ConnectionRefusedError:
            threading.Event().wait(0.02)
    client.sendall(f"CONNECT {nodenet.HOST_IP}:{echo_server} HTTP/1.1\r\n\r\n".encode())
    assert client.recv(1024).startswith(b"HTTP/1.1 200")
    client.sendall(b"tcp")
    assert client.recv(1024) == b"TCP"
    client.close()


def test_a_missing_state_file_refuses_everything(proxy: tuple[Path, Path]) -> None:
    _, sock = proxy
    client, head = connect(sock, "198.18.0.2:10250")
    assert head.startswith(b"HTTP/1.1 502"), head
    client.close()


def test_split_host_port() -> None:
    assert nodenet.split_host_port("10.96.0.1:443") == ("10.96.0.1", 443)
    assert nodenet.split_host_port("[::1]:8443") == ("::1", 8443)
