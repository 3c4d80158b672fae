from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from resizer.podstate import (
    APPLIED_AT,
    APPLIED_INSTANCE_TYPE,
    PREFIX,
    SKIP,
    is_controller_owned_key,
    original_key,
)

QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
KINDS = list(itertools.product(("cpu", "memory"), ("request", "limit")))

# Container names are DNS labels: lowercase alphanumerics and '-', alphanumeric at both ends.
dns_labels = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", fullmatch=True)


def assert_valid_annotation_key(key: str) -> None:
    prefix, _, name = key.partition("/")
    assert prefix == "workload-resizer.io"
    assert len(name) <= 63
    assert QUALIFIED_NAME.fullmatch(name), name


def test_constant_keys_live_under_the_prefix() -> None:
    assert PREFIX == "workload-resizer.io/"
    assert SKIP == "workload-resizer.io/skip"
    assert APPLIED_INSTANCE_TYPE == "workload-resizer.io/applied-instance-type"
    assert APPLIED_AT == "workload-resizer.io/applied-at"


@pytest.mark.parametrize(
    ("resource", "kind", "expected"),
    [
        ("cpu", "request", "workload-resizer.io/original-cpu.app"),
        ("memory", "request", "workload-resizer.io/original-memory.app"),
        ("cpu", "limit", "workload-resizer.io/original-cpu-limit.app"),
        ("memory", "limit", "workload-resizer.io/original-memory-limit.app"),
    ],
)
def test_original_key_for_short_container_names_is_verbatim(resource: str, kind: str, expected: str) -> None:
    assert original_key("app", resource, kind) == expected  # type: ignore[arg-type]


def test_original_key_for_a_63_character_container_name_is_truncated_and_hashed() -> None:
    name = "a" * 30 + "-" + "b" * 32
    keys = [original_key(name, resource, kind) for resource, kind in KINDS]  # type: ignore[arg-type]
    for key in keys:
        assert_valid_annotation_key(key)
        assert len(key.partition("/")[2]) == 63
        assert re.search(r"_[a-z2-7]{26}$", key)
    assert len(set(keys)) == 4


def test_original_key_distinguishes_long_names_sharing_a_prefix() -> None:
    first = "x" * 62 + "1"
    second = "x" * 62 + "2"
    assert original_key(first, "memory", "limit") != original_key(second, "memory", "limit")


def test_hashed_key_never_collides_with_the_verbatim_key_of_another_container() -> None:
    long_name = "c" * 60
    hashed = original_key(long_name, "cpu", "request")
    lookalike = hashed.partition("/")[2].removeprefix("original-cpu.")
    assert len(lookalike) == 50
    assert original_key(lookalike, "cpu", "request") != hashed


def test_original_key_rejects_names_that_cannot_form_a_qualified_name() -> None:
    with pytest.raises(ValueError):
        original_key("bad/name", "cpu", "request")
    with pytest.raises(ValueError):
        original_key("app", "gpu", "request")  # type: ignore[arg-type]


@settings(deadline=None)
@given(dns_labels)
def test_every_generated_key_is_a_valid_annotation_key(container: str) -> None:
    for resource, kind in KINDS:
        assert_valid_annotation_key(original_key(container, resource, kind))  # type: ignore[arg-type]


@settings(deadline=None)
@given(st.lists(dns_labels, min_size=2, max_size=2, unique=True))
def test_generated_keys_are_unique_per_container(containers: list[str]) -> None:
    for resource, kind in KINDS:
        first, second = (original_key(name, resource, kind) for name in containers)  # type: ignore[arg-type]
        assert first != second


@pytest.mark.parametrize(
    ("key", "owned"),
    [
        ("workload-resizer.io/original-cpu.app", True),
        ("workload-resizer.io/original-memory-limit.app", True),
        ("workload-resizer.io/applied-instance-type", True),
        ("workload-resizer.io/applied-at", True),
        ("workload-resizer.io/skip", False),
        ("example.com/original-cpu.app", False),
        ("original-cpu.app", False),
    ],
)
def test_is_controller_owned_key_covers_original_and_applied_keys_only(key: str, owned: bool) -> None:
    assert is_controller_owned_key(key) is owned


def test_originals_that_fit_within_the_annotation_limit_are_accepted() -> None:
    from resizer import TOTAL_ANNOTATION_SIZE_LIMIT, fits_annotation_limit

    existing = {"example.com/a": "x" * 1000, "workload-resizer.io/original-cpu.app": "9" * 5000}
    assert fits_annotation_limit(existing, {"workload-resizer.io/original-cpu.app": "1"})
    assert TOTAL_ANNOTATION_SIZE_LIMIT == 256 * 1024


def test_originals_that_would_exceed_the_annotation_limit_are_refused() -> None:
    from resizer import TOTAL_ANNOTATION_SIZE_LIMIT, fits_annotation_limit

    key = "example.com/blob"
    at_limit = {key: "x" * (TOTAL_ANNOTATION_SIZE_LIMIT - len(key))}
    assert fits_annotation_limit(at_limit, {})
    assert not fits_annotation_limit(at_limit, {"workload-resizer.io/original-cpu.app": "1"})


def test_forged_controller_keys_do_not_count_against_the_limit() -> None:
    from resizer import fits_annotation_limit

    forged = {f"workload-resizer.io/original-cpu.c{i}": "1" * 100 for i in range(3000)}
    assert fits_annotation_limit(forged, {"workload-resizer.io/original-cpu.app": "1"})


def test_multibyte_characters_count_in_bytes() -> None:
    from resizer import TOTAL_ANNOTATION_SIZE_LIMIT, fits_annotation_limit

    key = "k"
    assert not fits_annotation_limit({key: "ü" * (TOTAL_ANNOTATION_SIZE_LIMIT // 2)}, {})
