"""`restore`: every managed pod back to its originals, the product's annotations removed.

Per pod, in this order (resizer/restore.py says why): resize back to the ``original-*`` values
if the spec differs, then remove the ``original-*``/``applied-*`` annotations with a
resourceVersion precondition (a pod changed meanwhile is read again and redone), one pod at a
time at no more than --max-resizes-per-second. Idempotent: a restored pod carries none of our
annotations and is not listed again; a run killed at any point is finished by running it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, TextIO

from commands.errors import CommandError
from commands.keys import KeyDirectoryError, KeyRingError, load_keyring
from commands.plan import list_all, namespace_labels, run_command
from commands.progress import Progress
from kube import MERGE_PATCH, STRATEGIC_MERGE_PATCH, ApiError, KubeClient
from kube.slim import slim_pod
from reconciler.ports import pod_path
from reconciler.settings import RestoreSettings
from resizer import EMPTY_KEYRING, KeyRing
from resizer.originals import OriginalsError
from resizer.podstate import controller_owned_keys, described_keys, read_state, strip_controller_owned
from resizer.restore import restore_decision
from resizer.scope import NamespaceScope

ATTEMPTS = 5  # a status update by the kubelet between our read and write is a conflict


@dataclass
class Summary:
    managed: int = 0
    resized: int = 0  # resized back to the originals, annotations removed
    cleaned: int = 0  # spec already at the originals: annotations removed only
    gone: int = 0  # deleted meanwhile
    failed: dict[str, str] = field(default_factory=dict)  # pod -> why (annotations kept)
    held: dict[str, str] = field(default_factory=dict)  # pod -> why its spec is left as it is
    interrupted: bool = False
    denied: bool = False  # the apiserver refuses these credentials the writes (see Denied)

    @property
    def done(self) -> int:
        return self.resized + self.cleaned + self.gone


@dataclass(eq=False)
class Restorer:
    client: KubeClient
    rate: float  # pods per second at most
    dry_run: bool
    out: TextIO
    keyring: KeyRing = EMPTY_KEYRING
    scope: NamespaceScope = field(default_factory=NamespaceScope)
    remove_unverified: bool = False
    progress: Progress = field(default_factory=lambda: Progress("restore", "pods", enabled=False))
    stop: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    summary: Summary = field(default_factory=Summary, init=False)
    _namespace_labels: dict[str, dict[str, str]] = field(default_factory=dict, init=False)
    _next: float = field(default=0.0, init=False)
    _resized_now: dict[str, dict[str, Any]] = field(default_factory=dict, init=False)  # pod uid -> the patch sent

    async def run(self, page_size: int, namespace: str = "") -> Summary:
        collection = f"/api/v1/namespaces/{namespace}/pods" if namespace else "/api/v1/pods"
        pods = [
            pod
            for pod in await list_all(self.client, collection, page_size, slim_pod)
            if controller_owned_keys(read_state(pod)) and "deletionTimestamp" not in pod["metadata"]
        ]
        self.summary.managed = len(pods)
        if self.scope.needs_labels:
            self._namespace_labels = await namespace_labels(self.client, page_size)
        self._say(
            f"{len(pods)} pods carry workload-resizer.io annotations"
            + (" (dry run: nothing is changed)" if self.dry_run else "")
        )
        if pods:
            await self._preflight(pods[0])
        self.progress.start(len(pods))
        try:
            for pod in pods:
                if self.stop.is_set():
                    self.summary.interrupted = True
                    break
                await self._pace()
                await self._restore(pod)
                self.progress.advance()
        finally:
            self.progress.finish()
        return self.summary

    async def _preflight(self, pod: dict[str, Any]) -> None:
        """Before changing anything: may these credentials remove the annotations? (A dry-run
        request goes through admission, so the chart's policy answers as for the real one.)"""
        body = strip_controller_owned(read_state(pod))
        try:
            await self.client.request("PATCH", pod_path(pod), body, MERGE_PATCH, params={"dryRun": "All"})
        except ApiError as err:
            if err.status == 403:
                raise Denied(err) from None
            # Anything else (the pod went away, a conflict...) is handled pod by pod.

    async def _pace(self) -> None:
        now = time.monotonic()
        if self._next > now:
            await asyncio.sleep(self._next - now)
        self._next = max(now, self._next) + 1.0 / self.rate

    async def _restore(self, pod: dict[str, Any]) -> None:
        name = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        for attempt in range(ATTEMPTS):
            try:
                if attempt:  # the pod changed since it was read
                    pod = await self.client.get(pod_path(pod))
                outcome = await self._restore_once(pod)
            except _Conflict:
                continue
            except OriginalsError as err:
                self._fail(name, f"unusable original annotation: {err}")
                return
            except ApiError as err:
                if err.status == 404:
                    self.summary.gone += 1
                    return
                if err.status == 403 and _policy_denial(err):
                    raise Denied(err) from None  # every other pod would be denied the same way
                self._fail(name, f"{err.status} {err.message}")
                return
            except OSError as err:
                self._fail(name, f"cannot reach the apiserver: {err}")
                return
            if outcome is not None:
                self._say(f"{name}: {outcome}")
            return
        self._fail(name, "the pod kept changing (is the reconciler still running?)")

    async def _restore_once(self, pod: dict[str, Any]) -> str | None:
        keys = controller_owned_keys(read_state(pod))
        if not keys:
            self.summary.cleaned += 1  # someone else finished it meanwhile
            return None
        decision = restore_decision(
            pod, self.keyring, self.scope, self._namespace_labels.get(pod["metadata"]["namespace"])
        )
        if decision.held is not None and not self.remove_unverified:
            self.summary.held[f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"] = decision.held
            return f"left as it is: {decision.held}; its annotations are kept"
        patch = decision.patch
        if self.dry_run:
            self.summary.resized += bool(patch)
            self.summary.cleaned += not patch
            return (
                f"would resize back: {json.dumps(patch['spec'])}" if patch else f"would remove {len(keys)} annotations"
            )
        if patch:
            await self.client.patch(pod_path(pod, "resize"), patch, STRATEGIC_MERGE_PATCH)
            self._resized_now[pod["metadata"].get("uid", "")] = patch
            # The originals stay until the spec holds them: removing them is the second write.
            pod = await self.client.get(pod_path(pod))
            if restore_decision(pod, self.keyring).patch:
                raise _Conflict()
        body = strip_controller_owned(read_state(pod), pod["metadata"]["resourceVersion"])
        try:
            await self.client.patch(pod_path(pod), body, MERGE_PATCH)
        except ApiError as err:
            if err.status == 409:
                raise _Conflict() from None
            raise
        sent = self._resized_now.get(pod["metadata"].get("uid", ""))
        if decision.held is not None:
            self.summary.cleaned += 1
            return f"left as it is ({decision.held}); annotations removed (--remove-unverified)"
        if sent is not None:
            self.summary.resized += 1
            return f"resized back to its originals {_describe(sent)}; annotations removed"
        self.summary.cleaned += 1
        return "already at its originals; annotations removed"

    def _fail(self, name: str, why: str) -> None:
        self.summary.failed[name] = why
        self._say(f"{name}: NOT restored ({why}); its annotations are kept")

    def _say(self, line: str) -> None:
        self.progress.say(line, self.out)


class _Conflict(CommandError):
    """The pod changed between our read and our write."""


class Denied(CommandError):
    """The apiserver refuses these credentials the writes restore needs (RBAC or admission policy)."""

    def __init__(self, err: ApiError) -> None:
        super().__init__(err.message)
        self.error = err

    def explain(self) -> str:
        lines = [
            f"error: the apiserver denied the change ({self.error.status} {self.error.reason}): {self.error.message}"
        ]
        if _policy_denial(self.error):
            lines += [
                "workload-resizer's admission policy lets only its reconciler and the exempt admins edit",
                f"{described_keys()} annotations of existing pods. Run restore with credentials in one of",
                "the chart's admissionPolicy.exemptGroups (default: system:masters, e.g. the cluster-admin",
                "kubeconfig) or admissionPolicy.exemptUsers, or uninstall the chart first (its policies go",
                "with it) and run restore then.",
            ]
        else:
            lines.append("restore needs get/list/patch on pods and patch on pods/resize in every namespace.")
        return "\n".join(lines)


def _policy_denial(err: ApiError) -> bool:
    return "ValidatingAdmissionPolicy" in err.message


def _describe(patch: dict[str, Any]) -> str:
    parts = []
    spec = patch["spec"]  # containers, then sidecars (initContainers), then the pod level
    levels = [(c["name"], c["resources"]) for c in [*spec.get("containers", []), *spec.get("initContainers", [])]]
    if spec.get("resources"):
        levels.append(("pod level", spec["resources"]))
    for name, changed in levels:
        values = ", ".join(
            f"{kind} {resource}={value}" for kind, resources in changed.items() for resource, value in resources.items()
        )
        parts.append(f"{name}: {values}")
    return "(" + "; ".join(parts) + ")"


async def _bounded(restorer: Restorer, work: Coroutine[Any, Any, Summary], grace: float) -> Summary:
    """`work`, given at most `grace` seconds after a signal to finish the pod in progress, then
    cancelled (a pod keeps its annotations until its spec holds the originals: a rerun finishes it)."""
    task = asyncio.ensure_future(work)
    stopping = asyncio.ensure_future(restorer.stop.wait())
    try:
        await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if not task.done():
            await asyncio.wait({task}, timeout=grace)
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            restorer.summary.interrupted = True
            return restorer.summary
        return task.result()
    finally:
        stopping.cancel()


def run_restore(settings: RestoreSettings, out: TextIO = sys.stdout) -> int:
    started = time.monotonic()

    async def go(client: KubeClient) -> Summary:
        try:
            keyring, warning = await load_keyring(client, settings.keys)
        except (KeyRingError, KeyDirectoryError) as err:
            out.write(f"error: originals keys: {err}\n")
            return Summary(failed={"(keys)": str(err)})
        if warning:
            out.write(
                f"warning: {warning}; pods whose spec changed since admission, or whose signed originals "
                f"differ from their spec (sized at admission), are left as they are\n"
            )
        restorer = Restorer(
            client,
            settings.max_resizes_per_second,
            settings.dry_run,
            out,
            keyring,
            settings.scope,
            settings.remove_unverified,
            Progress("restore", "pods"),
        )
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, restorer.stop.set)
        try:
            return await _bounded(
                restorer, restorer.run(settings.api.page_size, settings.only_namespace), settings.shutdown_timeout
            )
        except Denied as denied:
            out.write(denied.explain() + "\n")
            restorer.summary.denied = True
            return restorer.summary
        except (ApiError, OSError) as err:
            out.write(f"error: cannot list pods: {err}\n")
            restorer.summary.failed["(list)"] = str(err)
            return restorer.summary

    summary = run_command(settings.api, go, max_connections=4)
    if isinstance(summary, int):
        return summary
    if summary.denied:
        out.write(
            f"Stopped: {summary.done} of {summary.managed} managed pods restored before the denial; "
            "run again with such credentials to finish.\n"
        )
        return 1
    verb = "would be" if settings.dry_run else "were"
    out.write(
        f"Summary: {summary.managed} managed pods; {summary.resized} {verb} resized back to their originals, "
        f"{summary.cleaned} {'would only lose' if settings.dry_run else 'only lost'} their annotations, "
        f"{summary.gone} disappeared meanwhile, {len(summary.held)} left as they are, "
        f"{len(summary.failed)} failed; {time.monotonic() - started:.1f}s.\n"
    )
    for title, pods in (
        ("Left as they are (spec unchanged, annotations kept; --remove-unverified removes them)", summary.held),
        ("Failed (annotations kept, run again once fixed)", summary.failed),
    ):
        if pods:
            out.write(f"{title}:\n" + "".join(f"  {name}: {why}\n" for name, why in pods.items()))
    if summary.interrupted:
        out.write("Interrupted: run the same command again to finish.\n")
        return 130
    return 1 if summary.failed or summary.held else 0
