"""A real Prometheus (hack/tools' pinned one) on 127.0.0.1, scraping the processes a test runs.

prom = Prometheus([ScrapeJob("workload-resizer-reconciler", ["127.0.0.1:8080"])], rule_files=[path])
prom.wait_ready()
prom.query('sum(up{job="workload-resizer-reconciler"})')     # the API's result list
prom.close()
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from devkit.processes import Process, free_port
from devkit.tempdirs import temporary_directory
from devkit.tools import ensure_tool


@dataclass(frozen=True)
class ScrapeJob:
    name: str
    targets: list[str]
    ca_file: str | None = None  # set: scraped over HTTPS, verified against this CA

    def config(self) -> dict[str, Any]:
        job: dict[str, Any] = {"job_name": self.name, "static_configs": [{"targets": self.targets}]}
        if self.ca_file is not None:
            job["scheme"] = "https"
            job["tls_config"] = {"ca_file": self.ca_file}
        return job


class Prometheus(Process):
    def __init__(
        self,
        jobs: list[ScrapeJob],
        rule_files: list[Path] | None = None,
        interval: str = "1s",
        name: str = "prometheus",
    ) -> None:
        self.port = free_port()
        self.directory = temporary_directory("prometheus-")
        config = {
            "global": {"scrape_interval": interval, "scrape_timeout": interval, "evaluation_interval": interval},
            "rule_files": [str(p) for p in rule_files or ()],
            "scrape_configs": [job.config() for job in jobs],
        }
        config_file = self.directory / "prometheus.yml"
        config_file.write_text(json.dumps(config))  # JSON is YAML
        argv = [
            ensure_tool("prometheus"),
            f"--config.file={config_file}",
            f"--storage.tsdb.path={self.directory / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--storage.tsdb.retention.time=1h",
            "--log.level=warn",
        ]
        super().__init__(name, argv, log_path=self.directory / "prometheus.log")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def ready(self) -> bool:
        try:
            return httpx.get(f"{self.url}/-/ready", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def api(self, path: str, **params: str) -> Any:
        resp = httpx.get(f"{self.url}/api/v1/{path}", params=params, timeout=10)
        body = resp.json()
        if body.get("status") != "success":
            raise AssertionError(f"Prometheus /api/v1/{path} {params}: {resp.status_code} {body}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector `expr` evaluates to now (a scalar comes back as one sample)."""
        data = self.api("query", query=expr)
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": data["result"]}]
        return list(data["result"])

    def targets(self) -> list[dict[str, Any]]:
        return list(self.api("targets")["activeTargets"])

    def alerts(self) -> list[dict[str, Any]]:
        return list(self.api("alerts")["alerts"])
