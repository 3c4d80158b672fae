"""kube.discovery: whether the apiserver serves a resource."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kube import ApiError
from kube.discovery import served_in, serves

PATH = "/apis/autoscaling.k8s.io/v1"


def test_served_in_reads_the_discovery_document() -> None:
    resource = "verticalpodautoscalers"
    assert served_in({"resources": [{"name": "verticalpodautoscalers/status"}, {"name": resource}]}, resource)
    assert not served_in({"resources": [{"name": "verticalpodautoscalercheckpoints"}]}, resource)
    assert not served_in({}, resource) and not served_in({"resources": "x"}, resource)
    assert not served_in({"resources": ["x"]}, resource)


class Discovery:
    def __init__(self, answer: dict[str, Any] | ApiError) -> None:
        self.answer = answer

    async def get(self, path: str) -> dict[str, Any]:
        assert path == PATH
        if isinstance(self.answer, ApiError):
            raise self.answer
        return self.answer


def test_a_group_version_not_served_is_no_resource_and_other_failures_raise() -> None:
    def ask(answer: dict[str, Any] | ApiError) -> bool:
        return asyncio.run(serves(Discovery(answer), PATH, "things"))  # type: ignore[arg-type]

    assert ask({"resources": [{"name": "things"}]}) and not ask({"resources": []})
    assert not ask(ApiError(404, {"reason": "NotFound"}))
    with pytest.raises(ApiError):
        ask(ApiError(403, {"reason": "Forbidden"}))
