"""Drill 7: hostile input, as unit tests (tests/unit/test_fuzz_*.py), run here for the table.

Config parser and AdmissionReview handler under random/truncated/huge/unicode input,
TLS below 1.2 refused by the real webhook, and forged original-* annotations never
raising a pod above what its author wrote. ci runs fewer hypothesis examples.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bench.drills.harness import Context, Drill

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Params:
    examples: int  # hypothesis max_examples (WR_FUZZ_EXAMPLES)


def run(ctx: Context, p: Params) -> None:
    files = sorted(str(f.relative_to(REPO)) for f in (REPO / "tests" / "unit").glob("test_fuzz_*.py"))
    ctx.figure("files", files)
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *files],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1800,
        env={**os.environ, "WR_FUZZ_EXAMPLES": str(p.examples)},
    )
    ctx.figure("seconds", time.monotonic() - started)
    ctx.figure("hypothesis_examples_per_property", p.examples)
    summary = (proc.stdout.strip().splitlines() or [""])[-1]
    counts = {word: int(n) for n, word in re.findall(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed)", summary)}
    ctx.figure("tests", counts)
    ctx.check(
        "every hostile-input test passed",
        proc.returncode == 0 and counts.get("passed", 0) > 0,
        summary if proc.returncode == 0 else proc.stdout[-2500:],
    )


DRILL = Drill(
    "hostile-input",
    "fuzz/property tests: config parser, AdmissionReview handler, TLS >= 1.2, forged originals",
    {"full": Params(examples=1000), "ci": Params(examples=150)},
    run,
    needs_cluster=False,
)
