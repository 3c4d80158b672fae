"""A review worker with faults on demand, for tests: `python -m tests.unit.review_worker_faults`.

It is the real worker loop (``app.worker.serve``) around the real decision, except for
bodies carrying a marker: CRASH exits at once, HANG never answers, RAISE raises.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from app.review import Answer, handle_review
from app.worker import serve

CRASH, HANG, RAISE = b"FAULT-CRASH", b"FAULT-HANG", b"FAULT-RAISE"


def decide(body: bytes, keyring: Any, scope: Any) -> Answer:
    if CRASH in body:
        os._exit(3)
    if HANG in body:
        time.sleep(3600)
    if RAISE in body:
        raise RuntimeError("injected fault")
    return handle_review(body, keyring, scope)


COMMAND = [sys.executable, "-m", "tests.unit.review_worker_faults"]

if __name__ == "__main__":
    sys.exit(serve(decide))
