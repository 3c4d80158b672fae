"""`python -m commands plan|report|restore|calibrate|selftest` (installed: `workload-resizer ...`)."""

from __future__ import annotations

import sys

from commands import main

if __name__ == "__main__":
    sys.exit(main())
