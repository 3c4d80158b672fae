"""The webhook's own errors: one tree under ``WebhookError``.

What the webhook meets from below keeps its own tree: ``kube.errors.KubeError`` for the
apiserver, ``resizer.errors.ResizerError`` for a pod or config the core refuses. Each class is
defined next to the code that raises it (module in parentheses):

    WebhookError           anything the webhook raises of its own
    ├── CertError          (tls) a certificate/key pair that must not be served
    ├── WorkerFailure      (worker) a review worker could not decide: ``reason`` is crash, timeout or error
    └── WorkersBusy        (worker) no review worker became free within the time box (or they are stopped)
"""


class WebhookError(Exception):
    """Anything the webhook raises of its own."""
