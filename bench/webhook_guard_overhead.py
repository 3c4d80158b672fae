#!/usr/bin/env python3
"""CPU per review of the connection guard (app.connections), in process, without sockets.

    .venv/bin/python bench/webhook_guard_overhead.py            # 5 rounds of 20,000 reviews each way

The webhook's ASGI app behind uvicorn's HTTP protocol (httptools) is fed the 2-container
review on one keep-alive connection through a stand-in transport, with and without the
guard wrapping the protocol, alternately (which goes first alternates too), on uvloop when
installed. Prints the process CPU time per review of each (median of the rounds) and the difference: what the read deadline
and the connection cap cost per review, free of TLS, the kernel and other processes' noise
(bench/webhook_bench.py gives the end-to-end figure).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import uvicorn  # noqa: E402
from uvicorn.server import ServerState  # noqa: E402

from app.connections import ConnectionGuard, guarded_protocol  # noqa: E402
from app.metrics import Metrics  # noqa: E402
from app.server import create_app  # noqa: E402

REVIEW = (ROOT / "bench" / "data" / "review-2c.json").read_bytes()
REQUEST = (
    b"POST /mutate HTTP/1.1\r\nHost: webhook\r\nContent-Type: application/json\r\n"
    b"Content-Length: %d\r\n\r\n" % len(REVIEW)
) + REVIEW


class Transport(asyncio.Transport):
    """Counts the responses written (one write of the body per response)."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0
        self.answered: asyncio.Event = asyncio.Event()

    def write(self, data: Any) -> None:
        self.writes += 1
        if self.writes % 2 == 0:  # status line + headers, then the body
            self.answered.set()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 40000), "sockname": ("127.0.0.1", 8443)}.get(name, default)

    def is_closing(self) -> bool:
        return False

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass


async def serve(count: int, guarded: bool) -> float:
    """Process CPU seconds per review over ``count`` reviews."""
    app = create_app(Metrics(process_metrics=False))
    config = uvicorn.Config(app, http="httptools", lifespan="off", access_log=False, log_config=None)
    config.load()
    factory: Any = config.http_protocol_class
    if guarded:
        factory = guarded_protocol(factory, ConnectionGuard(1024, 10.0))
    protocol = factory(config=config, server_state=ServerState(), app_state={})
    transport = Transport()
    protocol.connection_made(transport)
    started = time.process_time()
    for _ in range(count):
        transport.answered.clear()
        protocol.data_received(REQUEST)
        await transport.answered.wait()
    elapsed = time.process_time() - started
    protocol.connection_lost(None)
    return elapsed / count


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reviews", type=int, default=20_000)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    logging.disable(logging.INFO)  # no decision lines: the guard's cost, not the log's
    try:
        import uvloop

        run = uvloop.run
        loop_name = "uvloop"
    except ImportError:
        run = asyncio.run
        loop_name = "asyncio"
    run(serve(2000, False))  # warm-up: imports, memoised originals
    run(serve(2000, True))
    plain: list[float] = []
    guarded: list[float] = []
    for i in range(args.rounds):  # which goes first alternates: no order bias
        for guard in (False, True) if i % 2 == 0 else (True, False):
            (guarded if guard else plain).append(run(serve(args.reviews, guard)))
    p_med, g_med = statistics.median(plain) * 1e6, statistics.median(guarded) * 1e6
    print(
        f"{loop_name}, httptools, {args.rounds} rounds x {args.reviews} reviews, one keep-alive connection, "
        f"no TLS, no logging"
    )
    print(
        f"uvicorn protocol alone : {p_med:6.1f} us CPU per review (rounds {', '.join(f'{x * 1e6:.1f}' for x in plain)})"
    )
    print(
        f"behind the guard       : {g_med:6.1f} us CPU per review (rounds {', '.join(f'{x * 1e6:.1f}' for x in guarded)})"
    )
    print(f"guard cost             : {g_med - p_med:+6.1f} us per review ({(g_med / p_med - 1) * 100:+.1f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
