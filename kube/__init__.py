"""A small client-go-like Kubernetes client: raw JSON over pooled keep-alive connections,
informers, a work queue, leader election and an event recorder.

It imports nothing of the controller (import-linter enforces it), so it could stand alone.
"""

from kube.client import JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH, ApiError, KubeClient, TransportError
from kube.credentials import Credentials, load_credentials
from kube.errors import KubeError

__all__ = [
    "JSON_PATCH",
    "MERGE_PATCH",
    "STRATEGIC_MERGE_PATCH",
    "ApiError",
    "Credentials",
    "KubeClient",
    "KubeError",
    "TransportError",
    "load_credentials",
]
