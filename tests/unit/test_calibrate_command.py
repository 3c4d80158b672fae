"""`workload-resizer calibrate`'s pure parts: flags, node choice, the benchmark pod, pod verdicts,
the evaluation and its rendering. The command against a cluster: tests/cluster/test_calibrate.py."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from commands.calibrate import (
    APP_LABEL,
    Report,
    Target,
    TypeResult,
    benchmark_pod,
    choose_targets,
    evaluate,
    pod_verdict,
    report_json,
    report_table,
)
from commands.cli import parse
from commands.errors import CommandError
from reconciler.settings import CALIBRATE_IMAGE, CONFIG_NAMESPACE, CalibrateSettings
from resizer.config import load_config
from resizer.podstate import SKIP

LABEL = "cloud.google.com/machine-family"
CONFIG = (
    "baselineNodeType: n2d\nnodeTypes:\n  n2d: {cpuPerf: 1.0, memPerf: 1.0}\n  slow: {cpuPerf: 1.0, memPerf: 1.0}\n"
    "bounds: {cpu: {min: 50m, max: '16'}, memory: {min: 64Mi, max: 32Gi}}\n"
)


def node(
    name: str,
    node_type: str | None,
    ready: bool = True,
    cordoned: bool = False,
    taints: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {LABEL: node_type} if node_type else {}},
        "spec": {"unschedulable": cordoned, "taints": taints or []},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


# ---------------------------------------------------------------- flags


def test_defaults() -> None:
    settings = parse(["calibrate"])
    assert isinstance(settings, CalibrateSettings)
    assert (
        settings.repeats,
        settings.cpu,
        settings.namespace,
        settings.image,
        settings.node_types,
        settings.baseline_node_type,
        settings.apply,
        settings.host_network,
    ) == (5, "1", CONFIG_NAMESPACE, CALIBRATE_IMAGE, (), "", False, False)


def test_flags() -> None:
    settings = parse(
        [
            "calibrate",
            "--node-types=c3,slow",
            "--repeats=3",
            "--cpu=2",
            "--command",
            "/bench --quick 'a b'",
            "--toleration",
            "dedicated=batch:NoSchedule",
            "--toleration",
            "gpu",
            "--timeout=1m",
            "--benchmark-duration=500ms",
            "--apply",
            "-o",
            "json",
            "--baseline-node-type=c3",
        ]
    )
    assert isinstance(settings, CalibrateSettings)
    assert settings.node_types == ("c3", "slow") and settings.repeats == 3 and settings.cpu == "2"
    assert settings.command == ("/bench", "--quick", "a b")
    assert settings.tolerations == (("dedicated", "batch", "NoSchedule"), ("gpu", "", ""))
    assert (settings.timeout, settings.benchmark_seconds, settings.apply, settings.output) == (60.0, 0.5, True, "json")
    assert settings.baseline_node_type == "c3"


@pytest.mark.parametrize(
    "argv",
    [
        ["--repeats=1"],
        ["--repeats=0"],
        ["--cpu=abc"],
        ["--cpu=0"],
        ["--memory=-1Mi"],
        ["--confidence=1.5"],
        ["--command", "'unclosed"],
        ["--toleration", "k:Sometimes"],
        ["--timeout=0"],
        ["-o", "yaml"],
    ],
)
def test_bad_flags_fail_fast(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        parse(["calibrate", *argv])


# ---------------------------------------------------------------- choosing nodes


def test_one_ready_schedulable_node_per_type_baseline_first() -> None:
    nodes = [
        node("b", "n2d"),
        node("a", "n2d"),
        node("s1", "slow", ready=False),
        node("s2", "slow"),
        node("c", "c3", cordoned=True),
        node("x", None),
    ]
    targets = choose_targets(nodes, LABEL, (), "n2d")
    assert [(t.node_type, t.node) for t in targets] == [("n2d", "a"), ("c3", ""), ("slow", "s2")]
    assert "NotReady or cordoned" in targets[1].problem


def test_named_types_and_a_type_without_nodes() -> None:
    targets = choose_targets([node("a", "n2d"), node("s", "slow")], LABEL, ("t2a", "slow"), "n2d")
    assert [t.node_type for t in targets] == ["n2d", "t2a", "slow"]
    assert targets[1].problem == f"no node has the label {LABEL}=t2a"


def test_taints_need_tolerations() -> None:
    taint = {"key": "workload-resizer.io/real-node", "value": "true", "effect": "NoSchedule"}
    nodes = [
        node("a", "n2d"),
        node("s", "slow", taints=[taint]),
        node("p", "pref", taints=[{"key": "k", "effect": "PreferNoSchedule"}]),
    ]
    targets = choose_targets(nodes, LABEL, (), "n2d")
    assert (
        "pass --toleration" in targets[2].problem
        and "workload-resizer.io/real-node=true:NoSchedule" in targets[2].problem
    )
    assert targets[1].node == "p"  # PreferNoSchedule does not keep it off
    for toleration in (
        ("workload-resizer.io/real-node", "", ""),
        ("workload-resizer.io/real-node", "true", "NoSchedule"),
    ):
        assert choose_targets(nodes, LABEL, ("slow",), "n2d", (toleration,))[1].node == "s"
    assert choose_targets(nodes, LABEL, ("slow",), "n2d", (("workload-resizer.io/real-node", "false", ""),))[1].problem


# ---------------------------------------------------------------- the pod


def test_benchmark_pod_is_guaranteed_pinned_unmanaged_and_locked_down() -> None:
    settings = CalibrateSettings(cpu="1", memory="64Mi", tolerations=(("t", "", "NoSchedule"),), host_network=True)
    pod = benchmark_pod(settings, Target("n2d", "node-a"), "run1", 2)
    spec = pod["spec"]
    [container] = spec["containers"]
    assert container["resources"] == {
        "requests": {"cpu": "1", "memory": "64Mi"},
        "limits": {"cpu": "1", "memory": "64Mi"},
    }
    assert container["args"] == ["-duration=2.0s"] and "command" not in container
    assert spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] == [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}
    ]
    assert spec["tolerations"] == [{"key": "t", "operator": "Exists", "effect": "NoSchedule"}]
    assert spec["restartPolicy"] == "Never" and spec["hostNetwork"] is True
    assert "ownerReferences" not in pod["metadata"] and pod["metadata"]["annotations"] == {SKIP: "true"}
    assert pod["metadata"]["labels"][APP_LABEL] == "workload-resizer-calibrate"
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    own = benchmark_pod(CalibrateSettings(image="me/bench:1", command=("/b", "-x")), Target("n2d", "a"), "r", 1)
    assert own["spec"]["containers"][0]["command"] == ["/b", "-x"] and "args" not in own["spec"]["containers"][0]
    assert own["spec"]["hostNetwork"] is False


def pod(phase: str, state: dict[str, Any], conditions: list[dict[str, str]] | None = None) -> dict[str, Any]:
    return {
        "status": {
            "phase": phase,
            "conditions": conditions or [],
            "containerStatuses": [{"name": "benchmark", "state": state}],
        }
    }


def test_pod_verdicts() -> None:
    assert pod_verdict(pod("Succeeded", {"terminated": {"exitCode": 0, "message": '{"score": 3}'}})) == (
        "done",
        '{"score": 3}',
    )
    verdict, why = pod_verdict(pod("Failed", {"terminated": {"exitCode": 2, "reason": "Error", "message": "boom"}}))
    assert verdict == "failed" and "exit code 2" in why and "boom" in why
    verdict, why = pod_verdict(pod("Pending", {"waiting": {"reason": "ErrImageNeverPull", "message": "not present"}}))
    assert verdict == "failed" and "ErrImageNeverPull" in why
    verdict, why = pod_verdict(
        pod("Pending", {}, [{"type": "PodScheduled", "status": "False", "message": "0/3 nodes are available"}])
    )
    assert verdict == "waiting" and "0/3 nodes are available" in why
    assert pod_verdict(pod("Pending", {"waiting": {"reason": "ContainerCreating"}}))[0] == "waiting"


# ---------------------------------------------------------------- evaluation and output


def results(base: list[float], slow: list[float], slow_error: str = "") -> list[TypeResult]:
    return [TypeResult(Target("n2d", "a"), base), TypeResult(Target("slow", "s"), slow, error=slow_error)]


def test_evaluate_suggests_and_edits_the_wrong_value() -> None:
    reports, changes, text = evaluate(
        results([100.0, 102.0, 98.0], [50.0, 51.0, 49.0]), load_config(CONFIG), "n2d", 0.95, CONFIG
    )
    assert changes == {"slow": Fraction(1, 2)}
    assert load_config(text).node_types["slow"].cpuPerf == Fraction(1, 2)
    assert reports[0].ratio is not None and reports[0].ratio.value == 1.0 and reports[0].suggestion is None
    assert reports[1].suggestion is not None and reports[1].suggestion.change


def test_evaluate_keeps_a_right_value_and_skips_a_failed_type() -> None:
    _, changes, text = evaluate(results([100.0, 101.0], [100.5, 99.5]), load_config(CONFIG), "n2d", 0.95, CONFIG)
    assert changes == {} and text == CONFIG
    reports, changes, _ = evaluate(
        results([100.0, 101.0], [], slow_error="run 1: boom"), load_config(CONFIG), "n2d", 0.95, CONFIG
    )
    assert changes == {} and reports[1].summary is None


def test_evaluate_refuses_a_config_it_cannot_edit() -> None:
    tight = CONFIG.replace("slow: {cpuPerf: 1.0, memPerf: 1.0}", "slow: {cpuPerf: 1.0, memPerf: 1.0}\n  odd: [1]")
    with pytest.raises(CommandError):
        evaluate(
            [TypeResult(Target("n2d", "a"), [1.0, 1.0]), TypeResult(Target("odd", "o"), [2.0, 2.0])],
            load_config(CONFIG),
            "n2d",
            0.95,
            tight,
        )


def test_table_and_json_say_what_was_measured_and_suggested() -> None:
    reports, changes, text = evaluate(
        results([100.0, 102.0, 98.0], [50.0, 51.0, 49.0]), load_config(CONFIG), "n2d", 0.95, CONFIG
    )
    report = Report("n2d", reports, "ConfigMap ns/cm", CONFIG, text, changes, 0.95, 12.0)
    settings = CalibrateSettings(repeats=3)
    table = report_table(report, settings)
    assert "slow       s     3     50" in table and "change" in table and "-  slow: {cpuPerf: 1.0" in table
    assert "+  slow: {cpuPerf: 0.5" in table and "Run again with --apply" in table
    document = report_json(report, settings)
    assert document["changes"] == {"slow": "0.5"} and document["applied"] is False and document["failed"] == []
    slow = document["nodeTypes"][1]
    assert slow["measuredCpuPerf"] == "0.5" and slow["ratio"]["low"] < 0.5 < slow["ratio"]["high"]


def test_a_busy_baseline_is_called_out() -> None:
    busy = results([100.0, 102.0, 98.0], [50.0, 51.0, 49.0])
    busy[0].cpu_shares, busy[1].cpu_shares = [0.9, 0.88, 0.9], [0.5, 0.5, 0.5]
    reports, changes, text = evaluate(busy, load_config(CONFIG), "n2d", 0.95, CONFIG)
    table = report_table(Report("n2d", reports, "cm", CONFIG, text, changes, 0.95, 1.0), CalibrateSettings())
    assert "Warning: the benchmark got only 89% of a CPU on a" in table and "50%" in table
    busy[0].cpu_shares = [0.99, 0.98]
    reports, changes, text = evaluate(busy, load_config(CONFIG), "n2d", 0.95, CONFIG)
    assert "Warning" not in report_table(
        Report("n2d", reports, "cm", CONFIG, text, changes, 0.95, 1.0), CalibrateSettings()
    )


def test_pod_names_come_from_any_label_value() -> None:
    for node_type, prefix in (
        ("n2d", "workload-resizer-calibrate-n2d-1-"),
        ("Big_Box.v2", "workload-resizer-calibrate-big-box-v2-1-"),
        ("__", "workload-resizer-calibrate-type-1-"),
    ):
        assert benchmark_pod(CalibrateSettings(), Target(node_type, "a"), "r", 1)["metadata"]["generateName"] == prefix


# ---------------------------------------------------------------- the runs, against a scripted API


@pytest.fixture(autouse=True)
def fast_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("commands.calibrate.POLL_SECONDS", 0.01)


class ScriptedApi:
    """Just what Calibration calls: each created pod answers GETs from `states` in turn."""

    def __init__(self, states: list[Any]) -> None:
        self.states = states
        self.created: list[str] = []
        self.deleted: list[str] = []

    async def create(self, path: str, pod: dict[str, Any]) -> dict[str, Any]:
        name = f"{pod['metadata']['generateName']}{len(self.created)}"
        self.created.append(name)
        return {"metadata": {"name": name}}

    async def get(self, path: str, **params: Any) -> dict[str, Any]:
        if "labelSelector" in params:
            return {"items": [{"metadata": {"name": n}} for n in self.created if n not in self.deleted]}
        state = self.states.pop(0) if len(self.states) > 1 else self.states[0]
        if isinstance(state, Exception):
            raise state
        return {"spec": {"nodeName": "a"}, **state}

    async def request(self, method: str, path: str, body: Any = None, decode: bool = True) -> dict[str, Any]:
        assert method == "DELETE" and body["gracePeriodSeconds"] == 0
        self.deleted.append(path.rsplit("/", 1)[1])
        return {}


def run_rounds(api: ScriptedApi, repeats: int = 2) -> list[TypeResult]:
    import asyncio

    import commands.calibrate as module

    calibration = module.Calibration(api, CalibrateSettings(repeats=repeats, timeout=5))  # type: ignore[arg-type]
    return asyncio.run(calibration.run_rounds([Target("n2d", "a"), Target("slow", "s")]))


def test_runs_survive_a_transient_api_error_and_delete_every_pod() -> None:
    from kube import ApiError

    done = pod("Succeeded", {"terminated": {"exitCode": 0, "message": '{"score": 7, "cpuShare": 0.99}'}})
    api = ScriptedApi([ApiError(503, {"message": "apiserver restarting"}), pod("Pending", {}), done])
    base, slow = run_rounds(api)
    assert (base.scores, slow.scores, base.error, slow.error) == ([7.0, 7.0], [7.0, 7.0], "", "")
    assert base.cpu_shares == [0.99, 0.99]
    assert len(api.created) == 4 and sorted(api.deleted) == sorted(api.created)


def test_a_failing_type_stops_its_own_runs_only() -> None:
    from kube import ApiError

    api = ScriptedApi([ApiError(403, {"message": "forbidden"})])
    base, slow = run_rounds(api)
    assert "the API refused or failed a request" in base.error and "forbidden" in base.error
    assert len(api.created) == 2, "no second round after the baseline failed"
    assert sorted(api.deleted) == sorted(api.created)
    bad = ScriptedApi([pod("Succeeded", {"terminated": {"exitCode": 0, "message": "done, no JSON"}})])
    base, _ = run_rounds(bad)
    assert "termination message: the last line is not JSON" in base.error


def test_cancelled_runs_delete_their_pods() -> None:
    import asyncio

    import commands.calibrate as module

    api = ScriptedApi([pod("Running", {"running": {}})])

    async def body() -> None:
        both_created = asyncio.Event()
        create = api.create

        async def create_and_tell(path: str, manifest: dict[str, Any]) -> dict[str, Any]:
            created = await create(path, manifest)
            if len(api.created) == 2:
                both_created.set()
            return created

        api.create = create_and_tell  # type: ignore[method-assign]
        calibration = module.Calibration(api, CalibrateSettings(repeats=3, timeout=60))  # type: ignore[arg-type]
        task = asyncio.create_task(calibration.run_rounds([Target("n2d", "a"), Target("slow", "s")]))
        await asyncio.wait_for(both_created.wait(), 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(body())
    assert len(api.created) == 2 and sorted(api.deleted) == sorted(api.created)


def test_the_runs_are_counted_on_a_terminal_and_the_round_lines_do_not_garble_the_counter(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import asyncio
    import io

    import commands.calibrate as module
    from commands.progress import ERASE_LINE, Progress

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal = Terminal()
    done = pod("Succeeded", {"terminated": {"exitCode": 0, "message": '{"score": 7}'}})
    calibration = module.Calibration(
        ScriptedApi([done]),  # type: ignore[arg-type]
        CalibrateSettings(repeats=2, timeout=5),
        Progress("calibrate", "benchmark runs", stream=terminal),
    )
    asyncio.run(calibration.run_rounds([Target("n2d", "a"), Target("slow", "s")]))
    drawn = [part for part in terminal.getvalue().split(ERASE_LINE) if part]
    assert drawn[0] == "calibrate: 0/4 benchmark runs" and "calibrate: 4/4 benchmark runs" in drawn
    assert terminal.getvalue().endswith(ERASE_LINE)  # erased before the report
    assert capsys.readouterr().err.count("calibrate: round") == 2  # the round lines, as before
