"""Runtime hints: which containers keep, after a resize, what their runtime derived from a limit at start."""

from __future__ import annotations

from typing import Any

import pytest

from resizer.plan import plan_resize
from resizer.runtime_hints import (
    HintReason,
    PodRuntimes,
    Runtime,
    Sizes,
    applied_sizes,
    container_hints,
    hints_by_pod,
    planned_sizes,
    pod_hints,
    pod_runtimes,
    read_runtime,
)

from .test_resizer_support import container, make_pod, policy

ONE_CPU_TO_800M = {"app": (Sizes(1000, 1000, 1 << 30, 1 << 30), Sizes(800, 800, 1 << 30, 1 << 30))}
MEMORY_ONLY = {"app": (Sizes(1000, 1000, 1 << 30, 1 << 30), Sizes(1000, 1000, 1 << 30, 2 << 30))}
NOTHING = {"app": (Sizes(1000, 1000, 1 << 30, 1 << 30), Sizes(1000, 1000, 1 << 30, 1 << 30))}


def app(**fields: Any) -> dict[str, Any]:
    spec = container(requests={"cpu": "1", "memory": "1Gi"}, limits={"cpu": "1", "memory": "1Gi"})
    spec.update(fields)
    return spec


def downward(name: str, resource: str, divisor: str | None = None, of: str | None = None) -> dict[str, Any]:
    ref: dict[str, Any] = {"resource": resource}
    if divisor is not None:
        ref["divisor"] = divisor
    if of is not None:
        ref["containerName"] = of
    return {"name": name, "valueFrom": {"resourceFieldRef": ref}}


def reasons(spec: dict[str, Any], resize: Any) -> list[str]:
    runtime = read_runtime(spec)
    return [] if runtime is None else [hint.reason for hint in container_hints(runtime, resize)]


def test_a_container_with_nothing_that_reads_its_limits_has_no_facts() -> None:
    assert read_runtime(app()) is None
    assert read_runtime(app(image="node:22", env=[{"name": "PORT", "value": "8080"}])) is None
    assert pod_runtimes(make_pod(app())) is None


def test_a_downward_api_cpu_variable_is_flagged_when_its_value_changes() -> None:
    spec = app(env=[downward("CPUS", "limits.cpu")])
    [hint] = container_hints(read_runtime(spec), {"app": (Sizes(cpu_limit=2000), Sizes(cpu_limit=1000))})  # type: ignore[arg-type]
    assert (hint.container, hint.runtime, hint.reason) == ("app", Runtime.ENV, HintReason.CPU_COUNT_FROM_DOWNWARD_API)
    assert hint.message.startswith("CPUS is set from limits.cpu (downward API) when the container starts: 2 before")


def test_the_downward_api_value_is_rounded_up_to_its_divisor_so_a_change_within_one_unit_is_not_flagged() -> None:
    spec = app(env=[downward("CPUS", "limits.cpu")])
    assert reasons(spec, {"app": (Sizes(cpu_limit=2000), Sizes(cpu_limit=1600))}) == []  # 2 -> ceil(1.6) = 2
    assert reasons(spec, ONE_CPU_TO_800M) == []  # 1 -> ceil(0.8) = 1
    millicores = app(env=[downward("MILLIS", "limits.cpu", divisor="1m")])
    [hint] = container_hints(read_runtime(millicores), ONE_CPU_TO_800M)  # type: ignore[arg-type]
    assert "1000 before the resize, 800 after it" in hint.message


def test_a_requests_cpu_reference_follows_the_request_not_the_limit() -> None:
    spec = app(env=[downward("WORKERS", "requests.cpu", divisor="1m")])
    assert reasons(spec, {"app": (Sizes(1000, 2000), Sizes(500, 2000))}) == [HintReason.CPU_COUNT_FROM_DOWNWARD_API]
    assert reasons(spec, {"app": (Sizes(1000, 2000), Sizes(1000, 1000))}) == []


def test_a_memory_reference_and_another_containers_resources() -> None:
    spec = app(env=[downward("GOMEMLIMIT", "limits.memory"), downward("PEER_CPUS", "limits.cpu", "1m", of="peer")])
    resize = {
        "app": (Sizes(memory_limit=1 << 30), Sizes(memory_limit=2 << 30)),
        "peer": (Sizes(cpu_limit=500), Sizes(cpu_limit=400)),
    }
    hints = container_hints(read_runtime(spec), resize)  # type: ignore[arg-type]
    assert [h.reason for h in hints] == [HintReason.MEMORY_FROM_DOWNWARD_API, HintReason.CPU_COUNT_FROM_DOWNWARD_API]
    assert "of container peer" in hints[1].message


def test_gomaxprocs_set_in_env_is_flagged_on_a_cpu_limit_change() -> None:
    spec = app(env=[{"name": "GOMAXPROCS", "value": "4"}])
    [hint] = container_hints(read_runtime(spec), ONE_CPU_TO_800M)  # type: ignore[arg-type]
    assert (hint.runtime, hint.reason) == (Runtime.GO, HintReason.GO_MAX_PROCS_AT_START)
    assert "GOMAXPROCS=4" in hint.message and "1 -> 800m" in hint.message
    assert reasons(spec, MEMORY_ONLY) == [] and reasons(spec, NOTHING) == []


def test_gomaxprocs_from_the_downward_api_is_one_hint_the_downward_api_one() -> None:
    spec = app(env=[downward("GOMAXPROCS", "limits.cpu")])
    assert reasons(spec, {"app": (Sizes(cpu_limit=3000), Sizes(cpu_limit=2000))}) == [
        HintReason.CPU_COUNT_FROM_DOWNWARD_API
    ]


def test_a_go_binary_without_gomaxprocs_follows_the_limit() -> None:
    assert read_runtime(app(image="golang:1.25", command=["/app/server"])) is None
    assert read_runtime(app(env=[{"name": "GODEBUG", "value": "http2client=0"}])) is None


def test_go_updates_turned_off_keep_the_gomaxprocs_of_the_start() -> None:
    spec = app(env=[{"name": "GODEBUG", "value": "madvdontneed=1,updatemaxprocs=0"}])
    [hint] = container_hints(read_runtime(spec), ONE_CPU_TO_800M)  # type: ignore[arg-type]
    assert (hint.runtime, hint.reason) == (Runtime.GO, HintReason.GO_MAX_PROCS_AT_START)
    assert hint.message.startswith("GODEBUG=updatemaxprocs=0")
    never_from_the_limit = app(env=[{"name": "GODEBUG", "value": "updatemaxprocs=0,containermaxprocs=0"}])
    assert read_runtime(never_from_the_limit) is None


def test_uv_threadpool_size_is_flagged_on_a_cpu_limit_change() -> None:
    spec = app(image="node:22", env=[{"name": "UV_THREADPOOL_SIZE", "value": "8"}])
    [hint] = container_hints(read_runtime(spec), ONE_CPU_TO_800M)  # type: ignore[arg-type]
    assert (hint.runtime, hint.reason) == (Runtime.NODE, HintReason.NODE_THREAD_POOL_FROM_ENV)
    assert reasons(spec, MEMORY_ONLY) == []


@pytest.mark.parametrize(
    "fields",
    [
        {"command": ["java", "-jar", "/app.jar"]},
        {"command": ["/opt/java/openjdk/bin/java"], "args": ["-jar", "/app.jar"]},
        {"args": ["-XX:+UseG1GC", "-jar", "/app.jar"]},
        {"env": [{"name": "JAVA_TOOL_OPTIONS", "value": "-Dfile.encoding=UTF-8"}]},
        {"env": [{"name": "JDK_JAVA_OPTIONS", "value": ""}]},
        {"command": ["sh", "-c", "exec java $JAVA_OPTS -jar /app.jar"]},
    ],
)
def test_a_jvm_seen_in_the_spec_is_flagged_with_certainty(fields: dict[str, Any]) -> None:
    [hint] = container_hints(read_runtime(app(**fields)), ONE_CPU_TO_800M)  # type: ignore[arg-type]
    assert (hint.runtime, hint.reason) == (Runtime.JVM, HintReason.JVM_CPU_COUNT_AT_START)
    assert "the JVM" in hint.message and "may" not in hint.message


@pytest.mark.parametrize(
    "image",
    [
        "eclipse-temurin:21-jre",
        "docker.io/library/openjdk:17",
        "public.ecr.aws/amazoncorretto/amazoncorretto:21",
        "gcr.io/distroless/java17-debian12@sha256:abc",
        "registry.example:5000/tomcat:10",
    ],
)
def test_a_jvm_guessed_from_the_image_name_may_be_one(image: str) -> None:
    [hint] = container_hints(read_runtime(app(image=image)), ONE_CPU_TO_800M)  # type: ignore[arg-type]
    assert hint.reason == HintReason.JVM_CPU_COUNT_AT_START
    assert "a guess from the image name" in hint.message and "may size" in hint.message
    assert f"(image {image.split('/')[-1].split(':')[0].split('@')[0]}," in hint.message


@pytest.mark.parametrize("image", ["javascript-runner:1", "registry.example/jdkless:1", "node:22", "python:3.11"])
def test_images_that_only_contain_jvm_like_letters_are_not_guessed(image: str) -> None:
    assert read_runtime(app(image=image)) is None


def test_active_processor_count_is_named() -> None:
    spec = app(env=[{"name": "JAVA_TOOL_OPTIONS", "value": "-XX:ActiveProcessorCount=2"}])
    [hint] = container_hints(read_runtime(spec), ONE_CPU_TO_800M)  # type: ignore[arg-type]
    assert hint.reason == HintReason.JVM_CPU_COUNT_AT_START
    assert hint.message.startswith("-XX:ActiveProcessorCount=2: the JVM counts 2 processors")


def test_the_heap_is_flagged_when_the_memory_limit_changes_and_not_when_it_is_fixed() -> None:
    spec = app(args=["-XX:MaxRAMPercentage=75.0", "-jar", "/app.jar"])
    [hint] = container_hints(read_runtime(spec), MEMORY_ONLY)  # type: ignore[arg-type]
    assert (hint.runtime, hint.reason) == (Runtime.JVM, HintReason.JVM_HEAP_FROM_MEMORY_LIMIT_AT_START)
    assert "75.0% of 1Gi" in hint.message and "may not hold" not in hint.message
    smaller = {"app": (Sizes(memory_limit=2 << 30), Sizes(memory_limit=1 << 30))}
    [shrunk] = container_hints(read_runtime(spec), smaller)  # type: ignore[arg-type]
    assert "25 (the default)" not in shrunk.message and shrunk.message.endswith("the smaller limit may not hold")
    assert reasons(app(command=["java"]), MEMORY_ONLY) == [HintReason.JVM_HEAP_FROM_MEMORY_LIMIT_AT_START]
    assert reasons(app(command=["java", "-Xmx512m"]), MEMORY_ONLY) == []
    # A later flag wins, as on the JVM's command line: the -Xmx of JAVA_TOOL_OPTIONS stays.
    fixed = app(env=[{"name": "JAVA_TOOL_OPTIONS", "value": "-Xmx1g"}], args=["-XX:MaxRAMPercentage=50"])
    assert reasons(fixed, MEMORY_ONLY) == []


def test_a_jvm_without_container_support_never_followed_the_limits() -> None:
    spec = app(command=["java", "-XX:-UseContainerSupport", "-jar", "/app.jar"])
    assert reasons(spec, ONE_CPU_TO_800M) == [] and reasons(spec, MEMORY_ONLY) == []


def test_no_hint_when_only_the_request_or_nothing_changes() -> None:
    spec = app(command=["java"], env=[{"name": "GOMAXPROCS", "value": "2"}, downward("N", "limits.cpu", "1m")])
    assert reasons(spec, NOTHING) == []
    assert reasons(spec, {"app": (Sizes(1000, 2000), Sizes(800, 2000))}) == []
    assert reasons(spec, {"other": ONE_CPU_TO_800M["app"]}) == []
    unlimited = {"app": (Sizes(1000, None), Sizes(800, None))}  # no limit: nothing it read moved
    assert reasons(spec, unlimited) == []


def test_a_container_restarted_by_its_resize_policy_starts_with_the_new_limits() -> None:
    spec = app(command=["java"], env=[downward("N", "limits.cpu", "1m")])
    spec["resizePolicy"] = [{"resourceName": "cpu", "restartPolicy": "RestartContainer"}]
    assert reasons(spec, ONE_CPU_TO_800M) == []
    assert reasons(spec, MEMORY_ONLY) == [HintReason.JVM_HEAP_FROM_MEMORY_LIMIT_AT_START]


def test_the_sizes_of_a_plan_now_and_planned_and_as_authored_and_now() -> None:
    pod = make_pod(app(command=["java"]))
    plan = plan_resize(pod, policy(), "n4")  # cpu 1 -> 800m, memory unchanged
    assert planned_sizes(plan) == {"app": (Sizes(1000, 1000, 1 << 30, 1 << 30), Sizes(800, 800, 1 << 30, 1 << 30))}
    assert applied_sizes(plan) == {"app": (Sizes(1000, 1000, 1 << 30, 1 << 30), Sizes(1000, 1000, 1 << 30, 1 << 30))}
    runtimes = pod_runtimes(pod)
    assert runtimes is not None and set(runtimes.containers) == {"app"}
    found = hints_by_pod(
        [(("default", "web-5d8f7"), plan), (("default", "other"), plan)], {("default", "web-5d8f7"): runtimes}
    )
    assert [h.reason for h in found[("default", "web-5d8f7")]] == [HintReason.JVM_CPU_COUNT_AT_START]
    assert hints_by_pod([(("default", "web-5d8f7"), None)], {("default", "web-5d8f7"): runtimes}) == {}


def test_sidecars_are_read_and_plain_init_containers_are_not() -> None:
    sidecar = {**app(name="proxy", command=["java"]), "restartPolicy": "Always"}
    init = app(name="migrate", command=["java"])
    runtimes = pod_runtimes(make_pod(app(), init_containers=[init, sidecar]))
    assert runtimes is not None and set(runtimes.containers) == {"proxy"}


def test_a_container_started_after_the_pod_got_its_size_is_not_stale() -> None:
    pod = make_pod(app(command=["java"]), annotations={"workload-resizer.io/applied-at": "2026-01-02T03:04:05Z"})
    pod["status"] = {
        "containerStatuses": [{"name": "app", "state": {"running": {"startedAt": "2026-01-02T03:10:00Z"}}}]
    }
    runtimes = pod_runtimes(pod)
    assert isinstance(runtimes, PodRuntimes) and runtimes.applied_at == "2026-01-02T03:04:05Z"
    assert pod_hints(runtimes, ONE_CPU_TO_800M, applied=True) == ()
    assert [h.reason for h in pod_hints(runtimes, ONE_CPU_TO_800M)] == [HintReason.JVM_CPU_COUNT_AT_START]
    pod["status"]["containerStatuses"][0]["state"]["running"]["startedAt"] = "2026-01-02T03:00:00Z"
    assert len(pod_hints(pod_runtimes(pod), ONE_CPU_TO_800M, applied=True)) == 1
