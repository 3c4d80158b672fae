"""Steady-state cost of the libraries the product uses, against the hand-written code they
replaced (docs/dependencies.md quotes these figures).

Each part prints one JSON line per case. What a user of a long-running Deployment notices is
the cost per event (a ConfigMap change, a reconcile, an admission review, a scrape, a log
line), so that is what is timed (best of --repeat rounds of timeit, per call); import and
model-building time is printed too, as a one-off start-up figure.

    .venv/bin/python bench/deps_bench.py config            # per ConfigMap change, per pod
    .venv/bin/python bench/deps_bench.py metrics           # per reconcile/review, per scrape
    .venv/bin/python bench/deps_bench.py jsonlog           # per log line
    .venv/bin/python bench/deps_bench.py http              # the reconciler's probe server: idle, per probe/scrape
    .venv/bin/python bench/deps_bench.py all

To compare with a tree from before a change, run the same script with that tree first on
the path: ``git archive <commit> | tar -x -C /tmp/before`` then
``PYTHONPATH=/tmp/before .venv/bin/python bench/deps_bench.py config``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
# Appended: a tree given on PYTHONPATH (the "before" of a comparison) wins over this checkout.
sys.path.append(str(REPO))
SUBPROCESS_PATH = os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(REPO)]))


def per_call_us(call: Callable[[], object], repeat: int, number: int | None = None) -> float:
    """Best-of-``repeat`` microseconds per call (timeit picks ``number`` if not given)."""
    timer = timeit.Timer(call)
    if number is None:
        number, _ = timer.autorange()
    return min(timer.repeat(repeat=repeat, number=number)) / number * 1e6


def emit(part: str, case: str, **figures: Any) -> None:
    print(json.dumps({"part": part, "case": case, **figures}), flush=True)


def import_cost(statement: str, baseline: str = "pass") -> dict[str, float]:
    """CPU seconds and peak RSS of a fresh interpreter that runs ``statement``, minus one that
    runs ``baseline`` (best of 5 each)."""

    def cost(code: str) -> tuple[float, float]:
        # VmHWM, not ru_maxrss: the latter keeps the forking parent's peak across exec.
        script = (
            f"import resource\n{code}\nr = resource.getrusage(resource.RUSAGE_SELF)\n"
            "hwm = next(l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM'))\n"
            "print(r.ru_utime + r.ru_stime, hwm)"
        )
        runs = [
            subprocess.run(
                [sys.executable, "-c", script],
                capture_output=True,
                text=True,
                check=True,
                env={**os.environ, "PYTHONPATH": SUBPROCESS_PATH},
                cwd=REPO,
            ).stdout.split()
            for _ in range(5)
        ]
        return min(float(cpu) for cpu, _ in runs), min(int(rss) for _, rss in runs) / 1024

    (cpu, rss), (bare_cpu, bare_rss) = cost(f"{baseline}\n{statement}"), cost(baseline)
    return {"cpu_s": round(cpu - bare_cpu, 3), "rss_mib": round(rss - bare_rss, 1)}


# ---- config: per ConfigMap change (load_config), per pod (resolve_policy) --------------------


def big_config() -> str:
    """A large but plausible config: 40 node types, 20 overrides, 20 label rules, 10 compute classes."""
    from resizer import SAMPLE_CONFIG

    lines = [
        SAMPLE_CONFIG.replace(
            "nodeTypes:\n",
            "nodeTypes:\n" + "".join(f"  t{i}: {{ cpuPerf: {1 + i / 100}, memPerf: 1.0 }}\n" for i in range(37)),
        )
    ]
    lines.append(
        "overrides:\n"
        + "".join(
            f"  - name: o{i}\n    match: {{ computeClass: c{i}, podLabel: {{ team: t{i} }} }}\n"
            f"    bounds: {{ cpu: {{ min: {10 + i}m }} }}\n"
            for i in range(20)
        )
    )
    lines.append(
        "podLabels:\n  team:\n"
        + "".join(f"    t{i}: {{ nodeTypes: {{ n4: {{ cpuPerf: 1.{i + 10}, memPerf: 1 }} }} }}\n" for i in range(20))
    )
    lines.append(
        "computeClasses:\n" + "".join(f"  c{i}: {{ bounds: {{ memory: {{ max: {i + 1}Gi }} }} }}\n" for i in range(10))
    )
    return "".join(lines)


def bench_config(repeat: int) -> None:
    import resizer.config as module
    from resizer import SAMPLE_CONFIG, ConfigError, load_config, resolve_policy

    uses_pydantic = "pydantic" in sys.modules
    big = big_config()
    broken = big.replace("cpuPerf: 1.0,", "cpuPerf: -1,").replace("name: o3", "name: o2") + "surprise: 1\n"

    def load_broken() -> None:
        try:
            load_config(broken)
        except ConfigError:
            return
        raise AssertionError("the broken config loaded")

    import yaml

    from resizer import ResizerConfig, compile_config

    parsed = yaml.safe_load(big)
    for case, call in (
        ("load sample config", lambda: load_config(SAMPLE_CONFIG)),
        (
            "validate+compile the big config, YAML already parsed",
            lambda: compile_config(ResizerConfig.from_document(parsed)),
        ),
        ("load big config (40 types, 20 overrides, 20 label rules)", lambda: load_config(big)),
        ("reject big config with 3 errors", load_broken),
    ):
        emit("config", case, us_per_call=round(per_call_us(call, repeat), 1), pydantic=uses_pydantic)
    config = load_config(big)
    pod = {
        "metadata": {"labels": {"team": "t19", "app": "web"}, "annotations": {"a": "b"}},
        "spec": {"nodeSelector": {"cloud.google.com/compute-class": "c9"}},
    }
    emit(
        "config",
        "resolve_policy per pod (big config, falls through 20 overrides to a label rule)",
        us_per_call=round(per_call_us(lambda: resolve_policy(config, pod), repeat), 2),
        pydantic=uses_pydantic,
    )
    emit(
        "config",
        "import resizer.config (fresh process, one-off)",
        **import_cost("import resizer.config"),
        module=module.__file__,
    )


# ---- metrics: per review / per reconcile, per scrape --------------------------------------------

HANDWRITTEN_COMMIT = "efd8d7a"  # the last commit with the hand-written ops/jsonlog.py


def handwritten(path: str, name: str) -> Any:
    """The hand-written module at ``path`` as of HANDWRITTEN_COMMIT, loaded under ``name``."""
    import importlib.util

    source = subprocess.run(
        ["git", "show", f"{HANDWRITTEN_COMMIT}:{path}"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(name, loader=None))
    sys.modules[name] = module
    exec(compile(source, f"{HANDWRITTEN_COMMIT}:{path}", "exec"), module.__dict__)
    return module


WEBHOOK_LIBRARIES = (
    "import fastapi, uvicorn, uvloop, httptools, orjson, yaml, pydantic, cryptography.x509, asyncio, ssl"
)
RECONCILER_LIBRARIES = "import uvloop, httptools, orjson, yaml, asyncio, ssl, logging, resizer.config"
OUTCOME_REASONS = [f"Reason{i}" for i in range(16)]


def fill_reconciler_like(kind: Any, registry: Any) -> dict[str, Any]:
    """The reconciler's families with realistic series counts (~40 families, ~300 series with buckets);
    returns the metrics a reconcile updates."""
    counter, gauge, histogram = kind.Counter, kind.Gauge, kind.Histogram
    outcomes = counter("workload_resizer_outcomes_total", "Outcomes.", ["reason"], registry=registry)
    requests = counter("rest_client_requests_total", "Requests.", ["method", "resource", "code"], registry=registry)
    depth = gauge("workqueue_depth", "Depth.", ["name"], registry=registry)
    work = histogram(
        "workqueue_work_duration_seconds",
        "Work.",
        ["name"],
        buckets=(0.001, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 60),
        registry=registry,
    )
    latency = histogram(
        "rest_client_request_duration_seconds",
        "Latency.",
        ["verb"],
        buckets=(0.005, 0.025, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15),
        registry=registry,
    )
    for reason in OUTCOME_REASONS:
        outcomes.labels(reason).inc()
    for method in ("GET", "LIST", "WATCH", "PATCH", "POST", "PUT"):
        for resource in ("pods", "nodes", "configmaps", "leases", "events"):
            for code in ("200", "201", "409"):
                requests.labels(method, resource, code).inc()
        latency.labels(method).observe(0.01)
    for name in ("pods", "nodes", "configmaps"):
        depth.labels(name).set(3)
        work.labels(name).observe(0.02)
    for i in range(30):
        gauge(f"workload_resizer_extra_{i}", "Filler gauge.", registry=registry).set(i)
    return {"outcomes": outcomes, "requests": requests, "depth": depth, "work": work, "latency": latency}


def bench_metrics(repeat: int) -> None:
    import prometheus_client

    prometheus_client.disable_created_metrics()
    import ops.prometheus as ours

    def library_page(registry: Any) -> Callable[[], bytes]:
        for collector in (
            prometheus_client.ProcessCollector,
            prometheus_client.PlatformCollector,
            prometheus_client.GCCollector,
        ):
            collector(registry=registry)
        return lambda: prometheus_client.generate_latest(registry)

    def handwritten_page(registry: Any) -> Callable[[], bytes]:
        return lambda: ours.exposition(registry)

    bench_metrics_of("hand-written", ours, ours.new_registry(), handwritten_page, repeat)
    bench_metrics_of(
        "prometheus_client", prometheus_client, prometheus_client.CollectorRegistry(), library_page, repeat
    )
    for impl, module in (("hand-written", "ops.prometheus"), ("prometheus_client", "prometheus_client")):
        statement = f"import {module}"
        emit("metrics", "import (fresh process, one-off)", impl=impl, **import_cost(statement))
        emit(
            "metrics",
            "import into a process that already runs FastAPI/uvicorn/pydantic (the webhook's)",
            impl=impl,
            **import_cost(statement, WEBHOOK_LIBRARIES),
        )
        emit(
            "metrics",
            "import into a process that already runs the reconciler's libraries",
            impl=impl,
            **import_cost(statement, RECONCILER_LIBRARIES),
        )


def bench_metrics_of(
    label: str, kind: Any, registry: Any, page: Callable[[Any], Callable[[], bytes]], repeat: int
) -> None:
    duration_buckets = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
    requests = kind.Counter("workload_resizer_webhook_requests_total", "Requests.", ["result"], registry=registry)
    duration = kind.Histogram(
        "workload_resizer_webhook_request_duration_seconds", "Duration.", buckets=duration_buckets, registry=registry
    )
    patched, observe = requests.labels("patched"), duration.observe

    def review() -> None:  # what the webhook does per admission review (children resolved once)
        patched.inc()
        observe(0.00042)

    emit(
        "metrics",
        "per admission review (1 inc, 1 observe)",
        impl=label,
        us_per_call=round(per_call_us(review, repeat), 3),
    )
    rec = fill_reconciler_like(kind, registry)

    def reconcile() -> None:  # a reconcile's updates, label lookups included
        rec["outcomes"].labels("Reason3").inc()
        rec["requests"].labels("PATCH", "pods", "200").inc()
        rec["latency"].labels("PATCH").observe(0.012)
        rec["depth"].labels("pods").dec()
        rec["work"].labels("pods").observe(0.004)

    emit(
        "metrics",
        "per reconcile (5 updates with .labels())",
        impl=label,
        us_per_call=round(per_call_us(reconcile, repeat), 3),
    )
    scrape = page(registry)
    text = scrape()
    emit(
        "metrics",
        "per scrape of /metrics (reconciler-like page + process/python series)",
        impl=label,
        us_per_call=round(per_call_us(scrape, repeat), 1),
        lines=text.count(b"\n"),
        bytes=len(text),
    )


# ---- jsonlog: per log line ------------------------------------------------------------------------


def bench_jsonlog(repeat: int) -> None:
    import io
    import logging

    from pythonjsonlogger.orjson import OrjsonFormatter

    ours = handwritten("ops/jsonlog.py", "handwritten_jsonlog")
    fields = {
        "uid": "6f1c2d9e-1111-2222-3333-444455556666",
        "namespace": "default",
        "pod": "web-5d8f7-abcde",
        "decision": "patched",
        "rule": "global",
        "node_type": None,
        "duration_ms": 0.412,
        "patch_ops": 3,
    }
    record = logging.LogRecord("app.review", logging.INFO, "", 0, "admission decision", None, None)
    record.__dict__.update(fields)
    record.message = record.getMessage()
    from ops.jsonlog import JSONFormatter

    formatters = {
        "hand-written ops.jsonlog": ours.JSONFormatter(),
        "ops.jsonlog on python-json-logger (same line)": JSONFormatter(),
        "python-json-logger as published (message, extras)": OrjsonFormatter(),
    }
    for label, formatter in formatters.items():
        line = formatter.format(record)
        emit(
            "jsonlog",
            "format one admission-decision line (8 fields)",
            impl=label,
            us_per_call=round(per_call_us(lambda formatter=formatter: formatter.format(record), repeat), 2),
            line=line,
        )
    logger = logging.getLogger("bench.jsonlog")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    for label, formatter in formatters.items():
        handler = logging.StreamHandler(io.StringIO())
        handler.setFormatter(formatter)
        logger.handlers[:] = [handler]
        emit(
            "jsonlog",
            "log one line through the logger (log_fields, StreamHandler to memory)",
            impl=label,
            us_per_call=round(
                per_call_us(lambda: ours.log_fields(logger, logging.INFO, "admission decision", fields), repeat), 2
            ),
        )
        handler.stream = io.StringIO()
    emit(
        "jsonlog",
        "import (fresh process, one-off)",
        impl="python-json-logger",
        **import_cost("import pythonjsonlogger.orjson", "import orjson, logging"),
    )


# ---- http: the reconciler's probes/metrics server, idle and per request ---------------------------

SERVERS = (
    "hand-written (reconciler.http on httptools)",
    "uvicorn + starlette (ops.probes routes), Server.serve()",
    "uvicorn + starlette, startup()/shutdown() without uvicorn's 10 Hz main loop, no Date header",
)


def serve(kind: int, port_file: str) -> None:
    """The child process of bench_http: one probes/metrics server on the reconciler's loop."""
    import asyncio

    import prometheus_client
    import uvloop

    from ops.prometheus import REGISTRY

    fill_reconciler_like(prometheus_client, REGISTRY)
    checks = {
        "config": lambda: (True, "loaded"),
        "caches": lambda: (True, "synced"),
        "leader": lambda: (True, "elected"),
    }
    sock = __import__("socket").create_server(("127.0.0.1", 0))
    Path(port_file).write_text(str(sock.getsockname()[1]))

    async def main() -> None:
        if kind == 0:
            from reconciler.http import ProbeApp, ProbeServer

            await ProbeServer(ProbeApp(checks), "127.0.0.1:0").serve([sock])
        else:
            import uvicorn
            from starlette.applications import Starlette

            from ops.probes import probe_routes

            config = uvicorn.Config(
                Starlette(routes=probe_routes(checks)),
                loop="none",
                http="httptools",
                lifespan="off",
                access_log=False,
                log_level="warning",
                date_header=kind == 1,
            )
            server = uvicorn.Server(config)
            if kind == 1:
                await server.serve([sock])
                return
            config.load()
            server.lifespan = config.lifespan_class(config)
            await server.startup([sock])
            await asyncio.Event().wait()

    uvloop.run(main())


def child_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def child_rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS"))) / 1024


def http_get(port: int, path: str, sock: Any = None) -> bytes:
    """One GET; a new connection (as the kubelet probes) unless ``sock`` is given (as Prometheus scrapes)."""
    import socket

    own = sock is None
    conn = socket.create_connection(("127.0.0.1", port)) if own else sock
    conn.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n{'Connection: close' if own else ''}\r\n\r\n".encode())
    data = b""
    while b"\r\n\r\n" not in data:
        data += conn.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))  # type: ignore[union-attr]
    while len(body) < length:
        body += conn.recv(65536)
    if own:
        conn.close()
    return head.split(b" ", 2)[1]


def bench_http(repeat: int, idle_s: float = 30.0, probes: int = 500, scrapes: int = 100) -> None:
    import socket
    import tempfile
    import time

    for kind, label in enumerate(SERVERS):
        with tempfile.TemporaryDirectory() as tmp:
            port_file = f"{tmp}/port"
            child = subprocess.Popen(
                [sys.executable, __file__, "--serve", str(kind), port_file],
                cwd=REPO,
                env={**os.environ, "PYTHONPATH": SUBPROCESS_PATH},
            )
            try:
                deadline = time.monotonic() + 30
                while not Path(port_file).exists() or not Path(port_file).read_text():
                    assert time.monotonic() < deadline and child.poll() is None, "server did not start"
                    time.sleep(0.05)
                port = int(Path(port_file).read_text())
                while True:
                    try:
                        assert http_get(port, "/readyz") == b"200"
                        break
                    except ConnectionRefusedError:
                        time.sleep(0.05)
                started_cpu = child_cpu_s(child.pid)
                time.sleep(idle_s)
                idle = child_cpu_s(child.pid) - started_cpu
                before = child_cpu_s(child.pid)
                for _ in range(probes):
                    assert http_get(port, "/readyz") == b"200"
                per_probe = (child_cpu_s(child.pid) - before) / probes
                scraper = socket.create_connection(("127.0.0.1", port))
                before = child_cpu_s(child.pid)
                for _ in range(scrapes):
                    assert http_get(port, "/metrics", scraper) == b"200"
                per_scrape = (child_cpu_s(child.pid) - before) / scrapes
                scraper.close()
                emit(
                    "http",
                    "reconciler probes/metrics server",
                    impl=label,
                    idle_cpu_ms_per_s=round(idle / idle_s * 1000, 3),
                    cpu_us_per_probe_new_connection=round(per_probe * 1e6),
                    cpu_us_per_scrape=round(per_scrape * 1e6),
                    rss_mib=round(child_rss_mib(child.pid), 1),
                )
            finally:
                child.terminate()
                child.wait(10)


# ---- main -------------------------------------------------------------------------------------

PARTS: dict[str, Callable[[int], None]] = {
    "config": bench_config,
    "metrics": bench_metrics,
    "jsonlog": bench_jsonlog,
    "http": bench_http,
}


def main() -> int:
    if sys.argv[1:2] == ["--serve"]:
        serve(int(sys.argv[2]), sys.argv[3])
        return 0
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("part", choices=[*PARTS, "all"])
    parser.add_argument("--repeat", type=int, default=7, help="timeit rounds; the best is printed")
    args = parser.parse_args()
    for name, bench in PARTS.items():
        if args.part in (name, "all"):
            bench(args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
