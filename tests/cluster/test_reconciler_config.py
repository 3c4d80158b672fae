"""End-to-end: the reconciler keeps its last good config when the ConfigMap turns invalid."""

from __future__ import annotations

import httpx

from devkit.kube import wait_for
from tests.cluster.test_reconciler import (
    CONFIG_NAME,
    CONFIG_YAML,
    Harness,
    guaranteed,
    q,
    resources,
)

# A typo in a perf value: must be a number.
INVALID_CONFIG = CONFIG_YAML.replace("n4: { cpuPerf: 1.25,", "n4: { cpuPerf: fast,")


def readyz(reconciler, verbose: bool = False) -> httpx.Response:
    return httpx.get(f"http://127.0.0.1:{reconciler.health_port}/readyz" + ("?verbose" if verbose else ""), timeout=5)


def test_invalid_config_keeps_the_last_good_one_in_force_until_fixed(h: Harness) -> None:
    assert INVALID_CONFIG != CONFIG_YAML
    node = h.node("n4", "n4")
    reconciler = h.reconciler()
    assert reconciler.metric("workload_resizer_config_valid") == 1

    h.deploy("before", node, [guaranteed()])
    assert resources(h.wait_applied("before", "n4")[0])["requests"]["cpu"] == q("800m")

    h.config(INVALID_CONFIG)
    wait_for("config_valid 0", lambda: reconciler.metric("workload_resizer_config_valid") == 0, timeout=15)
    event = h.wait_event(CONFIG_NAME, "InvalidConfig", kind="ConfigMap")
    assert event["type"] == "Warning"
    assert "nodeTypes.n4.cpuPerf" in event["message"] and "last good" in event["message"], event["message"]
    assert reconciler.metric("workload_resizer_config_loaded") == 1
    assert readyz(reconciler).status_code == 200, "an invalid update must not make the reconciler unready"
    verbose = readyz(reconciler, verbose=True)
    assert verbose.status_code == 200
    assert "invalid" in verbose.text and "last good" in verbose.text, verbose.text

    # The last good config still sizes new pods: n4 is 1.25x, not a parse error.
    h.deploy("during", node, [guaranteed()])
    pod = h.wait_applied("during", "n4")[0]
    assert resources(pod) == {
        "requests": {"cpu": q("800m"), "memory": q("256Mi")},
        "limits": {"cpu": q("800m"), "memory": q("256Mi")},
    }

    h.config(CONFIG_YAML)
    wait_for("config_valid 1", lambda: reconciler.metric("workload_resizer_config_valid") == 1, timeout=15)
    verbose = readyz(reconciler, verbose=True)
    assert verbose.status_code == 200 and "config ok: valid" in verbose.text, verbose.text
    assert len([e for e in h.events(CONFIG_NAME, kind="ConfigMap") if e["reason"] == "InvalidConfig"]) == 1
    assert reconciler.alive
