#!/usr/bin/env python3
"""The webhook under hostile input and shutdown: bounded memory, legitimate latency, drain.

    .venv/bin/python bench/webhook_hostile.py                   # 10,000 hostile reviews
    .venv/bin/python bench/webhook_hostile.py --hostile 2000    # quicker

Three phases against one ``python -m app`` (TLS, signing key, pinned to core 0 when
there are two):

1. **memory**: ``--hostile`` reviews of every size from 1 KiB up to the body limit
   (log-uniform), each unique (defeating every cache): thousands of containers, huge
   annotation values, thousands of forged controller keys, deep junk, truncated JSON,
   bodies over the limit. The webhook's RSS is sampled throughout; the result is its peak
   and final RSS against ``--rss-bound`` (128 MiB), and its review workers' (the processes
   deciding the costly reviews) against ``--worker-rss-bound`` (64 MiB each).
2. **latency**: a legitimate client (one keep-alive connection, a 2-container review, back
   to back; like the apiserver, on a CPU other than the webhook's, ``--legit-core``) alone,
   then while the hostile clients run (pinned to that other CPU at SCHED_IDLE, so that they
   never delay the legitimate client's own work), then alone again: p50/p99 of each.
3. **drain**: legitimate clients on 8 connections (plus one sending ~1 MiB reviews, decided
   by a review worker) that, like an endpoints controller, stop opening connections once
   ``/readyz`` fails; SIGTERM in the middle. Every request sent must succeed, the process
   must exit 0 and leave no review worker running.

The clients run in this process (threads, mostly in C: ssl and sockets); their CPU is
printed next to the server's so it is visible whether the load generator was the limit.
Only 127.0.0.1 is contacted; every process started is stopped.

``--reference`` adds a fourth phase, the same hostile set against what strict priority across
processes would give: the hostile reviews go to a second webhook on the same core at
``SCHED_IDLE`` (preempted at once whenever the first one has work) while the legitimate
client talks to a first webhook that sees no hostile traffic. What its legitimate p99 still
gains under the load is this machine's and the load generator's share (kernel, caches, the
shared CPU); the difference between phase 2 and this one is the webhook's own.

``--server go`` runs phases 1 and 2 against ``bench/gowebhook/server`` instead (Go
net/http, GOMAXPROCS=1, pinned the same way, same body limit): how much a server that
decides every review on its one core lets the hostile load raise the legitimate p99 on
this machine. It has no drain, review workers or bounds to check.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import math
import multiprocessing
import os
import random
import resource
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import certs  # noqa: E402
from devkit.ports import free_port  # noqa: E402

LEGIT = (ROOT / "bench" / "data" / "review-2c.json").read_bytes()
LIMIT = 4 * 1024 * 1024


def _large_legit() -> bytes:
    """The legitimate review padded to ~1 MiB with an annotation: decided by a review worker."""
    review = json.loads(LEGIT)
    container = review["request"]["object"]["spec"]["containers"][0]
    container.setdefault("env", []).append({"name": "PAD", "value": "p" * (1 << 20)})
    return json.dumps(review).encode()


LARGE_LEGIT = _large_legit()


def log(msg: str) -> None:
    print(f"[hostile] {msg}", file=sys.stderr, flush=True)


def rss_kib(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of pid in KiB."""
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                fields[key] = int(value.split()[0])
    return fields.get("VmRSS", 0), fields.get("VmHWM", 0)


def children(pid: int) -> list[int]:
    """The webhook's child processes (its review workers)."""
    found: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                found.extend(int(c) for c in f.read().split())
    except OSError:
        pass
    return found


def tree_rss_kib(pid: int, hwm: dict[int, int]) -> tuple[int, int]:
    """(webhook VmRSS, workers' VmRSS summed) in KiB; records each process's VmHWM in ``hwm``."""
    rss, hwm[pid] = rss_kib(pid)
    workers = 0
    for child in children(pid):
        try:
            child_rss, hwm[child] = rss_kib(child)
        except OSError:
            continue
        workers += child_rss
    return rss, workers


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children_cpu_seconds(pid: int) -> float:
    """CPU of pid's children: the running ones plus those it has reaped (cutime + cstime)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    reaped = (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")
    running = 0.0
    for child in children(pid):
        try:
            running += cpu_seconds(child)
        except OSError:
            pass
    return reaped + running


# ---------------------------------------------------------------- hostile bodies


def envelope(pod: dict, uid: str) -> dict:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "operation": "CREATE",
            "namespace": "hostile",
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "object": pod,
        },
    }


def base_pod(annotations: dict | None = None, containers: list | None = None, extra_spec: dict | None = None) -> dict:
    return {
        "metadata": {
            "generateName": "h-",
            "annotations": annotations or {},
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "h", "uid": "NONCE-owner", "controller": True}
            ],
        },
        "spec": {
            "containers": containers or [{"name": "app", "resources": {"requests": {"cpu": "1"}}}],
            **(extra_spec or {}),
        },
    }


def hostile_body(size: int, kind: int, nonce: str) -> bytes:
    """A review of about `size` bytes; `nonce` makes it unique (and its containers unique)."""
    uid = f"h-{nonce}"
    if kind == 0:  # containers: as many as fit, unique names and values
        per = 120
        n = max(1, size // per)
        cs = [
            {
                "name": f"c{nonce}-{i}",
                "resources": {"requests": {"cpu": f"{i + 1}m", "memory": f"{i + 7}Mi"}, "limits": {"cpu": f"{i + 2}m"}},
            }
            for i in range(n)
        ]
        body = envelope(base_pod(containers=cs), uid)
    elif kind == 1:  # one huge annotation value
        body = envelope(base_pod(annotations={"junk": "x" * max(0, size - 600), "n": nonce}), uid)
    elif kind == 2:  # forged controller-owned keys, thousands
        n = max(1, size // 80)
        ann = {f"workload-resizer.io/original-cpu.f{nonce}{i}": "16" for i in range(n)}
        body = envelope(base_pod(annotations=ann), uid)
    elif kind == 3:  # deep junk in the spec
        depth = min(max(1, size // 40), 200)
        junk: object = nonce
        for _ in range(depth):
            junk = {"a": [junk]}
        pad = "y" * max(0, size - depth * 12 - 600)
        body = envelope(base_pod(extra_spec={"junk": junk, "pad": pad}), uid)
    else:  # truncated / not JSON
        raw = json.dumps(envelope(base_pod(annotations={"p": "z" * max(0, size - 600)}), uid)).encode()
        return raw[: max(10, len(raw) - 7)]
    return json.dumps(body, separators=(",", ":")).encode()


def hostile_sizes(count: int, seed: int) -> list[int]:
    """Log-uniform from 1 KiB to just over the body limit (a few are 413s)."""
    rng = random.Random(seed)
    lo, hi = math.log(1024), math.log(LIMIT * 1.02)
    return [int(math.exp(rng.uniform(lo, hi))) for _ in range(count)]


# ---------------------------------------------------------------- clients


class Conn:
    def __init__(self, port: int, ctx: ssl.SSLContext) -> None:
        self.port, self.ctx = port, ctx
        self.c: http.client.HTTPSConnection | None = None

    def post(self, body: bytes, timeout: float = 30) -> tuple[int, bytes, bool]:
        if self.c is None:
            self.c = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.ctx, timeout=timeout)
        try:
            self.c.request("POST", "/mutate", body=body, headers={"Content-Type": "application/json"})
            resp = self.c.getresponse()
            data = resp.read()
            closed = (resp.getheader("connection") or "").lower() == "close"
        except Exception:
            self.close()
            raise
        if closed:
            self.close()
        return resp.status, data, closed

    def close(self) -> None:
        if self.c is not None:
            self.c.close()
            self.c = None


def legit_summary(latencies: list[float], errors: list, client_cpu_s: float) -> dict:
    return {
        "n": len(latencies),
        "p50_ms": pct(latencies, 50),
        "p99_ms": pct(latencies, 99),
        "errors": len(errors),
        "first_errors": errors[:3],
        "client_cpu_s": client_cpu_s,
    }


def legit_line(mem: dict) -> str:
    """The legitimate client's figures alone, under the hostile load, and alone again."""
    a, h, z = mem["legit_alone"], mem["legit_under_hostile"], mem["legit_alone_after"]
    return (
        f"legit 2-container review, 1 connection: alone p50 {a['p50_ms']:.2f} ms p99 {a['p99_ms']:.2f} ms "
        f"({a['n']} reqs, {a['errors']} errors); with hostile load p50 {h['p50_ms']:.2f} ms "
        f"p99 {h['p99_ms']:.2f} ms ({h['n']} reqs, {h['errors']} errors {h['first_errors']}); alone again "
        f"p50 {z['p50_ms']:.2f} ms p99 {z['p99_ms']:.2f} ms ({z['n']} reqs, {z['errors']} errors)"
    )


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def legit_loop(
    port: int, ctx: ssl.SSLContext, stop: threading.Event, latencies: list[float], errors: list[str]
) -> None:
    conn = Conn(port, ctx)
    while not stop.is_set():
        t0 = time.perf_counter()
        try:
            status, data, _ = conn.post(LEGIT)
            if status != 200 or b'"patch"' not in data:
                errors.append(f"HTTP {status}")
        except Exception as err:
            errors.append(repr(err))
            continue
        latencies.append((time.perf_counter() - t0) * 1000)
    conn.close()


def hostile_worker(
    port: int,
    ctx: ssl.SSLContext,
    jobs: list[tuple[int, int, str]],
    lock: threading.Lock,
    stats: dict,
    core: str | None = None,
) -> None:
    # Building multi-MiB bodies (json.dumps) is the load generator's heavy part: kept off the
    # webhook's core, and behind the legit client (SCHED_IDLE: it runs whenever the legit
    # client waits for an answer, and never delays the legit client's own work).
    tid = threading.get_native_id()
    with contextlib.suppress(OSError, AttributeError):
        if core:
            os.sched_setaffinity(tid, {int(c) for c in core.split(",")})
        os.setpriority(os.PRIO_PROCESS, tid, 19)
        os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
    conn = Conn(port, ctx)
    while True:
        with lock:
            if not jobs:
                break
            size, kind, nonce = jobs.pop()
        body = hostile_body(size, kind, nonce)
        try:
            status, _, _ = conn.post(body, timeout=60)
            with lock:
                stats[status] = stats.get(status, 0) + 1
                stats["bytes"] = stats.get("bytes", 0) + len(body)
        except Exception as err:
            with lock:
                stats["client-errors"] = stats.get("client-errors", 0) + 1
                stats.setdefault("first-error", repr(err))
    conn.close()


# ---------------------------------------------------------------- phases


def _launch(
    work: Path, name: str, argv: list[str], port: int, core: str | None, env: dict[str, str] | None = None
) -> tuple:
    """Start a server (pinned to `core`), its output to work/<name>-<port>.log; wait until it listens."""
    if core is not None and shutil.which("taskset"):
        argv = ["taskset", "-c", core, *argv]
    logf = open(work / f"{name}-{port}.log", "wb")
    proc = subprocess.Popen(argv, stdout=logf, stderr=logf, cwd=ROOT, env=env)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc, port
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{name} did not start")


def start_go_server(work: Path, crt: str, key: str, core: str | None) -> tuple:
    from bench.webhook_bench import build_go

    binary, _ = build_go(work / "go")
    port = free_port()
    argv = [
        str(binary),
        "-addr",
        f"127.0.0.1:{port}",
        "-cert",
        crt,
        "-key",
        key,
        "-log=false",
        f"-max-request-bytes={LIMIT}",
    ]
    return _launch(work, "go-server", argv, port, core, env=dict(os.environ, GOMAXPROCS="1"))


def start_server(
    work: Path, crt: str, key: str, keys: Path, core: str | None, delay: str = "0", flags: tuple[str, ...] = ()
) -> tuple:
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
        crt,
        "--tls-key-file",
        key,
        "--log-level",
        "warning",
        "--originals-key-dir",
        str(keys),
        "--shutdown-delay",
        delay,
        "--size-at-admission=false",
        *flags,
    ]
    return _launch(work, "server", argv, port, core)


class LegitClient:
    """The legitimate client in a process of its own: the hostile clients' body building
    (json.dumps of megabytes, holding this process's GIL) must not show up as webhook latency."""

    core: str | None = None  # set from --legit-core / --legit-nice in main()
    nice = 0

    def __init__(self, port: int, cafile: str) -> None:
        mp = multiprocessing.get_context("spawn")
        self.stop = mp.Event()
        self.results = mp.Queue()
        self.proc = mp.Process(
            target=_legit_process,
            args=(port, cafile, self.stop, self.results, LegitClient.core, LegitClient.nice),
            daemon=True,
        )

    def start(self) -> LegitClient:
        self.proc.start()
        return self

    def finish(self) -> tuple[list[float], list[str], float]:
        """(latencies ms, errors, client CPU seconds)."""
        self.stop.set()
        lat, errs, cpu = self.results.get(timeout=120)
        self.proc.join(30)
        return lat, errs, cpu


def _legit_process(port: int, cafile: str, stop, results, core: str | None = None, nice: int = 0) -> None:
    if core:
        os.sched_setaffinity(0, {int(c) for c in core.split(",")})
    if nice:
        os.setpriority(os.PRIO_PROCESS, 0, nice)
    ctx = ssl.create_default_context(cafile=cafile)
    flag = threading.Event()
    threading.Thread(target=lambda: (stop.wait(), flag.set()), daemon=True).start()
    lat: list[float] = []
    errs: list[str] = []
    legit_loop(port, ctx, flag, lat, errs)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    results.put(
        (lat, errs[:20] + ([f"... {len(errs) - 20} more"] if len(errs) > 20 else []), usage.ru_utime + usage.ru_stime)
    )


def run_legit(port: int, cafile: str, seconds: float) -> tuple[list[float], list[str], float]:
    client = LegitClient(port, cafile).start()
    time.sleep(seconds)
    return client.finish()


def phase_memory_and_latency(
    args, port: int, pid: int, ctx: ssl.SSLContext, cafile: str, hostile_port: int | None = None
) -> dict:
    """Phases 1 and 2; the hostile reviews go to ``hostile_port`` if given (the reference)."""
    log("legit alone")
    base_lat, base_err, base_cpu = run_legit(port, cafile, args.legit_seconds)
    sizes = hostile_sizes(args.hostile, args.seed)
    jobs = [(size, i % 5, f"{i:06d}{random.Random(i).randrange(1 << 30):x}") for i, size in enumerate(sizes)]
    lock, stats = threading.Lock(), {}
    samples: list[tuple[int, int]] = []  # (webhook, workers) VmRSS KiB
    hwm: dict[int, int] = {}  # VmHWM KiB by pid (workers replaced count separately)
    done = threading.Event()

    def sampler() -> None:
        while not done.is_set():
            samples.append(tree_rss_kib(pid, hwm))
            time.sleep(0.2)

    threading.Thread(target=sampler, daemon=True).start()
    log(f"{len(jobs)} hostile reviews on {args.hostile_connections} connections, legit client alongside")
    worker_pids = children(pid)
    cpu0, self0, t0 = cpu_seconds(pid), resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
    wcpu0 = children_cpu_seconds(pid)
    workers = [
        threading.Thread(target=hostile_worker, args=(hostile_port or port, ctx, jobs, lock, stats, args.hostile_core))
        for _ in range(args.hostile_connections)
    ]
    for w in workers:
        w.start()
    legit = LegitClient(port, cafile).start()
    for w in workers:
        w.join()
    lat, errs, legit_cpu = legit.finish()
    elapsed = time.monotonic() - t0
    cpu1, self1 = cpu_seconds(pid), resource.getrusage(resource.RUSAGE_SELF)
    workers_now = children(pid)
    wcpu1 = children_cpu_seconds(pid)
    time.sleep(1)
    done.set()
    final_rss, final_workers = tree_rss_kib(pid, hwm)
    worker_hwm = [hwm[w] for w in hwm if w != pid]
    log("legit alone again")  # the machine's speed drifts: a baseline on each side
    after_lat, after_err, after_cpu = run_legit(port, cafile, args.legit_seconds)
    return {
        "hostile": args.hostile,
        "hostile_bytes": stats.get("bytes", 0),
        "statuses": {k: v for k, v in stats.items() if isinstance(k, int)},
        "client_errors": stats.get("client-errors", 0),
        "first_client_error": stats.get("first-error"),
        "elapsed_s": elapsed,
        "server_cpu_s": cpu1 - cpu0,
        "worker_cpu_s": wcpu1 - wcpu0,
        "workers": len(workers_now),
        "workers_replaced": len(set(workers_now) - set(worker_pids)),
        "worker_rss_hwm_mib": max(worker_hwm, default=0) / 1024,
        "worker_rss_final_mib": final_workers / 1024,
        "total_rss_peak_mib": max((r + w for r, w in samples), default=0) / 1024,
        "client_cpu_s": (self1.ru_utime + self1.ru_stime) - (self0.ru_utime + self0.ru_stime),
        "rss_peak_mib": max(r for r, _ in samples) / 1024,
        "rss_hwm_mib": hwm[pid] / 1024,
        "rss_final_mib": final_rss / 1024,
        "legit_alone_after": legit_summary(after_lat, after_err, after_cpu),
        "legit_alone": legit_summary(base_lat, base_err, base_cpu),
        "legit_under_hostile": legit_summary(lat, errs, legit_cpu),
    }


def phase_drain(args, work: Path, crt: str, key: str, keys: Path, ctx: ssl.SSLContext) -> dict:
    proc, port = start_server(work, crt, key, keys, args.server_core, delay="2s", flags=tuple(args.webhook_flag))
    ready = threading.Event()
    ready.set()
    stop = threading.Event()
    sent, failed, lat = [0], [], []
    lock = threading.Lock()

    def readiness() -> None:
        """What the endpoints controller does: poll /readyz, drop the endpoint on failure."""
        while not stop.is_set():
            try:
                c = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=2)
                c.request("GET", "/readyz")
                ok = c.getresponse().status == 200
                c.close()
            except OSError:
                ok = False
            if not ok:
                ready.clear()
            time.sleep(0.1)

    def client(body: bytes = LEGIT) -> None:
        conn = Conn(port, ctx)
        while not stop.is_set():
            if conn.c is None and not ready.is_set():
                break  # no new connection to an endpoint that is not ready
            t0 = time.perf_counter()
            with lock:
                sent[0] += 1
            try:
                status, data, _ = conn.post(body)
                if status != 200 or b'"patch"' not in data:
                    failed.append(f"HTTP {status}" + (" (large)" if body is LARGE_LEGIT else ""))
                elif body is LARGE_LEGIT:
                    large_ok[0] += 1
            except Exception as err:
                failed.append(repr(err))
            lat.append((time.perf_counter() - t0) * 1000)
        conn.close()

    threading.Thread(target=readiness, daemon=True).start()
    large_ok = [0]
    # 8 connections of small reviews, one of ~1 MiB reviews (decided by a review worker).
    clients = [threading.Thread(target=client) for _ in range(8)]
    clients.append(threading.Thread(target=client, args=(LARGE_LEGIT,)))
    for c in clients:
        c.start()
    time.sleep(args.drain_seconds)
    workers = children(proc.pid)
    log("SIGTERM during the load run")
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(60)
    time.sleep(0.5)
    left = [w for w in workers if os.path.exists(f"/proc/{w}") and not _zombie(w)]
    stop.set()
    for c in clients:
        c.join()
    return {
        "sent": sent[0],
        "failed": len(failed),
        "first_failures": failed[:3],
        "exit_code": code,
        "p99_ms": pct(lat, 99),
        "large_ok": large_ok[0],
        "workers": len(workers),
        "workers_left": left,
    }


def phase_reference(args, work: Path, paths: dict, keys: Path, ctx: ssl.SSLContext) -> dict:
    """The latency phase with strict priority across processes: the hostile reviews to a sink
    webhook at SCHED_IDLE, the legitimate ones to another webhook, both on the server's core."""
    started: list[tuple[subprocess.Popen, int]] = []
    try:
        for _ in range(2):  # the legitimate client's webhook, then the hostile reviews' sink
            started.append(
                start_server(
                    work, paths["tls.crt"], paths["tls.key"], keys, args.server_core, flags=tuple(args.webhook_flag)
                )
            )
        (target, port), (sink, sink_port) = started
        for pid in (sink.pid, *children(sink.pid)):
            os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0))
        return phase_memory_and_latency(args, port, target.pid, ctx, paths["ca.crt"], hostile_port=sink_port)
    finally:
        for proc, _ in started:
            proc.send_signal(signal.SIGTERM)
        for proc, _ in started:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hostile", type=int, default=10_000, help="number of hostile reviews")
    p.add_argument("--hostile-connections", type=int, default=2)
    p.add_argument("--legit-seconds", type=float, default=10, help="legit-alone baseline window")
    p.add_argument("--drain-seconds", type=float, default=4, help="load before the SIGTERM")
    p.add_argument("--rss-bound", type=float, default=128, help="MiB")
    p.add_argument("--worker-rss-bound", type=float, default=64, help="MiB, per review worker")
    p.add_argument("--server-core", default="0", help="CPU the webhook is pinned to ('' = none)")
    p.add_argument(
        "--hostile-core", default="1", help="CPU the hostile clients' threads are pinned to ('' = none), at SCHED_IDLE"
    )
    p.add_argument(
        "--legit-core",
        default="1",
        help="CPU the legitimate client is pinned to ('' = none): like the apiserver, not on the "
        "webhook's CPU, ahead of the hostile clients",
    )
    p.add_argument("--legit-nice", type=int, default=0, help="niceness of the legitimate client's process")
    p.add_argument("--seed", type=int, default=13)
    p.add_argument(
        "--server",
        choices=("python", "go"),
        default="python",
        help="go: bench/gowebhook's net/http server, latency phases only",
    )
    p.add_argument(
        "--reference",
        action="store_true",
        help="also measure the legit p99 under the same load with strict priority across processes "
        "(hostile reviews to a second webhook at SCHED_IDLE)",
    )
    p.add_argument("--json", type=Path)
    p.add_argument(
        "--webhook-flag",
        action="append",
        default=[],
        metavar="FLAG",
        help="extra flag of `python -m app` (repeatable), e.g. --webhook-flag=--max-request-bytes=1MiB",
    )
    args = p.parse_args()
    LegitClient.core, LegitClient.nice = args.legit_core or None, args.legit_nice
    args.server_core = args.server_core or None
    work = Path(tempfile.mkdtemp(prefix="wr-hostile-"))
    try:
        ca = certs.generate_ca()
        paths = certs.write_pair(str(work), certs.issue_serving_cert(ca, ips=["127.0.0.1"]), ca)
        keys = work / "keys"
        keys.mkdir()
        (keys / "k0001").write_text(os.urandom(32).hex())
        ctx = ssl.create_default_context(cafile=paths["ca.crt"])
        if args.server == "go":
            return run_go_server(args, work, paths, ctx)
        proc, port = start_server(
            work, paths["tls.crt"], paths["tls.key"], keys, args.server_core, flags=tuple(args.webhook_flag)
        )
        try:
            mem = phase_memory_and_latency(args, port, proc.pid, ctx, paths["ca.crt"])
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
        drain = phase_drain(args, work, paths["tls.crt"], paths["tls.key"], keys, ctx)
        reference = phase_reference(args, work, paths, keys, ctx) if args.reference else None
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print()
    print(
        f"hostile reviews: {mem['hostile']} ({mem['hostile_bytes'] / 2**20:.0f} MiB, 1 KiB .. "
        f"{LIMIT * 1.02 / 2**20:.1f} MiB log-uniform, 5 shapes) in {mem['elapsed_s']:.1f}s; statuses "
        f"{mem['statuses']}, client errors {mem['client_errors']}"
    )
    print(
        f"CPU: webhook {mem['server_cpu_s']:.1f}s + review workers {mem['worker_cpu_s']:.1f}s, load generator: hostile clients {mem['client_cpu_s']:.1f}s, "
        f"legit client {mem['legit_under_hostile']['client_cpu_s']:.1f}s; "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    bound = "met" if mem["rss_hwm_mib"] <= args.rss_bound else "NOT met"
    worker_bound = "met" if mem["worker_rss_hwm_mib"] <= args.worker_rss_bound else "NOT met"
    print(
        f"webhook RSS: peak {mem['rss_hwm_mib']:.1f} MiB (VmHWM), after {mem['rss_final_mib']:.1f} MiB; "
        f"bound {args.rss_bound:.0f} MiB: {bound}"
    )
    print(
        f"review workers: {mem['workers']} ({mem['workers_replaced']} replaced); RSS peak {mem['worker_rss_hwm_mib']:.1f} "
        f"MiB (VmHWM, largest worker), after {mem['worker_rss_final_mib']:.1f} MiB; bound "
        f"{args.worker_rss_bound:.0f} MiB each: {worker_bound}; webhook + workers sampled peak "
        f"{mem['total_rss_peak_mib']:.1f} MiB"
    )
    print(legit_line(mem))
    print(
        f"SIGTERM during load (8 connections of small reviews + 1 of ~1 MiB ones, 2s drain delay): "
        f"{drain['sent']} requests sent ({drain['large_ok']} large ones patched), "
        f"{drain['failed']} failed {drain['first_failures']}, exit code {drain['exit_code']}, "
        f"p99 {drain['p99_ms']:.2f} ms; review workers left running after exit: "
        f"{len(drain['workers_left'])} of {drain['workers']}"
    )
    if reference is not None:
        print(
            "strict-priority reference (hostile reviews to a second webhook at SCHED_IDLE on the same core): "
            + legit_line(reference)
        )
        print(
            f"legit p99 with hostile load: this webhook {mem['legit_under_hostile']['p99_ms']:.2f} ms, "
            f"strict-priority reference {reference['legit_under_hostile']['p99_ms']:.2f} ms"
        )
    if args.json:
        args.json.write_text(json.dumps({"memory": mem, "drain": drain, "reference": reference}, indent=2))
    ok = (
        bound == "met"
        and worker_bound == "met"
        and drain["failed"] == 0
        and drain["exit_code"] == 0
        and not drain["workers_left"]
    )
    return 0 if ok else 1


def run_go_server(args, work: Path, paths: dict, ctx: ssl.SSLContext) -> int:
    proc, port = start_go_server(work, paths["tls.crt"], paths["tls.key"], args.server_core)
    try:
        mem = phase_memory_and_latency(args, port, proc.pid, ctx, paths["ca.crt"])
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    h = mem["legit_under_hostile"]
    print()
    print(
        f"go net/http server (GOMAXPROCS=1): {mem['hostile']} hostile reviews ({mem['hostile_bytes'] / 2**20:.0f} "
        f"MiB) in {mem['elapsed_s']:.1f}s; statuses {mem['statuses']}, client errors {mem['client_errors']}"
    )
    print(
        f"CPU: server {mem['server_cpu_s']:.1f}s, hostile clients {mem['client_cpu_s']:.1f}s, legit client "
        f"{h['client_cpu_s']:.1f}s; RSS peak {mem['rss_hwm_mib']:.1f} MiB"
    )
    print(legit_line(mem))
    if args.json:
        args.json.write_text(json.dumps({"memory": mem}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
