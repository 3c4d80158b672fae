"""devkit.ports: ports the kernel never hands to an outgoing connection, each drawn once."""

from __future__ import annotations

import json
import socket

import pytest

from devkit import ports


@pytest.fixture(autouse=True)
def reservations(tmp_path, monkeypatch):
    path = tmp_path / "ports.json"
    monkeypatch.setattr(ports, "RESERVATIONS", path)
    return path


def test_ports_are_drawn_below_the_ephemeral_range_and_never_twice():
    drawn = [ports.free_port() for _ in range(300)]
    assert len(set(drawn)) == len(drawn)
    assert all(ports.LOWEST <= port < ports._ephemeral_low() for port in drawn)


def test_a_port_something_listens_on_is_never_drawn(monkeypatch):
    with socket.create_server(("127.0.0.1", 0)) as listener:
        taken = listener.getsockname()[1]
        monkeypatch.setattr(ports, "LOWEST", taken)
        monkeypatch.setattr(ports, "_ephemeral_low", lambda: taken + 1001)
        assert taken not in {ports.free_port() for _ in range(100)}


def test_a_reservation_of_another_process_is_kept_and_an_expired_one_dropped(reservations, monkeypatch):
    monkeypatch.setattr(ports, "LOWEST", 21000)
    monkeypatch.setattr(ports, "_ephemeral_low", lambda: 22001)
    reserved = {str(port): 4e9 for port in range(21000, 22001) if port != 21500}
    reservations.write_text(json.dumps({**reserved, "21500": 1.0}))
    assert ports.free_port() == 21500
    assert json.loads(reservations.read_text())["21500"] > 1.0


def test_a_low_ephemeral_range_leaves_the_choice_to_the_kernel(monkeypatch):
    monkeypatch.setattr(ports, "_ephemeral_low", lambda: ports.LOWEST + 10)
    port = ports.free_port()
    assert port > 0
    assert not ports.RESERVATIONS.exists()
