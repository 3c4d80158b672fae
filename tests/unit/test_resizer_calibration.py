"""calibrate's arithmetic (resizer/calibration.py): summaries, the ratio's interval, the suggestion,
the score line and the in-place config.yaml edit."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
import yaml

from resizer.calibration import (
    CalibrationError,
    decimal_text,
    parse_score_line,
    ratio_of_means,
    set_cpu_perf,
    suggest,
    summarize,
    t_quantile,
)
from resizer.config import load_config

CONFIG = """\
# the admin's comment stays
baselineNodeType: n2d
nodeTypes:
  n2d:  { cpuPerf: 1.0, memPerf: 1.0 }   # baseline
  slow:
    cpuPerf: "1.0"
    memPerf: 0.9
  c3:   { cpuPerf: 1.30, memPerf: 1.0 }
bounds:
  cpu:    { min: "50m",  max: "16" }
  memory: { min: "64Mi", max: "32Gi" }
overrides:
  - name: batch
    match: { podLabel: { tier: batch } }
    nodeTypes: { slow: { cpuPerf: 0.7, memPerf: 1.0 } }
"""


# ---------------------------------------------------------------- statistics


@pytest.mark.parametrize(
    ("df", "expected"), [(1, 12.7062), (2, 4.3027), (4, 2.7764), (10, 2.2281), (30, 2.0423), (math.inf, 1.95996)]
)
def test_t_quantile_matches_the_tables(df: float, expected: float) -> None:
    assert t_quantile(0.975, df) == pytest.approx(expected, abs=1e-4)
    assert t_quantile(0.025, df) == pytest.approx(-expected, abs=1e-4)


def test_t_quantile_takes_fractional_degrees_of_freedom_between_the_integers() -> None:
    assert t_quantile(0.975, 4) > t_quantile(0.975, 4.5) > t_quantile(0.975, 5)
    with pytest.raises(CalibrationError):
        t_quantile(1.0, 3)


def test_summary_of_scores() -> None:
    s = summarize([9.0, 10.0, 11.0])
    assert (s.runs, s.mean, s.stdev, s.minimum, s.maximum) == (3, 10.0, 1.0, 9.0, 11.0)
    assert s.relative_stdev == pytest.approx(0.1)
    for bad in ([], [1.0, 0.0], [float("nan")], [-2.0]):
        with pytest.raises(CalibrationError):
            summarize(bad)


def test_ratio_interval_is_welch_on_the_log_scale() -> None:
    base, slow = summarize([100.0, 102.0, 98.0]), summarize([50.0, 51.0, 49.0])
    ratio = ratio_of_means(slow, base)
    assert ratio.value == pytest.approx(0.5)
    a = (1.0 / 50) ** 2 / 3  # s²/(n·m²) of each side: equal relative spreads
    assert ratio.degrees_of_freedom == pytest.approx(4.0)
    half = t_quantile(0.975, 4.0) * math.sqrt(2 * a)
    assert (ratio.low, ratio.high) == pytest.approx((0.5 * math.exp(-half), 0.5 * math.exp(half)))
    assert ratio.low < 0.5 < ratio.high


def test_ratio_interval_narrows_with_more_runs_and_needs_two() -> None:
    few = ratio_of_means(summarize([50.0, 52.0, 48.0]), summarize([100.0, 104.0, 96.0]))
    many = ratio_of_means(summarize([50.0, 52.0, 48.0] * 4), summarize([100.0, 104.0, 96.0] * 4))
    assert many.high - many.low < few.high - few.low
    exact = ratio_of_means(summarize([5.0, 5.0]), summarize([10.0, 10.0]))
    assert (exact.low, exact.value, exact.high) == (0.5, 0.5, 0.5)
    with pytest.raises(CalibrationError, match="at least 2 runs"):
        ratio_of_means(summarize([5.0]), summarize([10.0, 10.0]))


def test_suggestion_keeps_a_configured_value_inside_the_interval() -> None:
    ratio = ratio_of_means(summarize([50.0, 52.0, 48.0]), summarize([100.0, 104.0, 96.0]))
    assert not suggest("slow", ratio, Fraction(1), Fraction(51, 100)).change
    wrong = suggest("slow", ratio, Fraction(1), Fraction(1))
    assert wrong.change and wrong.measured == Fraction(1, 2)
    assert suggest("new", ratio, Fraction(1), None).change
    # Relative to the baseline's own cpuPerf, rounded to 3 significant digits.
    scaled = suggest("slow", ratio_of_means(summarize([1.0, 1.0]), summarize([3.0, 3.0])), Fraction(2), None)
    assert scaled.measured == Fraction("0.667")


def test_decimal_text() -> None:
    assert [decimal_text(v) for v in (Fraction(1, 2), Fraction(2), Fraction("1.30"), Fraction("0.667"))] == [
        "0.5",
        "2",
        "1.3",
        "0.667",
    ]


# ---------------------------------------------------------------- the score line


def test_score_is_the_last_non_empty_line() -> None:
    score, details = parse_score_line('warming up\n{"score": 1}\n{"score": 12.5, "cpuShare": 0.98}\n\n')
    assert score == 12.5 and details["cpuShare"] == 0.98


@pytest.mark.parametrize(
    "text",
    [
        "",
        "\n\n",
        "score: 12",
        '{"score": 12}\ndone',
        '{"score": "12"}',
        '{"score": 0}',
        '{"score": -1}',
        '{"score": true}',
        '{"score": NaN}',
        '[{"score": 3}]',
        '{"value": 3}',
    ],
)
def test_a_missing_or_bad_score_line_is_refused(text: str) -> None:
    with pytest.raises(CalibrationError):
        parse_score_line(text)


# ---------------------------------------------------------------- the config edit


def test_edit_changes_only_the_cpu_perf_bytes() -> None:
    edited = set_cpu_perf(CONFIG, {"slow": Fraction(1, 2), "c3": Fraction("1.27")})
    assert edited == CONFIG.replace('cpuPerf: "1.0"', "cpuPerf: 0.5").replace("cpuPerf: 1.30", "cpuPerf: 1.27")
    config = load_config(edited)
    assert config.node_types["slow"].cpuPerf == Fraction(1, 2) and config.node_types["slow"].memPerf == Fraction("0.9")
    # The override's own nodeTypes.slow is left alone.
    assert yaml.safe_load(edited)["overrides"][0]["nodeTypes"]["slow"]["cpuPerf"] == 0.7


@pytest.mark.parametrize(
    "config",
    [
        CONFIG,
        "baselineNodeType: n2d\nnodeTypes:\n  n2d:\n    cpuPerf: 1.0\n    memPerf: 1.0\n"
        "bounds: {cpu: {min: 50m, max: '16'}, memory: {min: 64Mi, max: 32Gi}}\n",
        "baselineNodeType: n2d\nnodeTypes: {n2d: {cpuPerf: 1, memPerf: 1}}\n"
        "bounds: {cpu: {min: 50m, max: '16'}, memory: {min: 64Mi, max: 32Gi}}",
        "baselineNodeType: n2d\nnodeTypes:\n  n2d: {cpuPerf: 1, memPerf: 1}",  # no newline at the end
    ],
)
def test_edit_adds_a_type_the_config_lacks(config: str) -> None:
    edited = set_cpu_perf(config, {"t2a": Fraction("0.85"), "true": Fraction(2)})
    document = yaml.safe_load(edited)
    assert document["nodeTypes"]["t2a"] == {"cpuPerf": 0.85, "memPerf": 1.0}
    assert document["nodeTypes"]["true"] == {"cpuPerf": 2, "memPerf": 1.0}  # quoted: not a boolean key
    before = yaml.safe_load(config)
    del document["nodeTypes"]["t2a"], document["nodeTypes"]["true"]
    assert document == before
    assert edited.startswith(config.rstrip("\n").split("\n", 1)[0])


def test_no_change_is_the_same_text() -> None:
    assert set_cpu_perf(CONFIG, {}) is CONFIG


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ("baselineNodeType: n2d\n", "no nodeTypes"),
        ("nodeTypes: [1, 2]\n", "not a mapping"),
        ("a: [\n", "not valid YAML"),
        ("nodeTypes:\n  slow: {cpuPerf: [1], memPerf: 1}\n", "not a plain value"),
    ],
)
def test_configs_it_cannot_edit_are_refused(config: str, message: str) -> None:
    with pytest.raises(CalibrationError, match=message):
        set_cpu_perf(config, {"slow": Fraction(1, 2)})
