"""The drills' pod timeline against a loopback apiserver stand-in (TLS, a watch that streams).

A drill ends with the timeline stopped and the cluster's client closed (Context.close, then
LocalCluster.down); the next drill's `hack/cluster up` prints its export lines into a pipe.
A watch thread still reading through a socket that somebody else closed reads the descriptor
*number*: a pipe opened meanwhile gets that number, and the thread takes the first bytes of
`export PATH=...` (the soak drill's `KeyError: 'PATH'` after the scale drill).
"""

from __future__ import annotations

import base64
import json
import os
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from bench.drills.observe import PodTimeline
from devkit.kube import Kube, wait_for
from tests.unit.kube_server import TLSPair, tls_pair

EXPORTS = b"export PATH=/cache/bin/kubernetes:$PATH\nexport KUBECONFIG=/state/admin.kubeconfig\n"


def watch_event(name: str, rv: int) -> bytes:
    line = (
        json.dumps(
            {"type": "ADDED", "object": {"metadata": {"name": name, "resourceVersion": str(rv)}, "spec": {}}}
        ).encode()
        + b"\n"
    )
    return f"{len(line):x}\r\n".encode() + line + b"\r\n"


class WatchServer:
    """Answers the timeline's list with a resourceVersion and its watch with one pod; the test
    sends more events on the watch connection with `send`."""

    def __init__(self, tls: TLSPair) -> None:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(tls.directory / "server.crt", tls.directory / "server.key")
        self._ctx = ctx
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.watch: ssl.SSLSocket | None = None
        self._connections: list[ssl.SSLSocket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                raw, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(raw,), daemon=True).start()

    def _serve(self, raw: socket.socket) -> None:
        conn = self._ctx.wrap_socket(raw, server_side=True)
        self._connections.append(conn)
        while True:
            request = b""
            while b"\r\n\r\n" not in request:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                request += chunk
            if b"watch=1" in request.split(b"\r\n", 1)[0]:
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    b"Transfer-Encoding: chunked\r\n\r\n" + watch_event("p1", 2)
                )
                self.watch = conn
                return
            body = b'{"metadata": {"resourceVersion": "1"}, "items": []}'
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
            )

    def send(self, event: bytes) -> None:
        assert self.watch is not None
        self.watch.sendall(event)

    def close(self) -> None:
        self._listener.close()
        for conn in self._connections:
            conn.close()


@pytest.fixture
def tls() -> TLSPair:
    return tls_pair()


@pytest.fixture
def server(tls: TLSPair) -> Iterator[WatchServer]:
    srv = WatchServer(tls)
    yield srv
    srv.close()


@pytest.fixture
def kube(server: WatchServer, tls: TLSPair, tmp_path: Path) -> Iterator[Kube]:
    ca = base64.b64encode((tls.directory / "ca.crt").read_bytes()).decode()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "c",
        "clusters": [
            {"name": "c", "cluster": {"server": f"https://127.0.0.1:{server.port}", "certificate-authority-data": ca}}
        ],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    client = Kube(path)
    yield client
    client.http.close()


def client_fd_of(conn: ssl.SSLSocket) -> int:
    """This process's descriptor of the client end of `conn` (a connection the server accepted)."""
    peer = conn.getpeername()
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            copy = os.dup(fd)
        except OSError:
            continue  # the directory's own descriptor, gone
        try:
            probe = socket.socket(fileno=copy)
        except OSError:
            os.close(copy)  # not a socket
            continue
        with probe:
            try:
                if probe.getsockname() == peer:
                    return fd
            except OSError:
                continue
    raise AssertionError(f"no descriptor of this process is the client end of {peer}")


def blocked_in_poll(thread: threading.Thread) -> bool:
    wchan = Path(f"/proc/self/task/{thread.native_id}/wchan").read_text()
    return "poll" in wchan


def test_a_stopped_timeline_never_reads_a_descriptor_it_no_longer_owns(server: WatchServer, kube: Kube) -> None:
    timeline = PodTimeline(kube, "drill").start()
    wait_for("the first pod seen", lambda: "p1" in timeline.created, timeout=10, interval=0.02)
    assert server.watch is not None
    watch_fd = client_fd_of(server.watch)
    wait_for(
        "the watch thread waiting for the next event",
        lambda: blocked_in_poll(timeline._thread),
        timeout=10,
        interval=0.02,
    )

    timeline.stop()
    kube.http.close()  # the drill is over: LocalCluster.down closes the cluster's client
    read_end, write_end = os.pipe()
    try:
        try:
            os.fstat(watch_fd)
        except OSError:  # the number is free: the next pipe (hack/cluster up's stdout) takes it
            os.dup2(read_end, watch_fd)
            os.close(read_end)
            read_end = watch_fd
        os.write(write_end, EXPORTS)
        server.send(watch_event("p2", 3))  # the old watch connection wakes its reader
        timeline._thread.join(10)
        assert not timeline._thread.is_alive(), "the stopped timeline ends at the next event"
        os.close(write_end)
        write_end = -1
        with os.fdopen(read_end, "rb") as pipe:
            read_end = -1
            assert pipe.read() == EXPORTS, "the watch thread read from somebody else's pipe"
    finally:
        for fd in (read_end, write_end):
            if fd >= 0:
                os.close(fd)
