"""workload-resizer mutating admission webhook.

Stamps each eligible pod's baseline ``original-*`` annotations at pod CREATE
so the reconciler can later resize the pod in place from what the author wrote,
never compounding. Run with ``python -m app``.
"""
