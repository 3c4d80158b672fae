#!/usr/bin/env python3
"""The webhook while a client holds connections that never finish a request (slowloris).

    .venv/bin/python bench/webhook_slowloris.py                        # 33, 100, 500, 2000 stalled
    .venv/bin/python bench/webhook_slowloris.py --stalled 33 --seconds 5
    .venv/bin/python bench/webhook_slowloris.py --app-dir /path/to/old/checkout   # before/after

For each count N of ``--stalled``, against a fresh ``python -m app`` (TLS, signing key,
pinned to core 0):

1. an attacker process opens N TLS connections and stalls each one (``--stall``; mix: a
   third send the headers of a review and 100 bytes of its body, a third half the request
   headers, a third nothing at all). Whenever the webhook drops one, the attacker opens another at
   once, so N stay open or in the making for the whole window;
2. meanwhile the legitimate client (another process, on the other core, like the
   apiserver) posts the 2-container review back to back for ``--seconds``: on one
   keep-alive connection (reconnecting when dropped), and every 10th review on a fresh
   connection (the apiserver opens new ones as it needs them). Each answer is a full
   decision (its patch stamps the originals), undecided (allowed without a patch), or a
   failure (connection refused/reset, timeout: failurePolicy Ignore admits the pod
   unstamped);
3. prints per N: legit p50/p99/max (keep-alive and fresh connections), full decisions /
   undecided / failures, the webhook's connection metrics (dropped at the read deadline,
   evicted, refused), its CPU and peak RSS, and the attacker's and legit client's CPU
   (well under one core each: the load generator was not the limit).

Flags of the webhook: ``--webhook-flag=--max-connections=256`` (repeatable). ``--app-dir``
runs another checkout's ``python -m app`` (the same flags must exist there). Only
127.0.0.1 is contacted; every process started is stopped.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import selectors
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import certs  # noqa: E402
from bench.webhook_hostile import LEGIT, Conn, cpu_seconds, free_port, pct, rss_kib  # noqa: E402

HEADERS = (
    b"POST /mutate HTTP/1.1\r\nHost: webhook\r\nContent-Type: application/json\r\n"
    b"Content-Length: %d\r\n\r\n" % len(LEGIT)
)
STALLS = {"body": HEADERS + LEGIT[:100], "headers": HEADERS[:40], "silent": b""}


def log(msg: str) -> None:
    print(f"[slowloris] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- attacker


def _attacker(
    port: int, cafile: str, count: int, stop, ready, report, core: str | None, kinds: tuple[str, ...]
) -> None:
    """Keep ``count`` stalled connections open until ``stop``; report (opened, dropped, cpu)."""
    if core:
        os.sched_setaffinity(0, {int(c) for c in core.split(",")})
    ctx = ssl.create_default_context(cafile=cafile)
    sel = selectors.DefaultSelector()
    opened = dropped = failed = 0
    open_now = 0

    def open_one(i: int) -> None:
        nonlocal opened, failed, open_now
        try:
            raw = socket.create_connection(("127.0.0.1", port), timeout=10)
            sock = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
            sock.sendall(STALLS[kinds[i % len(kinds)]])
            sock.setblocking(False)
        except OSError:
            failed += 1
            time.sleep(0.01)
            return
        sel.register(sock, selectors.EVENT_READ, i)
        opened += 1
        open_now += 1

    for i in range(count):
        open_one(i)
    ready.set()
    while not stop.is_set():
        for key, _ in sel.select(timeout=0.05):
            sock = key.fileobj
            try:
                data = sock.recv(65536)  # type: ignore[union-attr]
            except ssl.SSLWantReadError:
                continue
            except OSError:
                data = b""
            if data:
                continue  # an answer (e.g. 408): still ours until closed
            sel.unregister(sock)
            sock.close()  # type: ignore[union-attr]
            dropped += 1
            open_now -= 1
        while open_now < count and not stop.is_set():
            open_one(opened)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    report.put(
        {"opened": opened, "dropped": dropped, "connect_failures": failed, "cpu_s": usage.ru_utime + usage.ru_stime}
    )
    for key in list(sel.get_map().values()):
        key.fileobj.close()  # type: ignore[union-attr]


# ---------------------------------------------------------------- legitimate client


def _classify(status: int, data: bytes) -> str:
    if status == 200 and b'"patch"' in data:
        return "full"
    if status == 200:
        return "undecided"
    return f"http-{status}"


def _legit(port: int, cafile: str, seconds: float, report, core: str | None) -> None:
    if core:
        os.sched_setaffinity(0, {int(c) for c in core.split(",")})
    ctx = ssl.create_default_context(cafile=cafile)
    kept: list[float] = []
    fresh: list[float] = []
    outcomes: dict[str, int] = {}
    failures: list[str] = []
    conn = Conn(port, ctx)
    deadline = time.monotonic() + seconds
    n = 0
    while time.monotonic() < deadline:
        n += 1
        new = n % 10 == 0
        target = Conn(port, ctx) if new else conn
        t0 = time.perf_counter()
        try:
            status, data, _ = target.post(LEGIT, timeout=10)
            outcome = _classify(status, data)
        except Exception as err:  # refused, reset, timeout
            outcome = "failed"
            failures.append(repr(err))
        elapsed = (time.perf_counter() - t0) * 1000
        if new:
            target.close()
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        if outcome != "failed":
            (fresh if new else kept).append(elapsed)
    conn.close()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    report.put(
        {
            "kept": kept,
            "fresh": fresh,
            "outcomes": outcomes,
            "first_failures": failures[:3],
            "cpu_s": usage.ru_utime + usage.ru_stime,
        }
    )


# ---------------------------------------------------------------- one run


def metrics_text(port: int, ctx: ssl.SSLContext) -> str:
    try:
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", context=ctx, timeout=10) as r:
            return r.read().decode()
    except OSError as err:
        return f"# unavailable: {err!r}"


def metric(text: str, name: str, label: str = "") -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and (not label or label in line):
            head, _, value = line.rpartition(" ")
            if head.split("{")[0] == name:
                total += float(value)
    return total


def start_webhook(args, work: Path, paths: dict, keys: Path) -> tuple[subprocess.Popen, int]:
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "app",
        "--bind-address",
        "127.0.0.1",
        "--port",
        str(port),
        "--tls-cert-file",
        paths["tls.crt"],
        "--tls-key-file",
        paths["tls.key"],
        "--log-level",
        "error",
        "--originals-key-dir",
        str(keys),
        "--shutdown-delay",
        "0",
        "--size-at-admission=false",
        *args.webhook_flag,
    ]
    if args.server_core and shutil.which("taskset"):
        argv = ["taskset", "-c", args.server_core, *argv]
    logf = open(work / f"webhook-{port}.log", "wb")
    proc = subprocess.Popen(
        argv, stdout=logf, stderr=logf, cwd=args.app_dir, env=dict(os.environ, PYTHONPATH=str(args.app_dir))
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc, port
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"webhook exited: {(work / f'webhook-{port}.log').read_text()[-2000:]}") from None
            time.sleep(0.1)
    raise RuntimeError("webhook did not start")


def run_one(args, stalled: int, work: Path, paths: dict, keys: Path, ctx: ssl.SSLContext) -> dict:
    proc, port = start_webhook(args, work, paths, keys)
    mp = multiprocessing.get_context("spawn")
    stop, ready, attack_report, legit_report = mp.Event(), mp.Event(), mp.Queue(), mp.Queue()
    attacker = mp.Process(
        target=_attacker,
        args=(port, paths["ca.crt"], stalled, stop, ready, attack_report, args.attacker_core, args.kinds),
        daemon=True,
    )
    try:
        cpu0, t0 = cpu_seconds(proc.pid), time.monotonic()
        attacker.start()
        if not ready.wait(120):
            raise RuntimeError("attacker did not open its connections")
        legit = mp.Process(
            target=_legit, args=(port, paths["ca.crt"], args.seconds, legit_report, args.legit_core), daemon=True
        )
        peak = [0]

        def sample() -> None:
            while legit.is_alive():
                peak[0] = max(peak[0], rss_kib(proc.pid)[0])
                time.sleep(0.2)

        legit.start()
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        result = legit_report.get(timeout=args.seconds + 120)
        legit.join(30)
        text = metrics_text(port, ctx)  # while the attacker still holds its connections
        server_cpu, elapsed = cpu_seconds(proc.pid) - cpu0, time.monotonic() - t0
        stop.set()
        attack = attack_report.get(timeout=60)
        attacker.join(30)
    finally:
        stop.set()
        if attacker.is_alive():
            attacker.kill()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    kept, fresh = result["kept"], result["fresh"]
    return {
        "stalled": stalled,
        "legit_keepalive": {
            "n": len(kept),
            "p50_ms": pct(kept, 50),
            "p99_ms": pct(kept, 99),
            "max_ms": max(kept, default=float("nan")),
        },
        "legit_fresh": {
            "n": len(fresh),
            "p50_ms": pct(fresh, 50),
            "p99_ms": pct(fresh, 99),
            "max_ms": max(fresh, default=float("nan")),
        },
        "outcomes": result["outcomes"],
        "first_failures": result["first_failures"],
        "legit_cpu_s": result["cpu_s"],
        "attacker": attack,
        "server_cpu_s": server_cpu,
        "elapsed_s": elapsed,
        "server_rss_peak_mib": peak[0] / 1024,
        "open_connections": metric(text, "workload_resizer_webhook_connections"),
        "dropped_read_timeout": metric(
            text, "workload_resizer_webhook_connections_closed_total", 'reason="read_timeout"'
        ),
        "evicted": metric(text, "workload_resizer_webhook_connections_closed_total", 'reason="evicted"'),
        "refused": metric(text, "workload_resizer_webhook_connections_refused_total"),
        "overloaded": metric(text, "workload_resizer_webhook_requests_total", 'result="overloaded"'),
    }


def line(r: dict, seconds: float) -> str:
    k, f, o, a = r["legit_keepalive"], r["legit_fresh"], r["outcomes"], r["attacker"]
    return (
        f"{r['stalled']:>5} stalled | keep-alive p50 {k['p50_ms']:.2f} p99 {k['p99_ms']:.2f} max "
        f"{k['max_ms']:.1f} ms | fresh conn p50 {f['p50_ms']:.2f} p99 {f['p99_ms']:.2f} max {f['max_ms']:.1f} ms | "
        f"full {o.get('full', 0)} undecided {o.get('undecided', 0)} failed {o.get('failed', 0)} "
        f"other {sum(v for key, v in o.items() if key not in ('full', 'undecided', 'failed'))} | "
        f"open at the end {r['open_connections']:.0f}, dropped: read-timeout {r['dropped_read_timeout']:.0f} "
        f"evicted {r['evicted']:.0f} refused {r['refused']:.0f} (attacker opened {a['opened']}) | webhook cpu {r['server_cpu_s'] / r['elapsed_s']:.2f} "
        f"rss peak {r['server_rss_peak_mib']:.1f} MiB | attacker cpu {a['cpu_s'] / r['elapsed_s']:.2f} legit client cpu "
        f"{r['legit_cpu_s'] / seconds:.2f}"
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--stalled", default="33,100,500,2000", help="comma-separated counts of stalled connections")
    p.add_argument("--seconds", type=float, default=8, help="legit client's window per count")
    p.add_argument(
        "--stall",
        choices=("mix", *STALLS),
        default="mix",
        help="where each connection stalls: in the body, in the headers, silent after the handshake, "
        "or a third of each (mix)",
    )
    p.add_argument("--server-core", default="0", help="CPU the webhook is pinned to ('' = none)")
    p.add_argument("--legit-core", default="1", help="CPU of the legitimate client ('' = none)")
    p.add_argument("--attacker-core", default="1", help="CPU of the attacker ('' = none)")
    p.add_argument("--app-dir", type=Path, default=ROOT, help="checkout whose `python -m app` runs")
    p.add_argument(
        "--webhook-flag", action="append", default=[], metavar="FLAG", help="extra flag of `python -m app` (repeatable)"
    )
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    args.server_core = args.server_core or None
    args.kinds = tuple(STALLS) if args.stall == "mix" else (args.stall,)
    counts = [int(c) for c in args.stalled.split(",") if c]
    need = max(counts) * 2 + 256
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(need, hard), hard))
    work = Path(tempfile.mkdtemp(prefix="wr-slowloris-"))
    results = []
    try:
        ca = certs.generate_ca()
        paths = certs.write_pair(str(work), certs.issue_serving_cert(ca, ips=["127.0.0.1"]), ca)
        keys = work / "keys"
        keys.mkdir()
        (keys / "k0001").write_text(os.urandom(32).hex())
        ctx = ssl.create_default_context(cafile=paths["ca.crt"])
        for count in [0, *counts]:
            log(f"{count} stalled connections ...")
            results.append(run_one(args, count, work, paths, keys, ctx))
            print(line(results[-1], args.seconds), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(
        f"\nwebhook: {args.app_dir} {' '.join(args.webhook_flag)}; stall: {args.stall}; {args.seconds:g}s per count; "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    undecided = sum(r["outcomes"].get("undecided", 0) + r["outcomes"].get("failed", 0) for r in results)
    return 0 if undecided == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
