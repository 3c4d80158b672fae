"""Runtime hints: containers whose runtime sizes itself once, at start, from a limit a resize changes.

A resize in place changes a running container's cgroup limits, not what its process derived from
them when it started. What the pod spec shows is read once per container (:func:`pod_runtimes`:
small facts, so the admin commands keep them for every listed pod); :func:`container_hints` then
says which of them a change of the container's sizes makes stale:

- an env var the kubelet fills from ``limits.cpu``/``requests.cpu`` (``memory``) with the
  downward API (``valueFrom.resourceFieldRef``) is fixed when the container starts: a hint when
  the value it would show (rounded up to its divisor, as the kubelet does) changes; the most
  certain signal;
- a JVM (``java`` in the command, ``-XX:``/``-Xmx`` flags, ``JAVA_TOOL_OPTIONS``/
  ``JDK_JAVA_OPTIONS``/``JAVA_OPTS``, or only a JDK image's name: then "may") sizes its GC and
  compiler threads and the common ForkJoinPool from the CPU limit at start (container support),
  or counts ``-XX:ActiveProcessorCount`` whatever the limit; without ``-Xmx`` its maximum heap
  is a share (``-XX:MaxRAMPercentage``, default 25%) of the memory limit at start;
- ``GOMAXPROCS`` set in env fixes the Go scheduler's parallelism (Go 1.25+ follows the CPU limit,
  and its changes, only when it is unset; ``GODEBUG=updatemaxprocs=0`` keeps the value it read at
  start; a binary built with older Go cannot be told from the spec);
- ``UV_THREADPOOL_SIZE`` set in env sizes libuv's (Node.js) thread pool once, at start.

A container whose ``resizePolicy`` restarts it for the resource starts again with the new limits:
no hint. A change of the CPU limit (of the request, for a ``requests.cpu`` reference) is what
matters; a memory change only for the memory rules.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum
from fractions import Fraction
from typing import Any, Literal

from resizer.plan import POD_LEVEL, ResizePlan
from resizer.podstate import read_state, resizable_containers
from resizer.quantity import QuantityError, coerce_quantity, format_cpu, format_memory

ResourceField = Literal["limits.cpu", "requests.cpu", "limits.memory", "requests.memory"]
_RESOURCE_FIELDS: tuple[ResourceField, ...] = ("limits.cpu", "requests.cpu", "limits.memory", "requests.memory")
# Options the JVM itself reads (JAVA_TOOL_OPTIONS, JDK_JAVA_OPTIONS) and the launch scripts'
# convention (JAVA_OPTS), in the order the JVM sees them: later flags win.
_JVM_OPTION_ENV = ("JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS", "JAVA_OPTS")
# Repository names of JDK/JRE images and of servers shipped on one (matched as whole words).
_JVM_IMAGE = re.compile(
    r"(?:^|[/_.-])(openjdk|temurin|amazoncorretto|corretto|zulu|semeru|liberica|sapmachine|adoptopenjdk|graalvm|"
    r"jdk\d*|jre\d*|java\d*|tomcat|jetty|wildfly)(?=$|[/_.-])"
)
_DEFAULT_RAM_PERCENTAGE = "25"


class HintReason(StrEnum):
    """Why a container's runtime does not follow a resize until it restarts (stable names)."""

    CPU_COUNT_FROM_DOWNWARD_API = "CpuCountFromDownwardApi"
    MEMORY_FROM_DOWNWARD_API = "MemoryFromDownwardApi"
    JVM_CPU_COUNT_AT_START = "JvmCpuCountAtStart"
    JVM_HEAP_FROM_MEMORY_LIMIT_AT_START = "JvmHeapFromMemoryLimitAtStart"
    GO_MAX_PROCS_AT_START = "GoMaxProcsAtStart"
    NODE_THREAD_POOL_FROM_ENV = "NodeThreadPoolFromEnv"


class Runtime(StrEnum):
    ENV = "env"  # whatever reads a downward-API variable
    JVM = "jvm"
    GO = "go"
    NODE = "node"


@dataclass(frozen=True)
class RuntimeHint:
    container: str
    runtime: Runtime
    reason: HintReason
    message: str


@dataclass(frozen=True)
class ResourceEnv:
    """An env var the kubelet fills from a container's resources (downward API) at start."""

    name: str
    container: str  # whose resources (resourceFieldRef.containerName, default its own)
    field: ResourceField
    divisor: Fraction | None  # in cores or bytes; None: unreadable (compared unrounded)


@dataclass(frozen=True)
class Jvm:
    """What the spec tells about a JVM in the container."""

    evidence: str  # what says it is one: "command", "JAVA_TOOL_OPTIONS", "image eclipse-temurin", ...
    certain: bool  # False: a guess from the image's name only
    processor_count: str | None = None  # -XX:ActiveProcessorCount
    container_support: bool = True  # -XX:-UseContainerSupport: it ignores the cgroup's limits
    fixed_heap: bool = False  # -Xmx / -XX:MaxHeapSize / -XX:MaxRAM: not a share of the limit
    ram_percentage: str | None = None  # -XX:MaxRAMPercentage


@dataclass(frozen=True)
class ContainerRuntime:
    """The facts of one container that a resize can make stale (see the module's docstring)."""

    container: str
    resource_env: tuple[ResourceEnv, ...] = ()
    jvm: Jvm | None = None
    gomaxprocs: str | None = None
    go_updates_off: bool = False  # GODEBUG=updatemaxprocs=0: GOMAXPROCS from the limit at start only
    uv_threadpool_size: str | None = None
    restarts_on_resize: frozenset[str] = frozenset()  # resizePolicy RestartContainer: "cpu", "memory"
    started_at: str | None = None  # status: when the running container started (RFC 3339)


@dataclass(frozen=True)
class PodRuntimes:
    containers: Mapping[str, ContainerRuntime]
    applied_at: str | None = None  # when the product last gave the pod its size


@dataclass(frozen=True)
class Sizes:
    """One container's cpu (millicores) and memory (bytes); None: unset or not known."""

    cpu_request: int | None = None
    cpu_limit: int | None = None
    memory_request: int | None = None
    memory_limit: int | None = None

    def of(self, field: ResourceField) -> int | None:
        return {
            "limits.cpu": self.cpu_limit,
            "requests.cpu": self.cpu_request,
            "limits.memory": self.memory_limit,
            "requests.memory": self.memory_request,
        }[field]


Resize = Mapping[str, tuple[Sizes, Sizes]]  # container -> (sizes its process started with, sizes after)


def pod_runtimes(pod: Mapping[str, Any]) -> PodRuntimes | None:
    """The facts of the pod's containers and sidecars that have any; None when none has."""
    started = {
        str(status.get("name")): ((status.get("state") or {}).get("running") or {}).get("startedAt")
        for group in ("containerStatuses", "initContainerStatuses")
        for status in (pod.get("status") or {}).get(group) or []
        if isinstance(status, Mapping)
    }
    runtimes = (read_runtime(c, started.get(str(c.get("name")))) for c in resizable_containers(pod))
    containers = {runtime.container: runtime for runtime in runtimes if runtime is not None}
    return PodRuntimes(containers, read_state(pod).applied.at) if containers else None


def read_runtime(container: Mapping[str, Any], started_at: Any = None) -> ContainerRuntime | None:
    """The facts of one container; None when nothing in it sizes itself from its limits."""
    name = str(container.get("name"))
    env = [e for e in container.get("env") or [] if isinstance(e, Mapping) and isinstance(e.get("name"), str)]
    literal = {str(e["name"]): str(e["value"]) for e in env if isinstance(e.get("value"), str)}
    resource_env = tuple(r for r in (_resource_env(e, name) for e in env) if r is not None)
    referenced = {r.name for r in resource_env}
    runtime = ContainerRuntime(
        name,
        resource_env,
        _jvm(container, literal),
        literal.get("GOMAXPROCS") if "GOMAXPROCS" not in referenced else None,
        _go_updates_off(literal.get("GODEBUG", "")),
        literal.get("UV_THREADPOOL_SIZE") if "UV_THREADPOOL_SIZE" not in referenced else None,
        frozenset(
            str(p.get("resourceName"))
            for p in container.get("resizePolicy") or []
            if isinstance(p, Mapping) and p.get("restartPolicy") == "RestartContainer"
        ),
        started_at if isinstance(started_at, str) else None,
    )
    facts = (runtime.resource_env, runtime.jvm, runtime.gomaxprocs, runtime.go_updates_off, runtime.uv_threadpool_size)
    return runtime if any(facts) else None


def _go_updates_off(godebug: str) -> bool:
    """GODEBUG (comma-separated, the last setting wins) keeps a Go 1.25+ GOMAXPROCS at its value
    from start: ``updatemaxprocs=0`` while ``containermaxprocs`` (from the limit at all) is on."""
    settings = dict(part.strip().partition("=")[::2] for part in godebug.split(",") if "=" in part)
    return settings.get("updatemaxprocs") == "0" and settings.get("containermaxprocs") != "0"


def _resource_env(entry: Mapping[str, Any], own: str) -> ResourceEnv | None:
    ref = (entry.get("valueFrom") or {}).get("resourceFieldRef")
    if not isinstance(ref, Mapping) or ref.get("resource") not in _RESOURCE_FIELDS:
        return None
    field: ResourceField = ref["resource"]
    try:
        divisor: Fraction | None = coerce_quantity(ref.get("divisor") or "1")
    except QuantityError:
        divisor = None
    if divisor is not None and divisor <= 0:
        divisor = None
    return ResourceEnv(str(entry["name"]), str(ref.get("containerName") or own), field, divisor)


def _jvm(container: Mapping[str, Any], literal: Mapping[str, str]) -> Jvm | None:
    """A JVM's evidence and flags, from the JVM's own option variables, then command and args."""
    sources = [(name, literal[name]) for name in _JVM_OPTION_ENV if name in literal]
    words = [(name, word) for name, text in sources for word in text.split()]
    for part in ("command", "args"):
        for item in container.get(part) or []:
            words += [(part, word) for word in str(item).split()]
    evidence = next((name for name, _ in sources), None)
    evidence = evidence or next((src for src, w in words if w.rsplit("/", 1)[-1] == "java" or _jvm_flag(w)), None)
    certain = evidence is not None
    if evidence is None:
        repository = _repository(str(container.get("image") or ""))
        if _JVM_IMAGE.search(repository) is None:
            return None
        evidence = f"image {repository.rsplit('/', 1)[-1]}"
    jvm = Jvm(evidence, certain)
    for _, word in words:
        jvm = _with_flag(jvm, word)
    return jvm


def _jvm_flag(word: str) -> bool:
    return word.startswith(("-XX:", "-Xmx", "-Xms", "-Xss"))


def _with_flag(jvm: Jvm, word: str) -> Jvm:
    """``jvm`` with one command-line word applied (a later flag overrides an earlier one)."""
    name, _, value = word.partition("=")
    if name == "-XX:ActiveProcessorCount":
        return replace(jvm, processor_count=None if value.strip() in ("", "-1") else value)
    if word in ("-XX:+UseContainerSupport", "-XX:-UseContainerSupport"):
        return replace(jvm, container_support=word[4] == "+")
    if word.startswith("-Xmx") or name in ("-XX:MaxHeapSize", "-XX:MaxRAM"):
        return replace(jvm, fixed_heap=True)
    if name == "-XX:MaxRAMPercentage":
        return replace(jvm, ram_percentage=value)
    return jvm


def _repository(image: str) -> str:
    """``registry/path/name`` of an image reference, lower case, without its tag or digest."""
    name = image.split("@", 1)[0].lower()
    slash, colon = name.rfind("/"), name.rfind(":")
    return name[:colon] if colon > slash else name


def planned_sizes(plan: ResizePlan) -> dict[str, tuple[Sizes, Sizes]]:
    """Each container's sizes now and as the plan would set them (what `plan` flags)."""
    return _sizes(plan, planned=True)


def applied_sizes(plan: ResizePlan) -> dict[str, tuple[Sizes, Sizes]]:
    """Each container's sizes as authored (what a container resized in place started with) and now
    (what `report` flags)."""
    return _sizes(plan, planned=False)


def _sizes(plan: ResizePlan, planned: bool) -> dict[str, tuple[Sizes, Sizes]]:
    before: dict[str, dict[str, int | None]] = {}
    after: dict[str, dict[str, int | None]] = {}
    for change in plan.changes:
        if change.container == POD_LEVEL or change.skipped is not None:
            continue
        now: tuple[int | None, int | None] = (change.current_request, change.current_limit)
        old, new = now, now
        if planned:
            new = (
                change.desired_request,
                change.current_limit if change.desired_limit is None else change.desired_limit,
            )
        else:
            old = (change.original_request, change.original_limit)
        for side, (request, limit) in ((before, old), (after, new)):
            values = side.setdefault(change.container, {})
            values[f"{change.resource}_request"], values[f"{change.resource}_limit"] = request, limit
    return {name: (Sizes(**before[name]), Sizes(**after[name])) for name in before}


def pod_hints(runtimes: PodRuntimes | None, resize: Resize, applied: bool = False) -> tuple[RuntimeHint, ...]:
    """The hints of a pod's containers for ``resize``. ``applied``: the resize already happened,
    so a container that started after the pod was given its size is not stale."""
    if runtimes is None:
        return ()
    return tuple(
        hint
        for runtime in runtimes.containers.values()
        if not (applied and _started_after(runtime.started_at, runtimes.applied_at))
        for hint in container_hints(runtime, resize)
    )


def _started_after(started_at: str | None, applied_at: str | None) -> bool:
    if started_at is None or applied_at is None:
        return False
    try:
        return datetime.fromisoformat(started_at) >= datetime.fromisoformat(applied_at)
    except ValueError:
        return False


def container_hints(runtime: ContainerRuntime, resize: Resize) -> tuple[RuntimeHint, ...]:
    """What in ``runtime`` stays as it was at start when ``resize`` moves its container's sizes."""
    own = resize.get(runtime.container)
    restarts = runtime.restarts_on_resize
    hints = [*_downward_api_hints(runtime, resize)]
    cpu = _moved(own, "limits.cpu") if "cpu" not in restarts else None
    memory = _moved(own, "limits.memory") if "memory" not in restarts else None
    if cpu is not None:
        hints += _cpu_hints(runtime, *cpu)
    if memory is not None and runtime.jvm is not None:
        hints += _heap_hints(runtime.container, runtime.jvm, *memory)
    return tuple(hints)


def _moved(sizes: tuple[Sizes, Sizes] | None, field: ResourceField) -> tuple[int, int] | None:
    if sizes is None:
        return None
    before, after = sizes[0].of(field), sizes[1].of(field)
    return (before, after) if before is not None and after is not None and before != after else None


def _downward_api_hints(runtime: ContainerRuntime, resize: Resize) -> Iterator[RuntimeHint]:
    for env in runtime.resource_env:
        resource = env.field.split(".")[1]
        # Restarted with its own resource's new size; another container's restart does not restart this one.
        if env.container == runtime.container and resource in runtime.restarts_on_resize:
            continue
        moved = _moved(resize.get(env.container), env.field)
        if moved is None:
            continue
        old, new = (_exposed(amount, resource, env.divisor) for amount in moved)
        if old == new:
            continue
        reason = HintReason.CPU_COUNT_FROM_DOWNWARD_API if resource == "cpu" else HintReason.MEMORY_FROM_DOWNWARD_API
        of = "" if env.container == runtime.container else f" of container {env.container}"
        yield RuntimeHint(
            runtime.container,
            Runtime.ENV,
            reason,
            f"{env.name} is set from {env.field}{of} (downward API) when the container starts: {old} before "
            f"the resize, {new} after it; it keeps {old} until the container restarts",
        )


def _exposed(amount: int, resource: str, divisor: Fraction | None) -> str:
    """What the kubelet puts in the variable: the amount divided by the divisor, rounded up."""
    value = Fraction(amount, 1000) if resource == "cpu" else Fraction(amount)
    if divisor is None:
        return format_cpu(amount) if resource == "cpu" else format_memory(amount)
    return str(math.ceil(value / divisor))


def _cpu_hints(runtime: ContainerRuntime, before: int, after: int) -> Iterator[RuntimeHint]:
    change = f"CPU limit {format_cpu(before)} -> {format_cpu(after)}"
    name = runtime.container
    jvm = runtime.jvm
    if jvm is not None and jvm.container_support:
        if jvm.processor_count is not None:
            text = (
                f"-XX:ActiveProcessorCount={jvm.processor_count}: the JVM counts {jvm.processor_count} processors "
                f"whatever the CPU limit ({change}); its GC and compiler threads stay sized for them"
            )
        else:
            text = (
                f"{_jvm_subject(jvm)} its GC and JIT compiler threads and common ForkJoinPool from the CPU limit "
                f"when it starts: they stay sized for {format_cpu(before)} after the {change}, until it restarts"
            )
        yield RuntimeHint(name, Runtime.JVM, HintReason.JVM_CPU_COUNT_AT_START, text)
    go = None
    if runtime.gomaxprocs is not None:
        go = (
            f"GOMAXPROCS={runtime.gomaxprocs} is set in its env: the Go runtime keeps it whatever the CPU "
            f"limit ({change}); Go 1.25+ follows the limit only when GOMAXPROCS is unset"
        )
    elif runtime.go_updates_off:
        go = (
            f"GODEBUG=updatemaxprocs=0: a Go 1.25+ runtime keeps the GOMAXPROCS it read from the CPU limit at "
            f"start ({format_cpu(before)}) after the {change}"
        )
    if go is not None:
        yield RuntimeHint(name, Runtime.GO, HintReason.GO_MAX_PROCS_AT_START, go)
    if runtime.uv_threadpool_size is not None:
        yield RuntimeHint(
            name,
            Runtime.NODE,
            HintReason.NODE_THREAD_POOL_FROM_ENV,
            f"UV_THREADPOOL_SIZE={runtime.uv_threadpool_size}: libuv's thread pool (Node.js) is sized once at "
            f"start and keeps {runtime.uv_threadpool_size} threads after the {change}",
        )


def _heap_hints(name: str, jvm: Jvm, before: int, after: int) -> Iterator[RuntimeHint]:
    if jvm.fixed_heap or not jvm.container_support:
        return  # its heap never followed the limit
    share = jvm.ram_percentage or f"{_DEFAULT_RAM_PERCENTAGE} (the default)"
    text = (
        f"{_jvm_subject(jvm)} its maximum heap from the memory limit when it starts ({share}% of "
        f"{format_memory(before)}): it keeps that heap after the memory limit goes to {format_memory(after)}"
    )
    if after < before:
        text += ", which the smaller limit may not hold"
    yield RuntimeHint(name, Runtime.JVM, HintReason.JVM_HEAP_FROM_MEMORY_LIMIT_AT_START, text)


def _jvm_subject(jvm: Jvm) -> str:
    if jvm.certain:
        return f"the JVM ({jvm.evidence}) sizes"
    return f"a JVM ({jvm.evidence}, a guess from the image name) may size"


def hints_by_pod(
    entries: Iterable[tuple[tuple[str, str], ResizePlan | None]],
    runtimes: Mapping[tuple[str, str], PodRuntimes],
    applied: bool = False,
) -> dict[tuple[str, str], tuple[RuntimeHint, ...]]:
    """(namespace, name) -> the pod's hints, for the pods with a plan and any hint."""
    found: dict[tuple[str, str], tuple[RuntimeHint, ...]] = {}
    for key, plan in entries:
        if plan is None or key not in runtimes:
            continue
        resize = applied_sizes(plan) if applied else planned_sizes(plan)
        hints = pod_hints(runtimes[key], resize, applied)
        if hints:
            found[key] = hints
    return found
