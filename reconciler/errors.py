"""The reconciler's own errors: one tree under ``ReconcilerError``.

What the reconciler meets from below keeps its own tree: ``kube.errors.KubeError`` for the
apiserver, ``resizer.errors.ResizerError`` for a pod or config the core refuses. Each class is
defined next to the code that raises it (module in parentheses):

    ReconcilerError        anything the reconciler raises of its own
    └── KeySecretError     (originals_keys) the originals keys Secret cannot be read, created or used
"""


class ReconcilerError(Exception):
    """Anything the reconciler raises of its own."""
