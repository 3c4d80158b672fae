from __future__ import annotations

import math
import re
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from resizer.quantity import (
    MAX_QUANTITY,
    QuantityError,
    coerce_quantity,
    format_cpu,
    format_memory,
    parse_quantity,
    to_bytes,
    to_millicores,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("100m", Fraction(1, 10)),
        ("0.5", Fraction(1, 2)),
        (".5", Fraction(1, 2)),
        ("5.", Fraction(5)),
        ("+1", Fraction(1)),
        ("-1", Fraction(-1)),
        ("0", Fraction(0)),
        ("1e3", Fraction(1000)),
        ("129e6", Fraction(129_000_000)),
        ("1E3", Fraction(1000)),
        ("1E+3", Fraction(1000)),
        ("2e-3", Fraction(2, 1000)),
        ("1n", Fraction(1, 10**9)),
        ("1u", Fraction(1, 10**6)),
        ("1m", Fraction(1, 1000)),
        ("1k", Fraction(10**3)),
        ("1M", Fraction(10**6)),
        ("1G", Fraction(10**9)),
        ("1T", Fraction(10**12)),
        ("1P", Fraction(10**15)),
        ("1E", Fraction(10**18)),
        ("1Ki", Fraction(2**10)),
        ("1Mi", Fraction(2**20)),
        ("1Gi", Fraction(2**30)),
        ("1Ti", Fraction(2**40)),
        ("1Pi", Fraction(2**50)),
        ("1Ei", Fraction(2**60)),
        ("1.5Gi", Fraction(3 * 2**29)),
        ("0.1Ki", Fraction(1024, 10)),
        ("1.5m", Fraction(3, 2000)),
        (str(MAX_QUANTITY), Fraction(MAX_QUANTITY)),
    ],
)
def test_parse_quantity_reads_every_suffix_form(text: str, expected: Fraction) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        " ",
        " 1",
        "1 ",
        ".",
        "-",
        "--1",
        "+-1",
        "1.2.3",
        "1K",
        "1e",
        "1ee3",
        "1Ki3",
        "1e3.5",
        "1mi",
        "1 Gi",
        "abc",
        "0x10",
        "1µ",
        "\u0661",
        "1e99999999999",
        "9223372036854775808",
        "8Ei",
        "1" * 31,
        "1" * 200,
    ],
)
def test_parse_quantity_rejects_malformed_input_quoting_it(text: str) -> None:
    with pytest.raises(QuantityError) as raised:
        parse_quantity(text)
    assert repr(text) in str(raised.value)


def test_parse_quantity_rounds_sub_nano_values_up_to_one_nano_like_kubernetes() -> None:
    assert parse_quantity("0.1n") == Fraction(1, 10**9)
    assert parse_quantity("1.0000000001") == Fraction(1_000_000_001, 10**9)
    assert parse_quantity("-1e-30") == Fraction(-1, 10**9)


@pytest.mark.timeout(60)  # building 10**2000000000 would not finish: a hang becomes a failure
def test_parse_quantity_handles_huge_exponents_without_building_huge_numbers() -> None:
    assert parse_quantity("1e-2000000000") == Fraction(1, 10**9)
    with pytest.raises(QuantityError):
        parse_quantity("1e2000000000")


def test_coerce_quantity_accepts_yaml_ints_and_floats() -> None:
    assert coerce_quantity(16) == 16
    assert coerce_quantity(0.5) == Fraction(1, 2)
    assert coerce_quantity(1e-05) == Fraction(1, 100_000)
    assert coerce_quantity("64Mi") == 64 * 2**20


@pytest.mark.parametrize("value", [True, False, math.nan, math.inf, -math.inf, None, [1], 10**30], ids=repr)
def test_coerce_quantity_rejects_bools_non_finite_and_non_numbers(value: object) -> None:
    with pytest.raises(QuantityError):
        coerce_quantity(value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (Fraction(1, 2), 1),
        (Fraction(3, 2), 2),
        (Fraction(5, 2), 3),
        (Fraction(-1, 2), -1),
        (Fraction(-5, 2), -3),
        (Fraction(49, 100), 0),
        (Fraction(251, 100), 3),
        (Fraction(7), 7),
    ],
)
def test_round_half_away_rounds_halves_away_from_zero(value: Fraction, expected: int) -> None:
    assert to_bytes(value) == expected


def test_to_millicores_and_to_bytes_round_half_away_from_zero() -> None:
    assert to_millicores(parse_quantity("0.5m")) == 1
    assert to_millicores(parse_quantity("1.5m")) == 2
    assert to_millicores(parse_quantity("2.5m")) == 3
    assert to_millicores(parse_quantity("2.4m")) == 2
    assert to_millicores(parse_quantity("1")) == 1000
    assert to_bytes(parse_quantity("0.5")) == 1
    assert to_bytes(parse_quantity("2.5")) == 3
    assert to_bytes(parse_quantity("1Gi")) == 2**30


@pytest.mark.parametrize(
    ("millicores", "expected"),
    [
        (1500, "1500m"),
        (2000, "2"),
        (800, "800m"),
        (0, "0"),
        (1_000_000, "1k"),
        (1, "1m"),
        (10, "10m"),
        (16_000, "16"),
        (1_500_000, "1500"),
        (10**21, "1E"),
        (-1500, "-1500m"),
    ],
)
def test_format_cpu_gives_canonical_decimal_si(millicores: int, expected: str) -> None:
    assert format_cpu(millicores) == expected


@pytest.mark.parametrize(
    ("nbytes", "expected"),
    [
        (2**30, "1Gi"),
        (1536 * 2**20, "1536Mi"),
        (10**6, "1M"),
        (858_993_459, "858993459"),
        (0, "0"),
        (512, "512"),
        (1024, "1Ki"),
        (2_048_000, "2000Ki"),
        (1_500_000, "1500k"),
        (10**9, "1G"),
        (2**60 * 7, "7Ei"),
    ],
)
def test_format_memory_prefers_exact_binary_suffixes_then_decimal_si(nbytes: int, expected: str) -> None:
    assert format_memory(nbytes) == expected


def test_formatters_reject_values_beyond_the_kubernetes_maximum() -> None:
    with pytest.raises(QuantityError):
        format_memory(MAX_QUANTITY + 1)
    with pytest.raises(QuantityError):
        format_cpu(MAX_QUANTITY * 1000 + 1)


_CPU_CANONICAL = re.compile(r"0|-?[1-9][0-9]*(m|k|M|G|T|P|E)?")
_MEMORY_CANONICAL = re.compile(r"0|-?[1-9][0-9]*(k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?")


@settings(deadline=None)
@given(st.integers(min_value=-(10**21), max_value=10**21))
def test_format_cpu_round_trips_and_is_canonical(millicores: int) -> None:
    text = format_cpu(millicores)
    assert parse_quantity(text) == Fraction(millicores, 1000)
    assert format_cpu(to_millicores(parse_quantity(text))) == text
    assert _CPU_CANONICAL.fullmatch(text)
    mantissa = int(re.sub(r"[a-zA-Z]+$", "", text))
    assert mantissa % 1000 != 0 or mantissa == 0 or text.endswith("E")


@settings(deadline=None)
@given(st.integers(min_value=0, max_value=MAX_QUANTITY))
def test_format_memory_round_trips_and_is_canonical(nbytes: int) -> None:
    text = format_memory(nbytes)
    assert parse_quantity(text) == nbytes
    assert format_memory(to_bytes(parse_quantity(text))) == text
    assert _MEMORY_CANONICAL.fullmatch(text)
    mantissa = int(re.sub(r"[a-zA-Z]+$", "", text))
    if text.endswith("i"):
        assert mantissa % 1024 != 0 or text.endswith("Ei")
    elif mantissa:
        assert mantissa % 1000 != 0 or text.endswith("E")
        assert nbytes < 1024 or nbytes % 1024 != 0


@settings(deadline=None)
@given(st.integers(min_value=0, max_value=2**40).map(lambda units: units * 1024))
def test_format_memory_of_binary_multiples_uses_a_binary_suffix(nbytes: int) -> None:
    text = format_memory(nbytes)
    assert nbytes == 0 or text.endswith("i")


def test_coerce_quantity_rejects_integers_too_long_to_print() -> None:
    with pytest.raises(QuantityError):
        coerce_quantity(10**5000)
