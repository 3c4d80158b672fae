"""Config changes take effect on running pods: re-aligned from their originals, at the
configured rate; a config change that changes nothing for a pod writes nothing to it;
--realign=false keeps the design's "new pods only"."""

from __future__ import annotations

import json
import signal
import time
from datetime import datetime, timezone
from typing import Any

from devkit.kube import wait_for
from resizer.podstate import APPLIED_SIZE
from tests.cluster.test_reconciler import (
    CONFIG_YAML,
    CRASH_AFTER,
    Harness,
    guaranteed,
    metric_snapshot,
    ours,
    q,
    resources,
)

PODS = 10
RATE = 2.0


def reloads(reconciler: Any) -> float:
    return reconciler.metric("workload_resizer_config_reloads_total")


def edit_config(h: Harness, reconciler: Any, text: str) -> None:
    """Apply a new config.yaml and wait until the reconciler has taken it into use."""
    seen = reloads(reconciler)
    h.config(text)
    wait_for("the new config in use", lambda: reloads(reconciler) > seen, timeout=30)


def test_a_config_edit_re_aligns_running_pods_at_the_configured_rate(h: Harness) -> None:
    n4, n2d = h.node("n4", "n4"), h.node("n2d", "n2d")
    h.deploy("web", n4, [guaranteed()], replicas=PODS)
    h.deploy("base", n2d, [guaranteed()], replicas=2)
    reconciler = h.reconciler(f"--max-resizes-per-second={RATE:g}")
    h.wait_applied("web", "n4", count=PODS)
    h.wait_applied("base", "n2d", count=2)
    settled = {p["metadata"]["name"]: p for p in h.kube.pods(h.ns)}
    assert all(resources(p)["requests"]["cpu"] == q("800m") for n, p in settled.items() if n.startswith("web"))

    # An edit that changes nothing for these pods (another family's perf, a comment): no write.
    writes = metric_snapshot(reconciler)
    edit_config(h, reconciler, CONFIG_YAML.replace("c3: { cpuPerf: 1.30", "c3: { cpuPerf: 1.35") + "# edited\n")
    h.wait_idle(reconciler)  # the reload queued every pod it wants to look at again: all decided
    assert {
        n: p["metadata"]["resourceVersion"] for n, p in ((p["metadata"]["name"], p) for p in h.kube.pods(h.ns))
    } == {n: p["metadata"]["resourceVersion"] for n, p in settled.items()}
    assert metric_snapshot(reconciler) == writes

    # n4 twice as fast as the baseline: every web pod re-aligned from its originals (1 CPU -> 500m).
    first_seen: dict[str, float] = {}
    edited_at = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    edit_config(h, reconciler, CONFIG_YAML.replace("n4: { cpuPerf: 1.25", "n4: { cpuPerf: 2.0"))
    deadline = time.monotonic() + 60
    while len(first_seen) < PODS and time.monotonic() < deadline:
        for pod in h.kube.pods(h.ns):
            name = pod["metadata"]["name"]
            if name not in first_seen and pod["metadata"]["generation"] > settled[name]["metadata"]["generation"]:
                first_seen[name] = time.monotonic()
        time.sleep(0.05)
    assert len(first_seen) == PODS, f"only {len(first_seen)} of {PODS} pods re-aligned"
    # The rate, from when each pod's resize reached the apiserver (its generation moved; polled every 50 ms).
    span = max(first_seen.values()) - min(first_seen.values())
    rate = (PODS - 1) / span
    print(f"re-align rate: {rate:.2f} resizes/s over {span:.2f}s (configured {RATE:g}/s)")

    # Each re-alignment is followed to actuation: one Resized decision per pod once the kubelet applied it.
    def resized_decisions() -> list[str] | None:
        pods = sorted(
            line["pod"]
            for line in map(json.loads, filter(None, reconciler.log_lines()))
            if line.get("msg") == "decision"
            and line.get("outcome") == "Resized"
            and line.get("nodeType") == "n4"
            and line["ts"] >= edited_at
        )
        return pods if len(pods) >= PODS else None

    resized = wait_for("a Resized decision per re-aligned pod, once actuated", resized_decisions, timeout=60)
    assert sorted(resized) == sorted(first_seen), resized
    assert rate <= RATE * 1.15, rate  # never faster than configured (polling jitter)
    assert rate >= RATE * 0.5, rate  # and not stalled

    def all_realigned() -> dict[str, dict[str, Any]] | None:
        pods = {p["metadata"]["name"]: p for p in h.kube.pods(h.ns)}
        web = [p for n, p in pods.items() if n.startswith("web")]
        return (
            pods
            if all(
                resources(p)["requests"]["cpu"] == q("500m")
                and p["metadata"]["annotations"].get("workload-resizer.io/applied-at")
                for p in web
            )
            else None
        )

    final = wait_for("every web pod at 500m", all_realigned, timeout=30)
    for name, pod in final.items():
        before = settled[name]
        if name.startswith("web"):
            assert pod["metadata"]["generation"] == before["metadata"]["generation"] + 1, name  # exactly one resize
            assert resources(pod) == {
                "requests": {"cpu": q("500m"), "memory": q("256Mi")},
                "limits": {"cpu": q("500m"), "memory": q("256Mi")},
            }
            originals = {k: v for k, v in ours(pod).items() if "original-" in k}
            assert originals == {k: v for k, v in ours(before).items() if "original-" in k}, "originals kept"
        else:  # the baseline pods: nothing changed for them, nothing written
            assert pod["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"], name
    assert any(
        e["reason"] == "Resized" and "re-aligned" in e["message"]
        for e in h.events(next(n for n in final if n.startswith("web")))
    )

    # --realign=false: the design's "new pods only"; running pods keep their size.
    reconciler.terminate()
    quiet = h.reconciler("--realign=false")
    edit_config(h, quiet, CONFIG_YAML.replace("n4: { cpuPerf: 1.25", "n4: { cpuPerf: 4.0"))
    h.wait_idle(quiet)
    assert all(
        p["metadata"]["resourceVersion"] == final[p["metadata"]["name"]]["metadata"]["resourceVersion"]
        for p in h.kube.pods(h.ns)
    )


def test_a_re_alignment_interrupted_by_a_crash_is_followed_to_one_resized_after_the_restart(h: Harness) -> None:
    """The re-alignment's resize is written, the reconciler dies before it sees it actuated: the
    next process finds it (the spec's size is not the applied-size it recorded, and equals the
    plan), does not resize again and reports the one Resized the dead process owed."""
    node = h.node("n4", "n4")
    h.deploy("web", node, [guaranteed()])
    first = h.reconciler(name="reconciler-1")
    [pod] = h.wait_applied("web", "n4")
    name = pod["metadata"]["name"]
    h.wait_event(name, "Resized")
    first.close()
    sized_at = ours(pod)[APPLIED_SIZE]

    h.config(CONFIG_YAML.replace("n4: { cpuPerf: 1.25", "n4: { cpuPerf: 2.0"))
    crashing = h.reconciler(env={CRASH_AFTER: "resize"}, name="reconciler-crash", wait=False)
    assert crashing.wait_exit(60) == -signal.SIGKILL, "the fault hook kills it right after the resize"
    pod = h.pod(name)
    assert resources(pod)["requests"]["cpu"] == q("500m") and pod["metadata"]["generation"] == 3
    assert [e["reason"] for e in h.events(name)] == ["Resized"], "the re-alignment is not reported yet"

    second = h.reconciler(name="reconciler-2")
    wait_for("a second Resized", lambda: len(h.events(name)) == 2, timeout=60)
    h.sentinel(second)  # the echo of its applied-size write taken up too
    pod = h.pod(name)
    assert pod["metadata"]["generation"] == 3, "no second resize"
    assert [e["reason"] for e in h.events(name)] == ["Resized", "Resized"]
    [message] = [e["message"] for e in h.events(name) if e["message"].startswith("re-aligned")]
    assert message.startswith("re-aligned for node type n4") and "requested before this reconciler started" in message
    assert ours(pod)[APPLIED_SIZE] != sized_at, "applied-size now records the re-aligned spec"
    assert h.writes_but_sentinels(second) == {
        "PATCH pods": 1,
        "PATCH pods/resize": 0,
        "POST events": 1,
        "PATCH events": 0,
    }
