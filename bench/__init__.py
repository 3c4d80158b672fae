"""Benchmarks and drills of workload-resizer (run as modules: `python -m bench.drills`)."""
