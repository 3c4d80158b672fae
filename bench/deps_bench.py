"""Steady-state cost of the libraries the product uses, against the hand-written code they
replaced (docs/dependencies.md quotes these figures).

Each part prints one JSON line per case. What a user of a long-running Deployment notices is
the cost per event (a ConfigMap change, a reconcile, an admission review, a scrape, a log
line), so that is what is timed (best of --repeat rounds of timeit, per call); import and
model-building time is printed too, as a one-off start-up figure.

    .venv/bin/python bench/deps_bench.py config            # per ConfigMap change, per pod
    .venv/bin/python bench/deps_bench.py metrics           # per reconcile/review, per scrape
    .venv/bin/python bench/deps_bench.py jsonlog           # per log line
    .venv/bin/python bench/deps_bench.py all

To compare with a tree from before a change, run the same script with that tree first on
the path: ``git archive <commit> | tar -x -C /tmp/before`` then
``PYTHONPATH=/tmp/before .venv/bin/python bench/deps_bench.py config``.
"""
from __future__ import annotations

import argparse
import json
import os
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


def import_cost(statement: str) -> dict[str, float]:
    """CPU seconds and peak RSS of a fresh interpreter that runs ``statement``, minus a bare
    interpreter's (best of 5 each)."""
    def cost(code: str) -> tuple[float, float]:
        script = (f"import resource\n{code}\nr = resource.getrusage(resource.RUSAGE_SELF)\n"
                  "print(r.ru_utime + r.ru_stime, r.ru_maxrss)")
        runs = [subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                               env={**os.environ, "PYTHONPATH": SUBPROCESS_PATH}, cwd=REPO).stdout.split()
                for _ in range(5)]
        return min(float(cpu) for cpu, _ in runs), min(int(rss) for _, rss in runs) / 1024
    (cpu, rss), (bare_cpu, bare_rss) = cost(statement), cost("pass")
    return {"cpu_s": round(cpu - bare_cpu, 3), "rss_mib": round(rss - bare_rss, 1)}


# ---- config: per ConfigMap change (load_config), per pod (resolve_policy) --------------------

def big_config() -> str:
    """A large but plausible config: 40 node types, 20 overrides, 20 label rules, 10 compute classes."""
    from resizer import SAMPLE_CONFIG
    lines = [SAMPLE_CONFIG.replace("nodeTypes:\n", "nodeTypes:\n" + "".join(
        f"  t{i}: {{ cpuPerf: {1 + i / 100}, memPerf: 1.0 }}\n" for i in range(37)))]
    lines.append("overrides:\n" + "".join(
        f"  - name: o{i}\n    match: {{ computeClass: c{i}, podLabel: {{ team: t{i} }} }}\n"
        f"    bounds: {{ cpu: {{ min: {10 + i}m }} }}\n" for i in range(20)))
    lines.append("podLabels:\n  team:\n" + "".join(
        f"    t{i}: {{ nodeTypes: {{ n4: {{ cpuPerf: 1.{i + 10}, memPerf: 1 }} }} }}\n" for i in range(20)))
    lines.append("computeClasses:\n" + "".join(
        f"  c{i}: {{ bounds: {{ memory: {{ max: {i + 1}Gi }} }} }}\n" for i in range(10)))
    return "".join(lines)


def bench_config(repeat: int) -> None:
    from resizer import SAMPLE_CONFIG, ConfigError, load_config, resolve_policy
    import resizer.config as module
    uses_pydantic = "pydantic" in sys.modules
    big = big_config()
    broken = big.replace("cpuPerf: 1.0,", "cpuPerf: -1,").replace("name: o3", "name: o2") + "surprise: 1\n"

    def load_broken() -> None:
        try:
            load_config(broken)
        except ConfigError:
            return
        raise AssertionError("the broken config loaded")

    from resizer import ResizerConfig, compile_config
    import yaml
    parsed = yaml.safe_load(big)
    for case, call in (("load sample config", lambda: load_config(SAMPLE_CONFIG)),
                       ("validate+compile the big config, YAML already parsed",
                        lambda: compile_config(ResizerConfig.from_document(parsed))),
                       ("load big config (40 types, 20 overrides, 20 label rules)", lambda: load_config(big)),
                       ("reject big config with 3 errors", load_broken)):
        emit("config", case, us_per_call=round(per_call_us(call, repeat), 1), pydantic=uses_pydantic)
    config = load_config(big)
    pod = {"metadata": {"labels": {"team": "t19", "app": "web"}, "annotations": {"a": "b"}},
           "spec": {"nodeSelector": {"cloud.google.com/compute-class": "c9"}}}
    emit("config", "resolve_policy per pod (big config, falls through 20 overrides to a label rule)",
         us_per_call=round(per_call_us(lambda: resolve_policy(config, pod), repeat), 2), pydantic=uses_pydantic)
    emit("config", "import resizer.config (fresh process, one-off)", **import_cost("import resizer.config"),
         module=module.__file__)


# ---- main -------------------------------------------------------------------------------------

PARTS: dict[str, Callable[[int], None]] = {"config": bench_config}


def main() -> int:
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
