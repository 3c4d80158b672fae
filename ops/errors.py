"""The errors of the shared operational helpers: one tree under ``OpsError``.

Each class is defined next to the code that raises it (module in parentheses):

    OpsError               anything the helpers raise
    └── KeyDirectoryError  (keys) a ValueError: the key directory holds no usable key, or a malformed one
"""


class OpsError(Exception):
    """Anything the shared operational helpers raise."""
