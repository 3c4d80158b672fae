"""The admin commands' errors: one tree under ``CommandError``.

``commands.plan.run_command`` reports a ``CommandError`` that reaches it as the admin's to fix
(``error: ...``, exit code 2). Each subclass is defined next to the code that raises it (module
in parentheses):

    CommandError           a problem the admin must fix (bad config, unreachable cluster, missing ConfigMap)
    ├── BenchmarkError     (calibrate) one benchmark run failed; the message says what the pod did
    └── Denied             (restore) the apiserver refuses the writes restore needs (RBAC, admission policy)
"""


class CommandError(Exception):
    """A problem the admin must fix (bad config, unreachable cluster, missing ConfigMap)."""
