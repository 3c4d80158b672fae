"""`calibrate`'s arithmetic: benchmark scores -> a measured ``cpuPerf`` per node type, and the
``config.yaml`` edit that writes it. Pure: no I/O.

Per node type the benchmark runs ``n`` times; its score is work per wall second. The ratio of a
type's mean score to the baseline type's is what ``cpuPerf`` expresses (the baseline's own
``cpuPerf`` times that ratio). Its confidence interval is computed on the log scale (delta
method): ``ln(mean_t / mean_b)`` has the standard error ``sqrt(s_t²/(n_t·m_t²) + s_b²/(n_b·m_b²))``
and Welch–Satterthwaite degrees of freedom; the interval is ``ratio · exp(±t·se)``, never below 0
and asymmetric like the ratio itself. A configured value inside the interval is kept: the
measurement cannot tell it from the truth, and rewriting it would re-align pods for noise.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any

import yaml

from resizer.errors import ResizerError

# A node type the config does not have yet gets this memPerf (the benchmark measures CPU only;
# 1.0 leaves memory requests as the author wrote them).
MEM_PERF_FOR_NEW_TYPES = "1.0"
SIGNIFICANT_DIGITS = 3


class CalibrationError(ResizerError):
    """Scores or a config that calibrate cannot use; the message says why."""


@dataclass(frozen=True)
class ScoreSummary:
    scores: tuple[float, ...]
    mean: float
    stdev: float  # sample standard deviation (n - 1); 0 for one score
    minimum: float
    maximum: float

    @property
    def runs(self) -> int:
        return len(self.scores)

    @property
    def relative_stdev(self) -> float:
        return self.stdev / self.mean


def summarize(scores: Sequence[float]) -> ScoreSummary:
    if not scores:
        raise CalibrationError("no scores")
    bad = [s for s in scores if not (math.isfinite(s) and s > 0)]
    if bad:
        raise CalibrationError(f"scores must be positive finite numbers, got {bad[0]!r}")
    stdev = statistics.stdev(scores) if len(scores) > 1 else 0.0
    return ScoreSummary(tuple(scores), statistics.fmean(scores), stdev, min(scores), max(scores))


@dataclass(frozen=True)
class Ratio:
    value: float
    low: float
    high: float
    confidence: float
    degrees_of_freedom: float  # inf when both sides have no spread


def ratio_of_means(subject: ScoreSummary, baseline: ScoreSummary, confidence: float = 0.95) -> Ratio:
    """``subject.mean / baseline.mean`` with its confidence interval (module docstring)."""
    if not 0 < confidence < 1:
        raise CalibrationError(f"confidence must be between 0 and 1, got {confidence}")
    if subject.runs < 2 or baseline.runs < 2:
        raise CalibrationError("a confidence interval needs at least 2 runs per node type")
    value = subject.mean / baseline.mean
    a = subject.stdev**2 / (subject.runs * subject.mean**2)
    b = baseline.stdev**2 / (baseline.runs * baseline.mean**2)
    if a + b == 0:
        return Ratio(value, value, value, confidence, math.inf)
    df = (a + b) ** 2 / (a**2 / (subject.runs - 1) + b**2 / (baseline.runs - 1))
    spread = t_quantile((1 + confidence) / 2, df) * math.sqrt(a + b)
    return Ratio(value, value * math.exp(-spread), value * math.exp(spread), confidence, df)


@dataclass(frozen=True)
class Suggestion:
    node_type: str
    configured: Fraction | None  # nodeTypes.<type>.cpuPerf now; None: not in the config
    measured: Fraction  # baseline cpuPerf x ratio, SIGNIFICANT_DIGITS digits
    low: float
    high: float

    @property
    def change(self) -> bool:
        """Whether the config should change: the type is missing or its value is outside the interval."""
        return self.configured is None or not self.low <= float(self.configured) <= self.high


def suggest(node_type: str, ratio: Ratio, baseline_cpu_perf: Fraction, configured: Fraction | None) -> Suggestion:
    scale = float(baseline_cpu_perf)
    measured = Fraction(Decimal(f"{scale * ratio.value:.{SIGNIFICANT_DIGITS}g}"))
    return Suggestion(node_type, configured, measured, scale * ratio.low, scale * ratio.high)


def decimal_text(value: Fraction) -> str:
    """The shortest plain decimal text of a value that has one (``Fraction(1, 2)`` -> ``0.5``)."""
    text = format(Decimal(value.numerator) / Decimal(value.denominator), "f")
    if "." in text:
        text = text.rstrip("0")
        text += "0" if text.endswith(".") else ""
    return text


def parse_score_line(text: str) -> tuple[float, dict[str, Any]]:
    """The score of a benchmark's output: its last non-empty line is a JSON object with a
    positive number ``score`` (other keys are kept for the report)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        raise CalibrationError('no output: the last line must be a JSON object like {"score": 12.5}')
    try:
        result = json.loads(lines[-1])
    except json.JSONDecodeError:
        raise CalibrationError(
            f'the last line is not JSON: {lines[-1][:200]!r} (expected {{"score": <number>}})'
        ) from None
    score = result.get("score") if isinstance(result, dict) else None
    if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score) or score <= 0:
        raise CalibrationError(f'the last line has no positive number "score": {lines[-1][:200]!r}')
    return float(score), result


# ---- Student's t quantile (no scipy: the regularized incomplete beta, then bisection) ------------


def t_quantile(p: float, df: float) -> float:
    """The p-quantile of Student's t distribution with ``df`` (> 0, may be fractional) degrees of freedom."""
    if not 0 < p < 1 or not df > 0:
        raise CalibrationError(f"t quantile needs 0 < p < 1 and df > 0, got p={p}, df={df}")
    if math.isinf(df):
        return statistics.NormalDist().inv_cdf(p)
    if p < 0.5:
        return -t_quantile(1 - p, df)
    low, high = 0.0, 1.0
    while _t_cdf(high, df) < p:
        high *= 2
    for _ in range(200):
        middle = (low + high) / 2
        if _t_cdf(middle, df) < p:
            low = middle
        else:
            high = middle
        if high - low <= 1e-12 * max(1.0, high):
            break
    return (low + high) / 2


def _t_cdf(t: float, df: float) -> float:
    tail = 0.5 * _incomplete_beta(df / 2, 0.5, df / (df + t * t))
    return 1 - tail if t >= 0 else tail


def _incomplete_beta(a: float, b: float, x: float) -> float:
    """I_x(a, b), by its continued fraction (modified Lentz)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x > (a + 1) / (a + b + 2):
        return 1 - _incomplete_beta(b, a, 1 - x)
    tiny = 1e-300
    c, d = 1.0, 1 - (a + b) * x / (a + 1)
    d = 1 / (d if abs(d) > tiny else tiny)
    f = d
    for m in range(1, 500):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1 + numerator * d
            d = 1 / (d if abs(d) > tiny else tiny)
            c = 1 + numerator / c
            c = c if abs(c) > tiny else tiny
            f *= c * d
        if abs(c * d - 1) < 1e-15:
            break
    return front * f / a


def set_cpu_perf(text: str, changes: Mapping[str, Fraction]) -> str:
    """``config.yaml`` with ``nodeTypes.<type>.cpuPerf`` set for each type in ``changes``, every
    other byte kept (comments, order, style). A type the config lacks is added with
    ``memPerf: 1.0``. The result is checked to parse to the old document plus exactly these values.
    """
    if not changes:
        return text
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        before = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise CalibrationError(f"config.yaml is not valid YAML: {error}") from None
    node_types = _mapping_value(root, "nodeTypes")
    if node_types is None:
        raise CalibrationError("config.yaml has no nodeTypes mapping to edit")
    edits: list[tuple[int, int, str]] = []
    added = []
    for node_type, value in sorted(changes.items()):
        entry = _mapping_value(node_types, node_type)
        if entry is None:
            added.append(
                f"{_key_text(node_type)}: {{cpuPerf: {decimal_text(value)}, memPerf: {MEM_PERF_FOR_NEW_TYPES}}}"
            )
            continue
        scalar = _mapping_value(entry, "cpuPerf")
        if not isinstance(scalar, yaml.ScalarNode):
            raise CalibrationError(f"nodeTypes.{node_type}.cpuPerf is not a plain value; edit it by hand")
        edits.append((scalar.start_mark.index, scalar.end_mark.index, decimal_text(value)))
    if added:
        edits.append(_insertion(text, node_types, added))
    edited = text
    for start, end, new in sorted(edits, reverse=True):
        edited = edited[:start] + new + edited[end:]
    _check_edit(before, edited, changes)
    return edited


def _mapping_value(node: yaml.Node | None, key: str) -> yaml.Node | None:
    if not isinstance(node, yaml.MappingNode):
        return None
    for key_node, value_node in node.value:
        if isinstance(key_node, yaml.ScalarNode) and key_node.value == key and isinstance(value_node, yaml.Node):
            return value_node
    return None


def _key_text(key: str) -> str:
    return key if yaml.safe_load(key) == key and ":" not in key and "#" not in key else json.dumps(key)


def _insertion(text: str, mapping: yaml.Node, entries: list[str]) -> tuple[int, int, str]:
    """Where and what to insert so ``entries`` become new keys of ``mapping``."""
    if not isinstance(mapping, yaml.MappingNode) or not mapping.value:
        raise CalibrationError("nodeTypes is empty or not a mapping; edit it by hand")
    if mapping.flow_style:
        closing = mapping.end_mark.index - 1
        if text[closing] != "}":
            raise CalibrationError("cannot find the end of the nodeTypes mapping; edit it by hand")
        return closing, closing, "".join(f", {entry}" for entry in entries)
    indent = " " * mapping.value[0][0].start_mark.column
    last = mapping.value[-1][1].end_mark
    if last.column == 0:  # a block value ends where the next line starts
        return last.index, last.index, "".join(f"{indent}{entry}\n" for entry in entries)
    line_end = text.find("\n", last.index)
    at = len(text) if line_end < 0 else line_end
    return at, at, "".join(f"\n{indent}{entry}" for entry in entries)


def _check_edit(before: Any, edited: str, changes: Mapping[str, Fraction]) -> None:
    try:
        after = yaml.safe_load(edited)
    except yaml.YAMLError as error:
        raise CalibrationError(f"the edited config.yaml does not parse ({error}); edit it by hand") from None
    for node_type, value in changes.items():
        entry = (after.get("nodeTypes") or {}).get(node_type) if isinstance(after, dict) else None
        got = entry.get("cpuPerf") if isinstance(entry, dict) else None
        if got is None or Fraction(Decimal(str(got))) != value:
            raise CalibrationError(f"editing nodeTypes.{node_type}.cpuPerf in place failed; edit it by hand")
        if isinstance(before.get("nodeTypes"), dict) and node_type in before["nodeTypes"]:
            before["nodeTypes"][node_type]["cpuPerf"] = got
        else:
            if entry != {"cpuPerf": got, "memPerf": float(MEM_PERF_FOR_NEW_TYPES)}:
                raise CalibrationError(f"adding nodeTypes.{node_type} failed; edit it by hand")
            before["nodeTypes"][node_type] = entry
    if after != before:
        raise CalibrationError("editing config.yaml in place changed more than the cpuPerf values; edit it by hand")
