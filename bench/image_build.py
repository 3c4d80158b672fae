#!/usr/bin/env python3
"""Build time and size of the product image (hack/image: buildah on the local Debian base).

Cold: in a fresh build cache (WR_CACHE_DIR in a temporary directory, removed afterwards), so
the Debian base is debootstrapped and every pip download and layer is new; then warm: the
same build again on that cache (every step cached). Prints both times, the base's share of
the cold one, the image's size (uncompressed layers, and compressed as in an OCI archive, what
a registry stores and a node pulls) and the machine's load average.

    .venv/bin/python bench/image_build.py            # cold + warm (several minutes)
    .venv/bin/python bench/image_build.py --warm     # warm only, on the usual cache
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HACK_IMAGE = REPO / "hack" / "image"
TAG = "workload-resizer.local/workload-resizer:bench"


def timed(*args: str, env: dict[str, str]) -> float:
    started = time.monotonic()
    proc = subprocess.run([str(HACK_IMAGE), *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        sys.exit(f"hack/image {' '.join(args)} failed:\n{proc.stderr[-3000:]}")
    return time.monotonic() - started


def sizes(env: dict[str, str], work: Path) -> tuple[float, float]:
    inspect = subprocess.run(
        [str(HACK_IMAGE), "inspect", "--tag", TAG], env=env, capture_output=True, text=True, check=True
    )
    archive = work / "image.oci.tar"
    subprocess.run([str(HACK_IMAGE), "archive", str(archive), "--tag", TAG], env=env, capture_output=True, check=True)
    return json.loads(inspect.stdout)["size_bytes"] / 1e6, archive.stat().st_size / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--warm", action="store_true", help="only a warm build on the usual cache")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="wr-image-bench-"))
    try:
        env = dict(os.environ)
        if not args.warm:
            env["WR_CACHE_DIR"] = str(work / "cache")
            base = timed("base", env=env)
            image = timed("build", "--tag", TAG, env=env)
            print(f"cold build: {base + image:.0f}s (Debian base {base:.0f}s, then the Dockerfile {image:.0f}s)")
        warm = timed("build", "--tag", TAG, env=env)
        print(f"warm build (every step cached): {warm:.1f}s")
        uncompressed, compressed = sizes(env, work)
        print(f"image size: {uncompressed:.0f} MB uncompressed layers, {compressed:.0f} MB compressed (OCI archive)")
        print(f"load average (1, 5, 15 min): {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
