"""config.yaml texts for tests, benchmarks, drills and the demo, from one builder.

    config_yaml()                                        the design's sample (resizer.SAMPLE_CONFIG)
    config_yaml(extra_node_types={"slow": (0.5, 1.0)})   plus a family
    config_yaml(cpu=("10m", "16"), memory=("16Mi", "32Gi"))   looser bounds

The text keeps the flow style of the sample, so a test can still append sections
(``overrides:``) to it.
"""

from __future__ import annotations

from collections.abc import Mapping

# The design's machine families: name -> (cpuPerf, memPerf); n2d is the baseline.
DESIGN_NODE_TYPES: dict[str, tuple[float, float]] = {"n2d": (1.0, 1.0), "n4": (1.25, 1.0), "c3": (1.30, 1.0)}
DESIGN_CPU_BOUNDS = ("50m", "16")
DESIGN_MEMORY_BOUNDS = ("64Mi", "32Gi")


def config_yaml(
    *,
    baseline: str = "n2d",
    node_types: Mapping[str, tuple[float, float]] = DESIGN_NODE_TYPES,
    extra_node_types: Mapping[str, tuple[float, float]] | None = None,
    cpu: tuple[str, str] = DESIGN_CPU_BOUNDS,
    memory: tuple[str, str] = DESIGN_MEMORY_BOUNDS,
) -> str:
    """A config.yaml: `node_types` (plus `extra_node_types`), global (min, max) bounds."""
    families = {**node_types, **(extra_node_types or {})}
    lines = [f"baselineNodeType: {baseline}", "nodeTypes:"]
    lines += [
        f"  {name}: {{ cpuPerf: {float(cpu_perf)!r}, memPerf: {float(mem_perf)!r} }}"
        for name, (cpu_perf, mem_perf) in families.items()
    ]
    lines += [
        "bounds:",
        f'  cpu: {{ min: "{cpu[0]}", max: "{cpu[1]}" }}',
        f'  memory: {{ min: "{memory[0]}", max: "{memory[1]}" }}',
    ]
    return "\n".join(lines) + "\n"
