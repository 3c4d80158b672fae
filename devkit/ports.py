"""Free TCP ports on 127.0.0.1 for the local clusters and the processes the tests start.

Binding to port 0 and closing again leaves a port that nothing holds until the server meant for
it starts; in between, the kernel may hand that very port to an outgoing connection (the
apiserver's to etcd, a build's download), since both come from `ip_local_port_range`. The
server then fails with "address already in use". So ports are drawn below that range, where
the kernel never picks one by itself, and each port handed out is reserved for a while in one
file every process on the machine consults under a lock, so clusters started at once, by
different processes, never draw the same port.

Standard library only: hack/cluster runs it before any virtualenv exists.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import random
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

# Below the usual registered services' crowd and far from the privileged ports.
LOWEST = 20000
# Long enough for the slowest component to bind after its port was drawn (a controller manager
# waits for the apiserver, which waits for etcd, on a loaded machine); a port still free after
# that was never used and may be drawn again.
RESERVATION_SECONDS = 900
RESERVATIONS = Path(tempfile.gettempdir()) / "workload-resizer-ports.json"


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on, no outgoing connection is given by the
    kernel, and no other caller was handed in the last RESERVATION_SECONDS."""
    low, high = LOWEST, _ephemeral_low() - 1
    if high - low < 1000:  # an ephemeral range starting low: the kernel's choice is all there is
        return _kernel_choice()
    with _reservations() as reserved:
        unreserved = [port for port in range(low, high + 1) if str(port) not in reserved]
        for port in random.sample(unreserved, min(len(unreserved), 200)):
            if _bindable(port):
                reserved[str(port)] = time.time() + RESERVATION_SECONDS
                return port
    return _kernel_choice()


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _kernel_choice() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def _reservations() -> Iterator[dict[str, float]]:
    """The unexpired reservations, locked for the block and written back after it (none, and
    nothing kept, where another user's file cannot be opened)."""
    try:
        fd = os.open(RESERVATIONS, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:
        yield {}
        return
    with os.fdopen(fd, "r+") as file:
        fcntl.flock(file, fcntl.LOCK_EX)
        try:
            stored = json.loads(file.read() or "{}")
        except json.JSONDecodeError:
            stored = {}
        now = time.time()
        reserved = {port: until for port, until in stored.items() if isinstance(until, (int, float)) and until > now}
        yield reserved
        file.seek(0)
        file.truncate()
        file.write(json.dumps(reserved))
