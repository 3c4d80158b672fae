"""Unit tests (no cluster needed)."""
