"""Every version of the pods of a namespace, as the apiserver stored them, for "never" assertions.

    history = PodHistory(kube, namespace)      # before the namespace has pods
    ...                                        # the test's workloads come and change
    history.settle()                           # everything stored so far has been seen
    for version in history.versions(name): ... # oldest first
    history.close()

A watch from the resourceVersion of a first list misses no version: a value a pod held for a
moment (say, between a resize and its revert) is in the history even when no poll would have
seen it. The watch runs in a thread of its own, on a connection of its own.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import httpx

from devkit.kube import Kube, wait_for

# How long one watch request lasts: the thread looks at its stop flag at least this often.
WATCH_SECONDS = 5


class PodHistory:
    def __init__(self, kube: Kube, namespace: str) -> None:
        self.path = f"/api/v1/namespaces/{namespace}/pods"
        self._versions: dict[str, list[dict[str, Any]]] = {}
        self._seen: set[str] = set()  # resourceVersions recorded
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.error: str | None = None
        listing = kube.get(self.path)
        for pod in listing["items"]:
            self._record(pod)
        self._client = httpx.Client(
            base_url=kube.server,
            verify=kube.tls,
            headers=dict(kube.http.headers),
            timeout=httpx.Timeout(30.0, read=WATCH_SECONDS + 30.0),
        )
        self._thread = threading.Thread(
            target=self._run,
            args=(listing["metadata"]["resourceVersion"],),
            name=f"pod-history-{namespace}",
            daemon=True,
        )
        self._thread.start()

    def _record(self, pod: dict[str, Any]) -> None:
        with self._lock:
            self._versions.setdefault(pod["metadata"]["name"], []).append(pod)
            self._seen.add(pod["metadata"]["resourceVersion"])

    def _run(self, resource_version: str) -> None:
        try:
            while not self._stop.is_set():
                resource_version = self._watch(resource_version)
        except Exception as err:  # reported by versions() and settle()
            if not self._stop.is_set():
                self.error = repr(err)
        finally:
            self._client.close()

    def _watch(self, resource_version: str) -> str:
        params = {
            "watch": "true",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(WATCH_SECONDS),
        }
        with self._client.stream("GET", self.path, params=params) as response:
            if response.status_code != 200:
                raise RuntimeError(f"watch {self.path}: HTTP {response.status_code}")
            for line in response.iter_lines():
                if not line:
                    continue
                event = json.loads(line)
                if event["type"] == "ERROR":  # e.g. 410 Gone: versions were missed
                    raise RuntimeError(f"watch {self.path}: {event['object'].get('message')}")
                resource_version = event["object"]["metadata"]["resourceVersion"]
                if event["type"] != "BOOKMARK":
                    self._record(event["object"])
        return resource_version

    def _check(self) -> None:
        if self.error is not None:
            raise AssertionError(f"the watch of {self.path} failed, the history is incomplete: {self.error}")

    def settle(self, kube: Kube, timeout: float = 30) -> None:
        """Wait until every pod's current version (a list now) has been recorded."""
        current = {p["metadata"]["resourceVersion"] for p in kube.get(self.path)["items"]}

        def recorded() -> bool:
            self._check()
            with self._lock:
                return current <= self._seen

        wait_for(f"the watch of {self.path} to catch up", recorded, timeout=timeout, interval=0.1)

    def names(self) -> list[str]:
        self._check()
        with self._lock:
            return sorted(self._versions)

    def versions(self, name: str) -> list[dict[str, Any]]:
        """Every recorded version of pod `name`, oldest first (the deletion's last)."""
        self._check()
        with self._lock:
            return list(self._versions.get(name, []))

    def close(self) -> None:
        """Stop watching (the thread ends with its current request, at most WATCH_SECONDS later)."""
        self._stop.set()
