"""Fixtures shared by the cluster tests (found by pytest here, without imports in the test files)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from devkit.processes import Webhook, WebhookCerts
from tests.cluster.test_reconciler import Harness


@pytest.fixture
def h(cluster: Any, namespace: str) -> Iterator[Harness]:
    """A harness on the test's namespace, with the design config already in place."""
    harness = Harness(cluster, namespace)
    harness.config()
    try:
        yield harness
    finally:
        harness.close()


@pytest.fixture(scope="module")
def webhook() -> Iterator[Webhook]:
    """A webhook process of the test module's own (not registered: tests register it when needed)."""
    proc = Webhook(certs=WebhookCerts())
    try:
        proc.wait_ready()
        yield proc
    finally:
        proc.terminate()
        proc.close()
