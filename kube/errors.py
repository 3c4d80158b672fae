"""The errors of the Kubernetes client: one tree under ``KubeError``.

A caller that means "the apiserver said no or could not be asked" catches ``KubeError``. The
transport errors stay ``ConnectionError``s and the configuration's error a ``ValueError``, as
the standard library would raise them. Each class is defined next to the code that raises it
(module in parentheses):

    KubeError              anything the client raises
    ├── ApiError           (client) a non-2xx answer from the apiserver, with its Status body
    │   └── NotLeader      (leader) a write refused locally: this instance is not surely the leader
    ├── TransportError     (client) a ConnectionError: apiserver unreachable, connection broken, timeout
    │   └── WatchIdle      (client) a watch silent (not even a bookmark) for its idle timeout
    ├── ServerClosed       (transport) a ConnectionError: a kept-alive connection closed before the answer
    ├── WatchExpired       (client) the resourceVersion a watch resumes from is too old (410 Gone): re-list
    ├── ShortWatch         (informer) a watch stream ended at once without delivering anything
    ├── CredentialsError   (credentials) a ValueError: the configuration names no usable apiserver or credentials
    └── LeadershipLost     (leader) the lease could not be renewed within the renew deadline: stop all work

``KubeClient`` sends again on ``ServerClosed`` and wraps what remains in ``TransportError``.
"""


class KubeError(Exception):
    """Anything the Kubernetes client raises."""
