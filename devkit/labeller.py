"""Another mutating webhook, as clusters have (a mesh injector, a policy engine): it adds a label.

    labeller = LabellingWebhook("example.com/labelled", "yes")
    kube.create(MUTATING_WEBHOOKS, labeller.configuration("zz-labeller", [namespace]))
    ...
    labeller.reviewed       # the pods it was sent, as they were when it was called
    labeller.close()

It serves HTTPS on 127.0.0.1 from a thread of the test process. The apiserver calls mutating
webhooks in the order of their configurations' names: a name sorting after another
configuration's puts this one after it, and a change it makes reinvokes the earlier webhooks
whose reinvocationPolicy is IfNeeded.
"""

from __future__ import annotations

import base64
import json
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from devkit.processes import WebhookCerts


class LabellingWebhook:
    def __init__(self, key: str, value: str) -> None:
        self.key, self.value = key, value
        self.certs = WebhookCerts()
        self.reviewed: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                body = json.dumps(owner.answer(review)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # quiet under pytest
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.certs.cert_file, self.certs.key_file)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self._thread = threading.Thread(target=self.server.serve_forever, name="labelling-webhook", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.server.server_address[1]}/mutate"

    def answer(self, review: dict[str, Any]) -> dict[str, Any]:
        request = review["request"]
        pod = request["object"]
        with self._lock:
            self.reviewed.append(pod)
        labels = pod["metadata"].get("labels")
        escaped = self.key.replace("~", "~0").replace("/", "~1")
        patch = (
            [{"op": "add", "path": f"/metadata/labels/{escaped}", "value": self.value}]
            if labels
            else [{"op": "add", "path": "/metadata/labels", "value": {self.key: self.value}}]
        )
        return {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": {
                "uid": request["uid"],
                "allowed": True,
                "patchType": "JSONPatch",
                "patch": base64.b64encode(json.dumps(patch).encode()).decode(),
            },
        }

    def configuration(self, name: str, namespaces: list[str]) -> dict[str, Any]:
        """Its MutatingWebhookConfiguration, for pods created in `namespaces` (failurePolicy Fail:
        a pod it did not label is not created, so a test never passes without it)."""
        return {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": [
                {
                    "name": "labeller.example.com",
                    "clientConfig": {"url": self.url, "caBundle": self.certs.ca_bundle},
                    "rules": [
                        {
                            "operations": ["CREATE"],
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "resources": ["pods"],
                            "scope": "Namespaced",
                        }
                    ],
                    "namespaceSelector": {
                        "matchExpressions": [
                            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": namespaces}
                        ]
                    },
                    "failurePolicy": "Fail",
                    "sideEffects": "None",
                    "admissionReviewVersions": ["v1"],
                    "timeoutSeconds": 5,
                    "reinvocationPolicy": "Never",
                }
            ],
        }

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
