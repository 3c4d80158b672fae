#!/usr/bin/env python3
"""Benchmark the Python webhook against a minimal Go net/http webhook.

    .venv/bin/python bench/webhook_bench.py                      # 2 s warm-up + 10 s each
    .venv/bin/python bench/webhook_bench.py --duration 5 --json out.json

What it does:

1. builds ``bench/gowebhook`` (``server`` and ``loadgen``) with ``go build`` into
   a cache directory;
2. generates a CA and a serving certificate for 127.0.0.1 (``certs``);
3. starts ``python -m app`` pinned to one core (``taskset -c 0``, one uvicorn
   worker), checks its answer, and drives it with the load generator pinned
   to the other core (``taskset -c 1``): N keep-alive TLS connections posting
   ``bench/data/review-2c.json`` (a 2-container Deployment pod) for a fixed
   duration after a warm-up; stops it (SIGTERM). The load generator is ``wrk``
   (``--load wrk``, the default; C, one thread; installed with apt-get when
   missing and running as root) or the Go one from ``bench/gowebhook``
   (``--load go``);
4. the same for the Go server (``GOMAXPROCS=1``, same core);
5. prints a table: reviews/s, p50, p99, the server's CPU use during the
   window and reviews per CPU-second (useful when the machine is busy), the
   load generator's CPU use (below 1.0 of its core: it was not the bottleneck),
   and the ratio to Go. Both servers log one JSON line per decision (to a file)
   unless ``--no-log``.

Only 127.0.0.1 is ever contacted; every process started is stopped.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GO_DIR = ROOT / "bench" / "gowebhook"
DEFAULT_REVIEW = ROOT / "bench" / "data" / "review-2c.json"
sys.path.insert(0, str(ROOT))

import certs  # noqa: E402
from devkit.ports import free_port  # noqa: E402


def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def pinned(core: str | None, argv: list[str]) -> list[str]:
    if core is None or not shutil.which("taskset"):
        return argv
    return ["taskset", "-c", core, *argv]


def build_go(cache_dir: Path) -> tuple[Path, Path]:
    if not shutil.which("go"):
        sys.exit("go is not installed: needed for the Go baseline and the load generator")
    cache_dir.mkdir(parents=True, exist_ok=True)
    out = []
    for name in ("server", "loadgen"):
        target = cache_dir / name
        log(f"go build ./{name} -> {target}")
        subprocess.run(["go", "build", "-o", str(target), f"./{name}"], cwd=GO_DIR, check=True)
        out.append(target)
    return out[0], out[1]


def post(port: int, ca_file: Path, body: bytes, path: str = "/mutate") -> tuple[int, bytes]:
    ctx = ssl.create_default_context(cafile=str(ca_file))
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
            req = (
                f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            ).encode() + body
            s.sendall(req)
            data = b""
            while chunk := s.recv(65536):
                data += chunk
    head, _, payload = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    if b"transfer-encoding: chunked" in head.lower():  # Go may chunk; decode
        out, rest = b"", payload
        while rest:
            size_s, _, rest = rest.partition(b"\r\n")
            size = int(size_s, 16)
            if size == 0:
                break
            out, rest = out + rest[:size], rest[size + 2 :]
        payload = out
    return status, payload


def wait_ready(proc: subprocess.Popen, port: int, ca_file: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            post(port, ca_file, b"{}")
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("server did not become ready")


WRK_SCRIPT = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local f = assert(io.open(os.getenv("WRK_BODY"), "rb"))
wrk.body = f:read("*a")
f:close()
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '{"requests": %d, "duration_us": %d, "errors": %d, "non2xx": %d, "p50_us": %d, "p99_us": %d}\\n',
    summary.requests, summary.duration, e.connect + e.read + e.write + e.timeout, e.status,
    latency:percentile(50), latency:percentile(99)))
end
"""


def ensure_wrk() -> str | None:
    """wrk on PATH, installing the Debian package when missing (as root); None if that is not possible."""
    found = shutil.which("wrk")
    if found or os.geteuid() != 0 or not shutil.which("apt-get"):
        return found
    log("installing wrk (apt-get install wrk)")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    if subprocess.run(["apt-get", "install", "-y", "-qq", "wrk"], env=env, capture_output=True).returncode != 0:
        subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True)
        subprocess.run(["apt-get", "install", "-y", "-qq", "wrk"], env=env, capture_output=True)
    return shutil.which("wrk")


def run_wrk(wrk: str, port: int, server_pid: int, args, review: Path, script: Path) -> tuple[dict, float, float]:
    """Warm up, then one measured wrk run: (result, server CPU use, wrk CPU use), in cores, same window."""
    url = f"https://127.0.0.1:{port}/mutate"
    env = dict(os.environ, WRK_BODY=str(review))
    base = [wrk, "-t1", f"-c{args.connections}", "-s", str(script), "--timeout", "5s"]
    subprocess.run(
        pinned(args.client_core, [*base, f"-d{max(1, round(args.warmup))}s", url]),
        env=env,
        capture_output=True,
        check=True,
    )
    gen = subprocess.Popen(
        pinned(args.client_core, [*base, f"-d{max(1, round(args.duration))}s", url]),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    time.sleep(0.5)
    cpu0, scpu0, t0 = cpu_seconds(gen.pid), cpu_seconds(server_pid), time.monotonic()
    time.sleep(max(0.5, args.duration - 1.0))
    cpu1, scpu1, t1 = cpu_seconds(gen.pid), cpu_seconds(server_pid), time.monotonic()
    out, err = gen.communicate(timeout=args.duration + 60)
    if gen.returncode != 0:
        raise RuntimeError(f"wrk failed: {err.decode()}")
    summary = json.loads(out.decode().strip().splitlines()[-1])
    seconds = summary["duration_us"] / 1e6
    result = {
        "rps": summary["requests"] / seconds,
        "p50_ms": summary["p50_us"] / 1000,
        "p99_ms": summary["p99_us"] / 1000,
        "errors": summary["errors"] + summary["non2xx"],
        "requests": summary["requests"],
    }
    return result, (scpu1 - scpu0) / (t1 - t0), (cpu1 - cpu0) / (t1 - t0)


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def patch_set(payload: bytes) -> set[tuple]:
    resp = json.loads(payload)["response"]
    ops = json.loads(base64.b64decode(resp["patch"])) if "patch" in resp else []
    return {(op["op"], op["path"], json.dumps(op.get("value"), sort_keys=True)) for op in ops}


def run_one(
    name: str,
    argv: list[str],
    env: dict[str, str],
    port: int,
    args,
    loadgen: Path,
    ca_file: Path,
    review: Path,
    log_path: Path,
) -> dict:
    log(f"starting {name}: {' '.join(argv)}")
    with open(log_path, "wb") as logf:
        proc = subprocess.Popen(argv, env=env, stdout=logf, stderr=logf, cwd=ROOT)
    try:
        wait_ready(proc, port, ca_file)
        status, payload = post(port, ca_file, review.read_bytes())
        if status != 200:
            raise RuntimeError(f"{name} answered {status}: {payload[:200]!r}")
        ops = patch_set(payload)
        if args.wrk:
            log(f"load: wrk, {args.connections} connections, {args.warmup}s warm-up + {args.duration}s")
            wrk_script = log_path.parent / "wrk.lua"
            wrk_script.write_text(WRK_SCRIPT)
            result, server_cpu, gen_cpu = run_wrk(args.wrk, port, proc.pid, args, review, wrk_script)
            result.update(server=name, loadgen="wrk", loadgen_cpu_util=gen_cpu, cpu_util=server_cpu, patch=sorted(ops))
            result["reviews_per_cpu_s"] = result["rps"] / result["cpu_util"] if result["cpu_util"] > 0 else 0.0
            return result
        lg = pinned(
            args.client_core,
            [
                str(loadgen),
                "-url",
                f"https://127.0.0.1:{port}/mutate",
                "-cacert",
                str(ca_file),
                "-body",
                str(review),
                "-c",
                str(args.connections),
                "-warmup",
                f"{args.warmup}s",
                "-d",
                f"{args.duration}s",
            ],
        )
        log(f"load: {args.connections} connections, {args.warmup}s warm-up + {args.duration}s")
        gen = subprocess.Popen(lg, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        time.sleep(args.warmup)
        cpu0, t0, gcpu0 = cpu_seconds(proc.pid), time.monotonic(), cpu_seconds(gen.pid)
        time.sleep(args.duration)
        cpu1, t1, gcpu1 = cpu_seconds(proc.pid), time.monotonic(), cpu_seconds(gen.pid)
        out, err = gen.communicate(timeout=args.duration + args.warmup + 60)
        if gen.returncode != 0:
            raise RuntimeError(f"loadgen failed: {err.decode()}")
        result = json.loads(out)
        result["server"] = name
        result["loadgen"] = "go"
        result["loadgen_cpu_util"] = (gcpu1 - gcpu0) / (t1 - t0)
        result["cpu_util"] = (cpu1 - cpu0) / (t1 - t0)
        result["reviews_per_cpu_s"] = result["rps"] / result["cpu_util"] if result["cpu_util"] > 0 else 0.0
        result["patch"] = sorted(ops)
        return result
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


PY_NAME = "python (uvicorn, 1 worker)"
GO_NAME = "go (net/http, GOMAXPROCS=1)"


def median_result(runs: list[dict]) -> dict:
    """The run with the median throughput (its latencies go with it); all runs kept under 'runs'."""
    ordered = sorted(runs, key=lambda r: r["rps"])
    chosen = dict(ordered[(len(ordered) - 1) // 2])
    chosen["runs"] = [
        {k: r[k] for k in ("rps", "p50_ms", "p99_ms", "cpu_util", "reviews_per_cpu_s", "loadgen_cpu_util")}
        for r in runs
    ]
    return chosen


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--duration", type=float, default=10, help="measurement window per server, seconds")
    p.add_argument("--warmup", type=float, default=2, help="warm-up before measuring, seconds")
    p.add_argument("--connections", type=int, default=16, help="concurrent keep-alive TLS connections")
    p.add_argument("--server-core", default="0", help="CPU the servers are pinned to ('' = no pinning)")
    p.add_argument("--client-core", default="1", help="CPU the load generator is pinned to ('' = no pinning)")
    p.add_argument("--review", type=Path, default=DEFAULT_REVIEW, help="AdmissionReview to send")
    p.add_argument("--only", choices=("python", "go"), help="run one server only")
    p.add_argument(
        "--load",
        choices=("wrk", "go"),
        default="wrk",
        help="load generator: wrk (apt package, installed if missing) or bench/gowebhook/loadgen",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="measure each server this many times, alternating the order; the table shows the median run",
    )
    p.add_argument("--no-log", action="store_true", help="servers log warnings only (no per-decision line)")
    p.add_argument(
        "--cache-dir",
        type=Path,
        default=Path(tempfile.gettempdir()) / "workload-resizer-bench",
        help="where the Go binaries are built",
    )
    p.add_argument("--json", type=Path, help="also write the results here")
    p.add_argument("--keep", action="store_true", help="keep the work dir (certs, server logs)")
    args = p.parse_args()
    args.server_core = args.server_core or None
    args.client_core = args.client_core or None
    if (os.cpu_count() or 1) < 2:
        log("warning: fewer than 2 CPUs; server and load generator will share a core")

    server_bin, loadgen = build_go(args.cache_dir)
    args.wrk = ensure_wrk() if args.load == "wrk" else None
    if args.load == "wrk" and not args.wrk:
        log("wrk is not installed and cannot be (apt-get install wrk as root): using the Go load generator")
    work = Path(tempfile.mkdtemp(prefix="wr-bench-"))
    try:
        ca = certs.generate_ca()
        serving = certs.issue_serving_cert(ca, ips=["127.0.0.1"])
        paths = certs.write_pair(str(work), serving, ca)
        ca_file, crt, key = Path(paths["ca.crt"]), paths["tls.crt"], paths["tls.key"]

        def run_python() -> dict:
            port = free_port()
            argv = pinned(
                args.server_core,
                [
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
                    "warning" if args.no_log else "info",
                    "--size-at-admission=false",
                ],
            )
            return run_one(
                PY_NAME, argv, dict(os.environ), port, args, loadgen, ca_file, args.review, work / "python.log"
            )

        def run_go() -> dict:
            port = free_port()
            argv = pinned(
                args.server_core,
                [
                    str(server_bin),
                    "-addr",
                    f"127.0.0.1:{port}",
                    "-cert",
                    crt,
                    "-key",
                    key,
                    f"-log={'false' if args.no_log else 'true'}",
                ],
            )
            env = dict(os.environ, GOMAXPROCS="1")
            return run_one(GO_NAME, argv, env, port, args, loadgen, ca_file, args.review, work / "go.log")

        runners = [r for name, r in (("python", run_python), ("go", run_go)) if args.only in (None, name)]
        rounds: dict[str, list[dict]] = {}
        for i in range(args.rounds):
            # alternate the order, so a change in background load hits both alike
            for runner in runners if i % 2 == 0 else runners[::-1]:
                r = runner()
                rounds.setdefault(r["server"], []).append(r)
                log(f"round {i + 1}: {r['server']}: {r['rps']:.0f}/s p99 {r['p99_ms']:.2f} ms cpu {r['cpu_util']:.2f}")
        results = [median_result(rounds[name]) for name in (PY_NAME, GO_NAME) if name in rounds]
    finally:
        if args.keep:
            log(f"work dir kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)

    go = next((r for r in results if r["server"] == GO_NAME), None)
    print()
    print(
        f"review: {args.review.name} ({args.review.stat().st_size} B), {args.connections} connections, "
        f"{args.duration:g}s after {args.warmup:g}s warm-up, per-decision logging "
        f"{'off' if args.no_log else 'on'}, median of {args.rounds} round(s); load average now "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    print(
        f"load generator: {results[0]['loadgen'] if results else '-'} pinned to core {args.client_core}, "
        f"server pinned to core {args.server_core}; cpu = cores used during the window"
    )
    header = (
        f"{'server':<30} {'reviews/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'errors':>7} {'cpu':>6} "
        f"{'rev/cpu-s':>10} {'loadgen cpu':>12} {'vs Go':>7}"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        ratio = f"{r['rps'] / go['rps']:.2f}x" if go and go["rps"] else "-"
        print(
            f"{r['server']:<30} {r['rps']:>10.0f} {r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f} {r['errors']:>7} "
            f"{r['cpu_util']:>6.2f} {r['reviews_per_cpu_s']:>10.0f} {r['loadgen_cpu_util']:>12.2f} {ratio:>7}"
        )
    if len(results) == 2:
        same = results[0]["patch"] == results[1]["patch"]
        print(f"same patch from both servers: {'yes' if same else 'NO'}")
        py = results[0]
        if args.rounds > 1:
            for r in results:
                print(
                    f"  {r['server']}: runs "
                    + ", ".join(f"{x['rps']:.0f}/s p99 {x['p99_ms']:.1f} ms" for x in r["runs"])
                )
        print(
            f"targets: throughput >= 0.6x Go: {'met' if py['rps'] >= 0.6 * go['rps'] else 'NOT met'}; "
            f"python p99 <= 5 ms: {'met' if py['p99_ms'] <= 5 else 'NOT met'}"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=list))
    return 0


if __name__ == "__main__":
    sys.exit(main())
