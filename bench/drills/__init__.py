"""Proof under faults, load and scale: drills against a real local control plane.

    python -m bench.drills [NAME ...] [--size full|ci]

Each drill runs against its own fresh hack/cluster control plane (its own
WR_CLUSTER_DIR, never <repo>/.cluster), ends with an exact end-state check, and
prints its figures and PASS/FAIL; the figures go to bench/out/ as JSON. See
docs/development.md for what each drill does, docs/performance.md for what it measured.
"""
