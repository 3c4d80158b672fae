"""Helpers shared by the cluster tests, benchmarks and demo (never product code)."""
