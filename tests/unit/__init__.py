"""Unit tests: pure and fast. No cluster, no external tool to build or run, no root (tests
that need those are in tests/tools and tests/cluster)."""
