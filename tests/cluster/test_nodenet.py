"""hack/nodenet.py's egress proxy: CONNECT to a real node's address is relayed, dialled in that
node's network namespace (setns(2): root, as for the real nodes). The refusals: tests/unit/test_nodenet.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.unit import test_nodenet as refusals
from tests.unit.test_nodenet import connect, write_nodes

proxy, echo_server = refusals.proxy, refusals.echo_server  # their fixtures

# setns(2) into a network namespace, even the caller's own, needs CAP_SYS_ADMIN.
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="setns needs CAP_SYS_ADMIN (run as root, as CI does)")


@needs_root
def test_connect_to_a_real_nodes_address_is_relayed_inside_its_namespace(
    proxy: tuple[Path, Path], echo_server: int
) -> None:
    state, sock = proxy
    write_nodes(state, {"n1": {"ip": "127.0.0.1", "netns": "/proc/self/ns/net"}})
    client, head = connect(sock, f"127.0.0.1:{echo_server}")
    assert head.startswith(b"HTTP/1.1 200"), head
    client.sendall(b"hello")
    assert client.recv(1024) == b"HELLO"
    client.close()
