"""Prometheus text exposition, read with prometheus_client's own parser."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.parser import text_string_to_metric_families


def samples(text: str, name: str) -> Iterator[tuple[dict[str, str], float]]:
    """(labels, value) of every sample called `name` (e.g. ``rest_client_requests_total``)."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                yield sample.labels, sample.value


def metric_sum(text: str, name: str, **labels: str) -> float:
    """Sum of the samples of `name` whose labels include `labels`."""
    return sum(
        value for found, value in samples(text, name) if all(found.get(key) == wanted for key, wanted in labels.items())
    )
