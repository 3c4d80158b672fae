"""`calibrate`'s wall time and accuracy: 2 node types x N repeats on two real nodes.

A local cluster in its own state directory (<repo>/.cluster-bench-calibrate unless
--state-dir), two REAL nodes (hack/cluster add-node --real): "base" (type n2d) and "slow"
with a CFS quota of half a core on its own cgroup (--cpu-quota 50000/100000); both with
cgroup cpu.shares 262144, so the machine's other load competes as little as it can. The
config claims slow is as fast as n2d. `python -m commands calibrate -o json` runs once per
--repeats value; printed per run: wall time, the command's CPU time, the measured ratio and
its interval, the baseline's CPU share, and the scores' relative spread.

    sudo .venv/bin/python bench/calibrate_bench.py [--repeats 2,3,5,10] [--benchmark-duration 2s] [--keep-cluster]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from devkit.cluster import ClusterError, LocalCluster  # noqa: E402

NAMESPACE = "calibrate-bench"
LABEL = "bench.workload-resizer.io/family"
CONFIG = """\
baselineNodeType: n2d
nodeTypes:
  n2d:  { cpuPerf: 1.0, memPerf: 1.0 }
  slow: { cpuPerf: 1.0, memPerf: 1.0 }
bounds:
  cpu:    { min: "50m",  max: "16" }
  memory: { min: "64Mi", max: "32Gi" }
"""


def run(kubectl: list[str], *args: str, stdin: str | None = None) -> str:
    proc = subprocess.run([*kubectl, *args], input=stdin, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)}: {proc.stderr}")
    return proc.stdout


def calibrate(kubeconfig: str, repeats: int, duration: str) -> dict[str, object]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "commands",
            "calibrate",
            f"--kubeconfig={kubeconfig}",
            f"--config-namespace={NAMESPACE}",
            f"--namespace={NAMESPACE}",
            f"--node-type-label={LABEL}",
            "--toleration=workload-resizer.io/real-node",
            "--host-network",
            f"--repeats={repeats}",
            f"--benchmark-duration={duration}",
            "-o",
            "json",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"calibrate failed ({proc.returncode}): {proc.stderr}{proc.stdout}")
    result = json.loads(proc.stdout)
    types = {t["nodeType"]: t for t in result["nodeTypes"]}
    base, slow = types["n2d"], types["slow"]
    return {
        "types": 2,
        "repeats": repeats,
        "wall_s": round(wall, 1),
        "cpu_s": round((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), 2),
        "ratio": round(slow["ratio"]["value"], 4),
        "ci": f"{slow['ratio']['low']:.3f}..{slow['ratio']['high']:.3f}",
        "error_vs_imposed": f"{(slow['ratio']['value'] / 0.5 - 1):+.1%}",
        "baseline_cpu_share": base.get("cpuShare"),
        "spread_n2d": f"{base['stdev'] / base['mean']:.1%}",
        "spread_slow": f"{slow['stdev'] / slow['mean']:.1%}",
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", default="2,3,5,10", help="comma-separated --repeats values, one run each")
    parser.add_argument("--benchmark-duration", default="2s", help="calibrate's --benchmark-duration")
    parser.add_argument("--state-dir", default=str(REPO / ".cluster-bench-calibrate"))
    parser.add_argument("--keep-cluster", action="store_true")
    args = parser.parse_args()
    local = LocalCluster(Path(args.state_dir).resolve())
    started_here = not local.running()
    local.up()
    kubectl = [str(Path(local.bin_dir) / "kubectl"), f"--kubeconfig={local.kubeconfig}"]
    nodes = {"bench-base": ("n2d", []), "bench-slow": ("slow", ["--cpu-quota", "50000/100000"])}
    try:
        for name, (family, extra) in nodes.items():
            local.hack("add-node", name, "--real", "--cpu-shares", "262144", *extra, timeout=600)
            run(kubectl, "label", "node", name, f"{LABEL}={family}", "--overwrite")
        run(kubectl, "create", "namespace", NAMESPACE)
        with tempfile.NamedTemporaryFile("w", suffix=".yaml") as config:
            config.write(CONFIG)
            config.flush()
            run(
                kubectl,
                "-n",
                NAMESPACE,
                "create",
                "configmap",
                "workload-resizer-config",
                f"--from-file=config.yaml={config.name}",
            )
        for repeats in (int(r) for r in args.repeats.split(",")):
            print(json.dumps(calibrate(local.kubeconfig, repeats, args.benchmark_duration)), flush=True)
    finally:
        if args.keep_cluster:
            pass
        elif started_here:
            local.down()
        else:
            for name in nodes:
                with contextlib.suppress(ClusterError):  # one that was never added
                    local.hack("remove-node", name, timeout=120)
            subprocess.run([*kubectl, "delete", "namespace", NAMESPACE, "--wait=false"], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
