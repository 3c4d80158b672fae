"""Render the drills' JSON results (bench/out/drill-*.json) as the tables of docs/performance.md.

    python -m bench.drills.report                      # print the tables
    python -m bench.drills.report --update docs/performance.md
                                                       # replace the generated part of the doc

Every figure comes from a JSON file that `python -m bench.drills NAME --size SIZE` wrote;
the tables name that command and the time the run finished.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
BEGIN, END = "<!-- BEGIN GENERATED: python -m bench.drills.report -->", "<!-- END GENERATED -->"

# Per drill, the figures of the summary table: (label, path into the figures).
SUMMARY: dict[str, list[tuple[str, str]]] = {
    "hostile-input": [("tests", "tests"), ("examples/property", "hypothesis_examples_per_property")],
    "apiserver-restart": [
        ("pods", "pods"),
        ("outage s", "outage_s"),
        ("create→all aligned s", "create_to_last_aligned_s"),
        ("back→all aligned s", "back_to_last_aligned_s"),
        ("pod watch restarts", "pod_watch_restarts"),
        ("resize PATCHes / needed", "resize_patches|end_state.needed_resize"),
    ],
    "etcd-restart": [
        ("pods", "pods"),
        ("outage s", "outage_s"),
        ("create→all aligned s", "create_to_last_aligned_s"),
        ("back→all aligned s", "back_to_last_aligned_s"),
        ("resize PATCHes / needed", "resize_patches|end_state.needed_resize"),
    ],
    "apiserver-freeze": [
        ("pods", "pods"),
        ("frozen s", "frozen_s"),
        ("thaw→all aligned s", "thaw_to_last_aligned_s"),
        ("watch restarts while frozen", "pod_watch_restarts_while_frozen"),
        ("late pods bound after thaw", "late_pods_bound_after_thaw"),
        ("resize PATCHes / needed", "resize_patches|end_state.needed_resize"),
    ],
    "webhook-restart": [
        ("pods", "pods"),
        ("webhook kills", "webhook_kills"),
        ("down s", "webhook_down_s"),
        ("failed creations", "failed_pod_creations"),
        ("admitted unstamped", "eligible_pods_admitted_without_webhook"),
        ("resize PATCHes / needed", "resize_patches|end_state.needed_resize"),
    ],
    "crash-loop": [
        ("pods", "pods"),
        ("SIGKILLs", "kills"),
        ("left between writes", "pods_found_between_writes_after_kills"),
        ("create→all aligned s", "create_to_last_aligned_s"),
        ("effective resizes / needed", "end_state.effective_resizes|end_state.needed_resize"),
        ("apiserver answers", "resize_patches_answered_by_apiserver_by_code"),
    ],
    "webhook-bench": [
        ("python reviews/s", "python_reviews_per_s"),
        ("python p99 ms", "python_p99_ms"),
        ("go reviews/s", "go_reviews_per_s"),
        ("go p99 ms", "go_p99_ms"),
        ("python/go", "python_vs_go_throughput"),
        ("targets (>= 0.6x Go, p99 <= 5 ms)", "targets"),
    ],
    "burst": [
        ("pods", "replicas"),
        ("first bound→all aligned s", "first_bound_to_last_aligned_s"),
        ("resizes/s", "resizes_per_s"),
        ("writes/pod", "writes_per_pod"),
        ("peak RSS MiB", "reconciler_peak_rss_mb"),
        ("bare-resize ceiling s", "bare_resize_ceiling_s"),
    ],
    "scale": [
        ("pods / nodes", "pods|nodes"),
        ("create→all aligned s", "create_to_last_aligned_s"),
        ("scheduler bind s", "scheduler_first_to_last_bound_s"),
        ("aligned/s", "aligned_per_s"),
        ("requests/pod", "requests_per_pod_total"),
        ("peak RSS MiB", "reconciler_peak_rss_mb"),
        ("RSS KiB/pod (full/slim)", "reconciler_rss_per_cached_pod_kib|full_pod_deserialised_kib|slim_pod_kib"),
        ("CPU s during the burst", "cpu_s_during_burst"),
        ("fake-kubelet actuation after last aligned s", "end_state_settled_s"),
    ],
    "soak": [
        ("soak s", "soak_s"),
        ("churn", "churn_actions"),
        ("reconciler RSS MiB peak 1st→2nd half", "reconciler_rss_mb.first_half_max|reconciler_rss_mb.second_half_max"),
        ("reconciler fds peak", "reconciler_open_fds.first_half_max|reconciler_open_fds.second_half_max"),
        ("webhook RSS MiB peak", "webhook_rss_mb.first_half_max|webhook_rss_mb.second_half_max"),
        ("webhook fds peak", "webhook_open_fds.first_half_max|webhook_open_fds.second_half_max"),
    ],
}


def lookup(figures: dict[str, Any], path: str) -> Any:
    value: Any = figures
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def show(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:g}" if abs(value) >= 100 or value == int(value) else f"{value:.2f}"
    if isinstance(value, dict):
        return ", ".join(f"{k} {show(v)}" for k, v in value.items() if v not in (0, 0.0)) or "0"
    if isinstance(value, list):
        return "[" + ", ".join(show(v) for v in value) + "]"
    return str(value)


def figure(figures: dict[str, Any], spec: str) -> str:
    return " / ".join(show(lookup(figures, p)) for p in spec.split("|"))


def load(out_dir: Path) -> dict[tuple[str, str], dict[str, Any]]:
    results = {}
    for path in sorted(out_dir.glob("drill-*.json")):
        data = json.loads(path.read_text())
        results[(data["drill"], data["size"])] = data
    return results


def render(out_dir: Path) -> str:
    lines = tables(out_dir, "")
    # Variants (e.g. --scheduler-qps 50 --out bench/out/scheduler-qps-50) live in subdirectories.
    for sub in sorted(d for d in out_dir.iterdir() if d.is_dir() and any(d.glob("drill-*.json"))):
        lines += tables(sub, f" ({sub.name})")
    results = load(out_dir)
    machines = {
        json.dumps({k: v for k, v in d["machine"].items() if k != "load_average"}, sort_keys=True)
        for d in results.values()
    }
    for text in sorted(machines):
        m = json.loads(text)
        lines.append(f"Machine: {m['cores']} cores ({m['cpu_model']}), {m['memory_gib']} GiB, Python {m['python']}.")
    return "\n".join(lines).rstrip() + "\n"


def tables(out_dir: Path, title: str) -> list[str]:
    from bench.drills.__main__ import DRILLS

    results = load(out_dir)
    lines: list[str] = []
    for size in ("full", "ci"):
        rows = [(d, results[(d.name, size)]) for d in DRILLS if (d.name, size) in results]
        if not rows:
            continue
        lines += [
            f"### {size} size{title}",
            "",
            "| drill | result | wall s | figures | finished (UTC) | load avg (1/5/15 min) | command |",
            "|---|---|---|---|---|---|---|",
        ]
        for drill, data in rows:
            figures = data["figures"]
            text = "; ".join(f"{label}: {figure(figures, spec)}" for label, spec in SUMMARY.get(drill.name, []))
            failed = [c["name"] for c in data["checks"] if not c["ok"]]
            result = (
                "PASS"
                if data["passed"]
                else "FAIL"
                + (f" ({'; '.join(failed)})" if failed else "")
                + (f" ({data['error']})" if data.get("error") else "")
            )
            load_avg = "/".join(str(x) for x in data["machine"]["load_average"])
            lines.append(
                f"| {drill.name} | {result} | {data['seconds']:.0f} | {text} | {data['finished']} | "
                f"{load_avg} | `{data['command']}` |"
            )
        lines.append("")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.drills.report", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "out", help="where the JSON results are")
    parser.add_argument("--update", type=Path, help=f"replace the text between {BEGIN} and {END} in this file")
    args = parser.parse_args(argv)
    text = render(args.out)
    if not args.update:
        print(text)
        return 0
    doc = args.update.read_text()
    if BEGIN not in doc or END not in doc:
        print(f"{args.update} has no {BEGIN} ... {END} markers", file=sys.stderr)
        return 1
    head, rest = doc.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    args.update.write_text(f"{head}{BEGIN}\n{text}{END}{tail}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
